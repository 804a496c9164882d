"""Read back topics of numbered records (each value is its sequence number as text)."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition

READ_TIMEOUT_S = 60


def read_numbered(
    consumer: Consumer, topic: str, partitions: int, timeout_s: float
) -> dict[int, list[tuple[int, int]]]:
    """(offset, number) of every record per partition, up to the high watermarks; the
    offsets of each partition must be contiguous from 0."""
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout_s)[1]
        for p in range(partitions)
    }
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions) if ends[p] > 0])
    got: dict[int, list[tuple[int, int]]] = {p: [] for p in range(partitions)}
    total, read = sum(ends.values()), 0
    deadline = time.monotonic() + READ_TIMEOUT_S
    while read < total:
        assert time.monotonic() < deadline, f"read {read} of {total} records in {READ_TIMEOUT_S} s"
        for msg in consumer.consume(num_messages=10_000, timeout=0.5):
            assert msg.error() is None, msg.error()
            got[msg.partition()].append((msg.offset(), int(msg.value())))
            read += 1
    for p, rows in got.items():
        assert [offset for offset, _ in rows] == list(range(ends[p])), f"partition {p}: offsets"
    return got
