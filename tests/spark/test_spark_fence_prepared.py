"""A fence reaching a writer whose commit had begun, against a broker (the claims model,
test_spark_claims.py, assumes it): the sink fences another writer by initialising its
transactional.id (`producers.ClientPool.fence`). When that writer's EndTxn was answered
(PrepareCommit written) and its markers are not written yet, the fence must not return
before the coordinator has completed the commit (Kafka's coordinator answers
InitProducerId with CONCURRENT_TRANSACTIONS until then), so the progress read after the
fence sees it: its
records are visible read_committed, once. The broker's markers are held back while the
fence runs (an in-process broker, its marker writer wrapped); the same fence of a writer
whose commit had not begun aborts it instead (the control: nothing of it is visible)."""

from __future__ import annotations

import asyncio
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from oncelog.broker.transaction_coordinator import TransactionCoordinator
from oncelog.spark import options, producers
from oncelog.testing import EmbeddedBroker

TOPIC = "fenced-output"
VICTIM = "oncelog-sink-victim"
RECORDS = 5


class _HeldMarkers:
    """Wraps the coordinator's marker writing: the victim's commit markers wait until
    `release` is set; `held` says the broker has reached them (PrepareCommit written)."""

    def __init__(self) -> None:
        self.held = threading.Event()
        self.release = threading.Event()

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        original = TransactionCoordinator._write_markers
        gate = self

        async def write_markers(self: TransactionCoordinator, partition: int, marker: Any) -> None:
            if marker.transactional_id == VICTIM and marker.committed:
                gate.held.set()
                while not gate.release.is_set():
                    await asyncio.sleep(0.01)
            await original(self, partition, marker)

        monkeypatch.setattr(TransactionCoordinator, "_write_markers", write_markers)


@pytest.fixture
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker({"num.partitions": "1"}) as running:
        yield running


def _victim(bootstrap: str) -> Producer:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": VICTIM, "linger.ms": 0}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(RECORDS):
        producer.produce(TOPIC, f"record-{i}".encode(), partition=0)
    producer.flush(30)
    return producer


def _committed_values(bootstrap: str) -> list[bytes]:
    """Every record of the topic under read_committed, up to its last stable offset."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "fence-check",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        partition = TopicPartition(TOPIC, 0)
        _low, stable = consumer.get_watermark_offsets(partition, timeout=10, cached=False)
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        values: list[bytes] = []
        for _ in range(100):
            position = consumer.position([partition])[0].offset
            if position >= stable:
                break
            for message in consumer.consume(100, timeout=0.2):
                value = message.value()
                if message.error() is None and value is not None:
                    values.append(value)
        return values
    finally:
        consumer.close()


def _stable_offset(bootstrap: str) -> int:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "lso", "isolation.level": "read_committed"}
    )
    try:
        _low, stable = consumer.get_watermark_offsets(
            TopicPartition(TOPIC, 0), timeout=10, cached=False
        )
        return int(stable)
    finally:
        consumer.close()


class _Fence:
    """`ClientPool.fence` of the victim in a thread, and the last stable offset read the
    moment it returned."""

    def __init__(self, bootstrap: str) -> None:
        self.sink = options.parse_write_options(
            {"kafka.bootstrap.servers": bootstrap, "topic": TOPIC, "sink.id": "fencer"}
        )
        self.bootstrap = bootstrap
        self.failures: list[BaseException] = []
        self.stable_on_return: int | None = None
        self.thread = threading.Thread(target=self._fence, name="fence", daemon=True)
        self.thread.start()

    def _fence(self) -> None:
        try:
            producers.ClientPool().fence(self.sink, VICTIM)
            self.stable_on_return = _stable_offset(self.bootstrap)
        except BaseException as exc:
            self.failures.append(exc)


def _close(producer: Producer) -> None:
    """Close the victim; a fenced producer's close fails to abort (nothing is left to)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            producer.close()
        except KafkaException:
            pass


def test_a_fence_waits_for_a_commit_whose_markers_are_pending(
    broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    markers = _HeldMarkers()
    markers.install(monkeypatch)
    bootstrap = broker.bootstrap_servers
    victim = _victim(bootstrap)
    committing = threading.Thread(target=lambda: victim.commit_transaction(30), daemon=True)
    committing.start()
    fence: _Fence | None = None
    try:
        assert markers.held.wait(10), "the victim's commit never reached its markers"
        assert _stable_offset(bootstrap) == 0  # PrepareCommit written, the records not visible
        fence = _Fence(bootstrap)
        fence.thread.join(1.5)
        assert fence.thread.is_alive()  # it waits for the pending commit, not past it
    finally:
        markers.release.set()
        for thread in (committing, fence.thread if fence is not None else None):
            if thread is not None:
                thread.join(30)
    assert not fence.thread.is_alive() and not fence.failures
    # the moment the fence returned, the commit it waited for was complete
    assert fence.stable_on_return is not None and fence.stable_on_return > RECORDS
    assert _committed_values(bootstrap) == [f"record-{i}".encode() for i in range(RECORDS)]
    try:
        victim.begin_transaction()  # the fenced victim can send nothing more
        victim.produce(TOPIC, b"after the fence", partition=0)
        with pytest.raises(KafkaException):
            victim.commit_transaction(10)
    finally:
        _close(victim)
    assert _committed_values(bootstrap) == [f"record-{i}".encode() for i in range(RECORDS)]


def test_the_control_a_fence_of_a_commit_not_begun_aborts_it(broker: EmbeddedBroker) -> None:
    bootstrap = broker.bootstrap_servers
    victim = _victim(bootstrap)  # records produced, no EndTxn sent
    try:
        fence = _Fence(bootstrap)
        fence.thread.join(30)
        assert not fence.thread.is_alive() and not fence.failures
        assert _committed_values(bootstrap) == []
        assert fence.stable_on_return is not None and fence.stable_on_return > RECORDS
        with pytest.raises(KafkaException):
            victim.commit_transaction(10)
    finally:
        _close(victim)
