"""The verifier: reads a topic with a plain confluent-kafka consumer (not the Spark
reader), assign() from the first offset up to the last stable offset, and counts orders."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from oncelog.pipeline.orders import customers, expected_enrichment, generate

DEADLINE_S = 120.0


@dataclass
class Verification:
    """What the verifier counted; ``ok`` when every order is in the output exactly once."""

    orders_in: int = 0  # committed orders in the source topic
    orders_out: int = 0  # records in the output under read_committed
    duplicates: int = 0
    missing: int = 0
    unexpected: int = 0  # order ids that were never generated, or unreadable records
    wrong: int = 0  # enriched differently from what the customer table says
    uncommitted_out: int = 0  # output records only read_uncommitted sees (aborted attempts)
    counts: Counter[int] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return (
            self.orders_out == self.orders_in
            and self.duplicates == 0
            and self.missing == 0
            and self.unexpected == 0
            and self.wrong == 0
        )


def read_topic(
    bootstrap: str,
    topic: str,
    isolation: str = "read_committed",
    on_record: Callable[[Any], None] | None = None,
    client_config: dict[str, str] | None = None,
) -> list[bytes | None]:
    """Every value of `topic`, from offset 0 to the end a consumer of `isolation` can see
    (the last stable offset under read_committed) as listed when the read starts."""
    from confluent_kafka import Consumer, IsolationLevel, KafkaError, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    base: dict[str, str | int | float | bool] = {
        "bootstrap.servers": bootstrap,
        **(client_config or {}),
    }
    admin = AdminClient(base)
    parts = sorted(admin.list_topics(topic, timeout=30).topics[topic].partitions)
    level = (
        IsolationLevel.READ_COMMITTED
        if isolation == "read_committed"
        else IsolationLevel.READ_UNCOMMITTED
    )
    futures = admin.list_offsets(
        {TopicPartition(topic, p): OffsetSpec.latest() for p in parts},
        isolation_level=level,
        request_timeout=30,
    )
    ends = {tp.partition: f.result().offset for tp, f in futures.items()}
    consumer = Consumer(
        {
            **base,
            "group.id": f"oncelog-verifier-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    values: list[bytes | None] = []  # None: a record without a value (counted as unreadable)
    pending = {p for p in parts if ends[p] > 0}
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    deadline = time.monotonic() + DEADLINE_S
    try:
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{topic}: partitions {sorted(pending)} not read to their end "
                    f"{ends} within {DEADLINE_S} s"
                )
            for message in consumer.consume(num_messages=5000, timeout=0.5):
                error = message.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"{topic}: {error.str()}")
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None  # records and EOF have both
                if offset >= ends[partition]:  # at or past the end listed at the start
                    pending.discard(partition)
                    continue
                if error is not None:  # end of partition for now: more is still to come
                    continue
                values.append(message.value())
                if on_record is not None:
                    on_record(message)
                if offset >= ends[partition] - 1:
                    pending.discard(partition)
    finally:
        consumer.close()
    return values


def verify(
    bootstrap: str,
    source_topic: str,
    target_topic: str,
    orders: int,
    *,
    seed: int = 1,
    client_config: dict[str, str] | None = None,
) -> Verification:
    """Count every order: in the source (committed), in the output (committed), duplicates,
    missing, and check each output record's enrichment against the customer table."""
    result = Verification()
    result.orders_in = len(read_topic(bootstrap, source_topic, client_config=client_config))
    table = {c["customer_id"]: c for c in customers()}
    expected = {o["order_id"]: expected_enrichment(o, table) for o in generate(orders, seed)}
    for value in read_topic(bootstrap, target_topic, client_config=client_config):
        result.orders_out += 1
        if value is None:  # a record without a value is no order
            result.unexpected += 1
            continue
        try:
            record = json.loads(value)
            order_id = int(record["order_id"])
        except (ValueError, KeyError, TypeError):
            result.unexpected += 1
            continue
        if order_id not in expected:
            result.unexpected += 1
            continue
        result.counts[order_id] += 1
        if not matches(record, expected[order_id]):
            result.wrong += 1
    result.duplicates = sum(n - 1 for n in result.counts.values() if n > 1)
    result.missing = sum(1 for order_id in expected if order_id not in result.counts)
    uncommitted = len(
        read_topic(bootstrap, target_topic, "read_uncommitted", client_config=client_config)
    )
    result.uncommitted_out = max(uncommitted - result.orders_out, 0)
    return result


def matches(record: dict[str, Any], want: dict[str, Any]) -> bool:
    """`record` has every field of `want`, its floats within a cent."""
    for key, value in want.items():
        got = record.get(key)
        if isinstance(value, float):
            # Spark rounds half-up on the decimal expansion, Python half-even on the binary
            if not isinstance(got, (int, float)) or abs(got - value) > 0.011:
                return False
        elif got != value:
            return False
    return True
