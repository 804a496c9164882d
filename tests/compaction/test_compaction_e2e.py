"""Compaction end to end: real clients write keys, tombstones, committed and aborted
transactions and idempotent batches to a compacted topic; the broker's cleaner compacts
it while a transaction stays open; then read_committed and read_uncommitted consumers,
a retried idempotent batch and the last stable offset show what compaction kept.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.broker.broker import Broker
from oncelog.client.connection import KafkaConnection
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import Record, build_batch
from oncelog.testing import EmbeddedBroker

TIMEOUT_S = 30.0
RETENTION_MS = 1_500
TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "segment.ms": "300",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": str(RETENTION_MS),
}
BROKER_CONFIG = {
    "log.cleaner.backoff.ms": "100",
    "transaction.state.log.num.partitions": "2",
    "offsets.topic.num.partitions": "2",
}


def wait_until(predicate: Callable[[], bool], what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def live(embedded: EmbeddedBroker) -> Broker:
    assert embedded.broker is not None
    return embedded.broker


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def broker(data_dir: Path) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(BROKER_CONFIG, data_dir=data_dir) as embedded:
        yield embedded


def produce(producer: Producer, topic: str, pairs: list[tuple[bytes, bytes | None]]) -> None:
    failures: list[Any] = []
    for key, value in pairs:
        producer.produce(
            topic, key=key, value=value, partition=0, on_delivery=lambda e, m: failures.append(e)
        )
    assert producer.flush(TIMEOUT_S) == 0
    assert failures == [None] * len(pairs), failures


def read_all(bootstrap: str, topic: str, isolation: str, end: int) -> list[tuple[int, bytes, Any]]:
    """Every record of partition 0 below ``end`` (offset, key, value)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    records = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            position = consumer.position([TopicPartition(topic, 0)])[0].offset
            if position >= end:
                return records
            for message in consumer.consume(100, 0.5):
                if message.error() is None and message.offset() < end:
                    records.append((message.offset(), message.key(), message.value()))
    finally:
        consumer.close()
    raise AssertionError(f"read {len(records)} records, never reached offset {end}")


def latest(records: list[tuple[int, bytes, Any]]) -> dict[bytes, bytes]:
    view: dict[bytes, bytes] = {}
    for _, key, value in records:
        if value is None:
            view.pop(key, None)
        else:
            view[key] = value
    return view


def stable_offsets(bootstrap: str, topic: str) -> tuple[int, int]:
    """(high watermark, last stable offset) of partition 0."""
    with KafkaConnection(bootstrap) as conn:
        ends = []
        for isolation in (0, 1):
            response = conn.request(
                ApiKey.LIST_OFFSETS,
                {
                    "replica_id": -1,
                    "isolation_level": isolation,
                    "timeout": 10_000,
                    "topics": [
                        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}
                    ],
                },
            )
            ends.append(response.topics[0].partitions[0].offset)
    return ends[0], ends[1]


class RawIdempotent:
    """An idempotent producer whose batches we build ourselves, so a batch can be retried
    byte for byte long after it was first answered."""

    def __init__(self, bootstrap: str) -> None:
        with KafkaConnection(bootstrap) as conn:
            answer = conn.request(
                ApiKey.INIT_PRODUCER_ID,
                {
                    "transactional_id": None,
                    "transaction_timeout": 60_000,
                    "producer_id": -1,
                    "producer_epoch": -1,
                },
                version=3,
            )
        assert answer.error_code == ErrorCode.none
        self.producer_id = answer.producer_id

    def batch(self, sequence: int, key: bytes, value: bytes, idempotent: bool = True) -> bytes:
        return build_batch(
            [Record(key, value)],
            producer_id=self.producer_id if idempotent else -1,
            producer_epoch=0 if idempotent else -1,
            base_sequence=sequence if idempotent else -1,
            timestamp_ms=int(time.time() * 1000),
        )


def send(bootstrap: str, topic: str, batch: bytes) -> int:
    with KafkaConnection(bootstrap) as conn:
        response = conn.request(
            ApiKey.PRODUCE,
            {
                "transactional_id": None,
                "acks": -1,
                "timeout": 10_000,
                "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
            },
        )
    answer = response.responses[0].partition_responses[0]
    assert answer.error_code == ErrorCode.none, answer
    return answer.base_offset


def passes(embedded: EmbeddedBroker) -> int:
    return live(embedded).cleaner.status.passes - live(embedded).cleaner.status.passes_discarded


