"""Helpers for the Spark tests: topics, transactional producers, an independent verifier."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.spark.options import ReadOptions, WriteOptions, parse_read_options, parse_write_options

TASK_ROWS = 40  # the rows of `task_batches`


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int = 2, config: dict | None = None) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(30)
    return name


def produce_transaction(
    bootstrap: str,
    topic: str,
    values: list[bytes],
    *,
    commit: bool = True,
    txn_id: str | None = None,
    partition: int | None = None,
) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": txn_id or unique("txn")}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for value in values:
        kwargs = {} if partition is None else {"partition": partition}
        producer.produce(topic, value=value, key=value[:3], **kwargs)
    producer.flush(30)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def committed_aborted_committed(bootstrap: str, prefix: str) -> tuple[str, list[bytes]]:
    """A topic of one partition: offsets 0-9 committed (marker 10), 11-20 aborted (marker
    21), 22-31 committed (marker 32), by one transactional id; and the 30 values sent."""
    topic = create_topic(bootstrap, unique(prefix), partitions=1)
    txn = unique(prefix)
    values = [b"v%02d" % i for i in range(30)]
    produce_transaction(bootstrap, topic, values[:10], txn_id=txn, partition=0)
    produce_transaction(bootstrap, topic, values[10:20], commit=False, txn_id=txn, partition=0)
    produce_transaction(bootstrap, topic, values[20:], txn_id=txn, partition=0)
    return topic, values


def read_all(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[bytes]:
    """Every value in `topic`, read with a plain confluent consumer (not our reader)."""
    return [message.value() for message in read_messages(bootstrap, topic, isolation)]


def read_messages(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[Any]:
    """Every message of `topic` to its end (value, partition, headers...), read with a
    plain confluent consumer (not our reader)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("verify"),
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    meta = consumer.list_topics(topic, timeout=30).topics[topic]
    parts = sorted(meta.partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    messages: list[Any] = []
    at_end: set[int] = set()
    idle = 0
    while len(at_end) < len(parts) and idle < 40:
        message = consumer.poll(0.25)
        if message is None:
            idle += 1
            continue
        if message.error():
            if message.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(message.partition())
                continue
            raise RuntimeError(message.error())
        at_end.discard(message.partition())
        messages.append(message)
    consumer.close()
    return messages


def run_available_now(writer: Any, timeout_s: float = 120.0) -> Any:
    """Start a DataStreamWriter with trigger availableNow and wait (bounded) until it has
    read everything there was; the query, stopped whatever happened."""
    query = writer.trigger(availableNow=True).start()
    try:
        assert query.awaitTermination(timeout_s), f"the query did not end within {timeout_s} s"
    finally:
        query.stop()
    return query


def task_batches(batch: int) -> list[pa.RecordBatch]:
    """A write task's input for `batch`: TASK_ROWS values in two Arrow batches, as Spark
    hands them over."""
    values = [b"b%d-r%02d" % (batch, i) for i in range(TASK_ROWS)]
    half = TASK_ROWS // 2
    return [
        pa.record_batch([pa.array(values[:half], pa.binary())], names=["value"]),
        pa.record_batch([pa.array(values[half:], pa.binary())], names=["value"]),
    ]


def new_sink(bootstrap: str, topic: str, more: Mapping[str, str] | None = None) -> WriteOptions:
    """The options of a new sink (a sink.id of its own) writing `topic`, and `more`."""
    return parse_write_options(
        {
            "kafka.bootstrap.servers": bootstrap,
            "topic": topic,
            "sink.id": unique("sink"),
            **(more or {}),
        }
    )


def hand_over(records: list[logging.LogRecord]) -> tuple[int, str]:
    """The offset from which librdkafka read on after the Fetch path's one hand-over, and
    why, as `consume.read_range` logs it."""
    (line,) = [r.getMessage() for r in records if "librdkafka reads on" in r.getMessage()]
    offset, _, reason = line.split("reads on: offset ")[1].partition(": ")
    return int(offset), reason


def fetch_read_options(bootstrap: str, topic: str, **extra: str) -> ReadOptions:
    """A batch read's options for the Fetch path's tests; a hand-over gone wrong fails
    within 15 s, not 120."""
    return parse_read_options(
        {
            "kafka.bootstrap.servers": bootstrap,
            "subscribe": topic,
            "kafkaConsumer.pollTimeoutMs": "15000",
            **extra,
        },
        False,
    )


def refuse_librdkafka(*args: object) -> Iterator[pa.RecordBatch]:
    """In place of `consume._consumed`: a range the Fetch path handed over fails the test."""
    raise AssertionError("the range was read through confluent-kafka")
