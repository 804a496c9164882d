"""Client-side helpers shared by the end-to-end transaction tests (bounded in time)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

if TYPE_CHECKING:
    from oncelog.testing import EmbeddedBroker

TIMEOUT_S = 20.0
FAST_START = {"transaction.state.log.num.partitions": "4"}


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions)])[name].result(TIMEOUT_S)


def txn_producer(bootstrap: str, transactional_id: str, **conf: Any) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 2,
            **conf,
        }
    )
    producer.init_transactions(TIMEOUT_S)
    return producer


def produce_flushed(producer: Producer, topic: str, values: list[tuple[int, bytes]]) -> list[Any]:
    """Produce (partition, value) pairs and flush; return the delivery errors (None = ok)."""
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        errors.append(err)

    for partition, value in values:
        producer.produce(topic, value=value, partition=partition, on_delivery=on_delivery)
    assert producer.flush(TIMEOUT_S) == 0, "flush did not finish"
    return errors


def plain_produce(bootstrap: str, topic: str, values: list[tuple[int, bytes]]) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 2, "enable.idempotence": True}
    )
    errors = produce_flushed(producer, topic, values)
    assert errors == [None] * len(values), errors


def wait_until(
    predicate: Callable[[], bool], timeout_s: float = TIMEOUT_S, what: str = ""
) -> float:
    """Poll `predicate` until true; return the seconds it took; fail after the timeout."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - start


def transactions_ended(broker: EmbeddedBroker, topic: str, partitions: int) -> None:
    """Wait until no transaction is open in any partition of ``topic`` (each one's last
    stable offset at its high watermark). The coordinator answers EndTxn once the PREPARE
    record is durable and appends the markers in the loop step after the answer (as in
    Kafka, markers after the answer), so a test thread reading the broker's state right
    after ``commit_transaction()`` or ``abort_transaction()`` returns may come before
    them; a request over the wire cannot (it is read after that step)."""
    assert broker.broker is not None
    found = [broker.broker.topics.partition(topic, p) for p in range(partitions)]
    wait_until(
        lambda: all(p.last_stable_offset == p.high_watermark for p in found),
        what=f"the markers of {topic}'s transactions",
    )


def read_confluent(
    bootstrap: str, topic: str, ends: dict[int, int], isolation: str, settle_s: float = 0.7
) -> tuple[list[tuple[int, int, bytes | None]], dict[int, int]]:
    """Read `topic` from offset 0 with librdkafka until every partition's position reaches
    `ends[partition]` (or the timeout), then poll `settle_s` more for anything extra.
    Returns the messages (partition, offset, value) and the final positions."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "e2e-unused",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": False,
        }
    )
    tps = [TopicPartition(topic, p, 0) for p in sorted(ends)]
    consumer.assign(tps)
    got: list[tuple[int, int, bytes | None]] = []
    positions: dict[int, int] = {}

    def reached() -> bool:
        nonlocal positions
        positions = {tp.partition: tp.offset for tp in consumer.position(tps)}
        return all(positions[p] >= end for p, end in ends.items())

    def poll(seconds: float) -> None:
        msg = consumer.poll(seconds)
        if msg is None:
            return
        if msg.error() is not None:
            assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
            return
        got.append((msg.partition(), msg.offset(), msg.value()))

    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not reached() and time.monotonic() < deadline:
            poll(0.2)
        settle = time.monotonic() + settle_s
        while time.monotonic() < settle:
            poll(0.1)
        reached()
    finally:
        consumer.close()
    return got, positions


def read_kafka_python(
    bootstrap: str, topic: str, ends: dict[int, int], isolation: str, settle_s: float = 0.7
) -> tuple[list[tuple[int, int, bytes | None]], dict[int, int]]:
    """The same with kafka-python's KafkaConsumer without a group (no coordinator)."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level=isolation,
        auto_offset_reset="earliest",
        request_timeout_ms=30000,
    )
    tps = [KTP(topic, p) for p in sorted(ends)]
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, 0)
    got: list[tuple[int, int, bytes | None]] = []
    positions: dict[int, int] = {}

    def reached() -> bool:
        nonlocal positions
        positions = {tp.partition: consumer.position(tp) for tp in tps}
        return all(positions[p] >= end for p, end in ends.items())

    def poll(ms: int) -> None:
        for records in consumer.poll(timeout_ms=ms).values():
            got.extend((r.partition, r.offset, r.value) for r in records)

    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not reached() and time.monotonic() < deadline:
            poll(200)
        settle = time.monotonic() + settle_s
        while time.monotonic() < settle:
            poll(100)
        reached()
    finally:
        consumer.close()
    return got, positions


def free_port() -> int:
    """A port free on 127.0.0.1 now: a broker restarted on its data keeps its address."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
