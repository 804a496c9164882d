"""What the broker tests do with confluent-kafka groups: commit, read back, consume."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition

TIMEOUT_S = 20.0


def produce_values(bootstrap: str, topic: str, count: int) -> None:
    """`count` records to partition 0 of `topic`, acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, b"value-%d" % i, partition=0)
    assert producer.flush(TIMEOUT_S) == 0


def commit_offset(bootstrap: str, group: str, topic: str, offset: int) -> None:
    """Commit `offset` for partition 0 of `topic` without joining the group."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def committed(bootstrap: str, group: str, topic: str) -> int:
    """The offset `group` committed for partition 0 of `topic`."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        (tp,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        return tp.offset
    finally:
        consumer.close()


def consume_as_group(bootstrap: str, group: str, topic: str, count: int, *, commit: bool) -> int:
    """Join `group` (subscribe), read up to `count` records of `topic` from the earliest
    offset, commit them if asked; how many were read."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        seen = 0
        deadline = time.monotonic() + TIMEOUT_S
        while seen < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen += 1
        if commit and seen:
            consumer.commit(asynchronous=False)
        return seen
    finally:
        consumer.close()