def settle(embedded: EmbeddedBroker, bootstrap: str, topic: str, filler: Producer) -> None:
    """Let the segment age out, add a little dirty data, and wait for one more pass."""
    before = passes(embedded)
    time.sleep(0.4)
    produce(filler, topic, [(b"filler", b"%d" % i) for i in range(20)])
    live(embedded).cleaner.wake()
    wait_until(lambda: passes(embedded) > before, "a cleaning pass")


@pytest.mark.slow
def test_compaction_keeps_latest_committed_values_and_producer_state(
    broker: EmbeddedBroker, data_dir: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = f"compacted-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, config=TOPIC_CONFIGS)])[topic].result(TIMEOUT_S)

    raw = RawIdempotent(bootstrap)
    first_retry_batch = raw.batch(0, b"retry", b"v0")
    retry_offset = send(bootstrap, topic, first_retry_batch)

    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}"})
    txn.init_transactions(TIMEOUT_S)
    txn.begin_transaction()
    produce(txn, topic, [(b"k%d" % i, b"aborted-%d" % i) for i in range(5)])
    txn.abort_transaction(TIMEOUT_S)

    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 1})
    for generation in (1, 2):
        produce(plain, topic, [(b"k%d" % i, b"v%d-%d" % (generation, i)) for i in range(10)])
    produce(plain, topic, [(b"k8", None), (b"k9", None), (b"retry", b"overwritten")])

    txn.begin_transaction()
    produce(txn, topic, [(b"k%d" % i, b"committed-%d" % i) for i in range(5, 8)])
    txn.commit_transaction(TIMEOUT_S)
    expected = {b"k%d" % i: b"v2-%d" % i for i in range(5)}
    expected |= {b"k%d" % i: b"committed-%d" % i for i in range(5, 8)}
    expected[b"retry"] = b"overwritten"

    written_end = stable_offsets(bootstrap, topic)[0]
    settle(broker, bootstrap, topic, plain)  # aborted data and overwritten values go
    time.sleep(RETENTION_MS / 1000)
    settle(broker, bootstrap, topic, plain)  # tombstones past their horizon go

    committed = read_all(bootstrap, topic, "read_committed", written_end)
    uncommitted = read_all(bootstrap, topic, "read_uncommitted", written_end)
    assert {k: v for k, v in latest(committed).items() if k != b"filler"} == expected
    assert all(not (v or b"").startswith(b"aborted") for _, _, v in uncommitted)
    assert not [k for _, k, _ in uncommitted if k in (b"k8", b"k9")], "tombstones past horizon"
    assert len(uncommitted) < written_end / 2, "the history was compacted"
    assert len({k for _, k, _ in uncommitted}) == len(uncommitted), "one record per key"

    # A transaction left open pins the last stable offset; nothing at or past it is
    # cleaned, however dirty, until the transaction ends.
    txn.begin_transaction()
    produce(txn, topic, [(b"open", b"pending")])
    high_watermark, lso = stable_offsets(bootstrap, topic)
    assert lso < high_watermark
    produce(plain, topic, [(b"after-open", b"%d" % i) for i in range(50)])
    for _ in range(3):
        time.sleep(0.4)
        live(broker).cleaner.wake()
    high_watermark, lso_after = stable_offsets(bootstrap, topic)
    assert lso_after == lso
    pinned = read_all(bootstrap, topic, "read_uncommitted", high_watermark)
    assert sum(k == b"after-open" for _, k, _ in pinned) == 50
    txn.commit_transaction(TIMEOUT_S)
    settle(broker, bootstrap, topic, plain)
    high_watermark, lso = stable_offsets(bootstrap, topic)
    released = read_all(bootstrap, topic, "read_committed", lso)
    assert sum(k == b"after-open" for _, k, _ in released) == 1
    assert latest(released)[b"open"] == b"pending"

    # Producer state rebuilt from the compacted log alone (snapshots gone, as after a
    # crash that lost them) still knows the raw producer: its retry is a duplicate.
    broker.stop()
    for snapshot in (data_dir / f"{topic}-0").glob("*.snapshot"):
        snapshot.unlink()
    broker.start()
    bootstrap = broker.bootstrap_servers
    assert send(bootstrap, topic, first_retry_batch) == retry_offset
    # The same retry without idempotence is appended again: the anomaly the state prevents.
    assert send(bootstrap, topic, raw.batch(0, b"retry", b"v0", idempotent=False)) > retry_offset
