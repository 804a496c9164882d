"""Small ranges at the log tail read one after the other by one kept consumer, as a Spark
task of combined ranges (or a Python worker's next task) reads them:

    .venv/bin/python bench/tail_ranges.py [--rounds 25]

A broker subprocess, a topic of 3 partitions; each round commits 5 transactions of one
record per partition, then reads the 3 new ranges in turn through `consume.read_range`
with the worker's kept consumer. It prints the median and worst milliseconds of each
range's read, for the connector's fetch settings and for the same with
`kafka.fetch.wait.max.ms=10` (its earlier default), alternating round by round. A range
after another partition's waits for the fetch the broker holds at the end of that range
(fetch.wait.max.ms) before its own fetch is sent. Every range must return its 5 records.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

from common import create_topics, load_average
from oncelog.spark.client import Cluster
from oncelog.spark.consume import KeptConsumers, read_range
from oncelog.spark.offsets import OffsetRange
from oncelog.spark.options import parse_read_options
from oncelog.testing.process import BrokerProcess

PARTITIONS = 3
PER_ROUND = 5  # transactions a round, one record in each partition each
VARIANTS = {"defaults": {}, "fetch.wait.max.ms=10": {"kafka.fetch.wait.max.ms": "10"}}


def measure(bootstrap: str, rounds: int) -> dict[str, list[list[float]]]:
    create_topics(bootstrap, ["tail"], PARTITIONS)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "bench-ranges"})
    producer.init_transactions(30)
    tps = [("tail", p) for p in range(PARTITIONS)]
    cluster = Cluster({"bootstrap.servers": bootstrap})
    pools = {name: KeptConsumers() for name in VARIANTS}
    options = {
        name: parse_read_options(
            {"kafka.bootstrap.servers": bootstrap, "subscribe": "tail", **extra}, streaming=True
        )
        for name, extra in VARIANTS.items()
    }
    times: dict[str, list[list[float]]] = {name: [] for name in VARIANTS}
    start = cluster.offsets(tps, "latest", True)
    try:
        for r in range(rounds):
            for name in VARIANTS if r % 2 == 0 else reversed(VARIANTS):
                for _ in range(PER_ROUND):
                    producer.begin_transaction()
                    for p in range(PARTITIONS):
                        producer.produce("tail", b"x", partition=p)
                    producer.commit_transaction(30)
                time.sleep(0.05)  # nothing of the last round's reads is in flight
                end = cluster.offsets(tps, "latest", True)
                took = []
                for topic, p in tps:
                    began = time.perf_counter()
                    rng = OffsetRange(topic, p, start[(topic, p)], end[(topic, p)])
                    rows = sum(b.num_rows for b in read_range(options[name], rng, "g", pools[name]))
                    took.append((time.perf_counter() - began) * 1000)
                    if rows != PER_ROUND:
                        raise RuntimeError(f"{rng}: {rows} records, not {PER_ROUND}")
                times[name].append(took)
                start = end
    finally:
        for pool in pools.values():
            pool.close()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=25)
    args = parser.parse_args()
    print(f"start: {load_average()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="oncelog-bench-ranges-") as tmp:
        with BrokerProcess(Path(tmp) / "broker", {"num.partitions": str(PARTITIONS)}) as broker:
            times = measure(broker.bootstrap_servers, args.rounds)
    print(f"end: {load_average()}")
    for name, rounds in times.items():
        steady = rounds[2:]  # the first rounds make the consumer and learn the leaders
        cells = ", ".join(
            f"range {i}: median {statistics.median(t[i] for t in steady):5.1f} ms, "
            f"worst {max(t[i] for t in steady):5.1f}"
            for i in range(PARTITIONS)
        )
        print(f"  {name:<22} {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
