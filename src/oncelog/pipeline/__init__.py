"""Seed 001's order-enrichment pipeline, the project's main job (`oncelog demo`).

- :mod:`oncelog.pipeline.orders`: the customer table and a deterministic order generator
  (a transactional confluent-kafka producer writing numbered JSON orders to `orders`);
- :mod:`oncelog.pipeline.job`: the Structured Streaming job (`format("oncelog")` in and
  out, read_committed, exactly-once sink), runnable as ``python -m oncelog.pipeline.job``;
- :mod:`oncelog.pipeline.verify`: an independent verifier (plain confluent consumer,
  read_committed, assign() up to the last stable offset);
- :mod:`oncelog.pipeline.demo`: the demonstration with injected faults.

Needs the `spark` extra (pyspark, pyarrow) and Java 17 for the job itself.
"""

__all__ = ["ENRICHED_TOPIC", "ORDERS_TOPIC", "PARTITIONS"]

ORDERS_TOPIC = "orders"
ENRICHED_TOPIC = "enriched-orders"
PARTITIONS = 3
