"""Produce groups of values so that each group is exactly one stored batch.

A short linger.ms does not promise that: on a loaded machine the test thread can be
descheduled between two produce() calls for longer than the linger, and librdkafka then
sends what it holds (linger.ms 20 made [2, 1, 1, 1, 1] of groups [2, 3, 1] with 50 ms
pauses). Here linger.ms is longer than any test, so nothing is sent until flush(), which
overrides linger.ms (librdkafka 1.8+) and sends the whole group as one batch.
"""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import Producer

FLUSH_TIMEOUT_S = 30.0
NEVER_MS = 60_000  # longer than any test, below message.timeout.ms as librdkafka requires


def produce_groups_as_batches(
    bootstrap: str, topic: str, groups: Sequence[Sequence[bytes]], partition: int = 0
) -> None:
    """Each group of values one batch, in order, all with key b"k"."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": NEVER_MS})
    for values in groups:
        for value in values:
            producer.produce(topic, value, key=b"k", partition=partition)
        assert producer.flush(FLUSH_TIMEOUT_S) == 0, "a group was not delivered"
