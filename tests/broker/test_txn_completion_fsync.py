"""A transaction's COMPLETE record does not ask for an fsync of its own at once (issue 12):
nothing waits for it, so the fsync of the id's next request (a producer's next
AddPartitionsToTxn, appended after it) covers both; without such a request the marker
task asks for it after ``COMPLETION_FSYNC_DELAY_S``. Counted, not timed: in memory, the
durable waits that found their offsets not yet durable (each one an fsync asked for); on a
broker, the flusher's fsync rounds per transaction."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from oncelog.broker import transaction_coordinator as txn_module
from oncelog.broker.transaction_coordinator import TransactionCoordinator
from oncelog.client.connection import KafkaConnection
from oncelog.coordinator_partitions import partition_for
from oncelog.protocol.errors import ErrorCode as E
from oncelog.testing import EmbeddedBroker
from oncelog.transactions.state import TxnState

from .memory_log import MemoryLog
from .raw_requests import create_topics
from .test_coordinator_leadership import TID, RecordingMarkers, transaction_coordinator

PARTITIONS = 1
PARTITION = partition_for(TID, PARTITIONS)
TOPIC_PARTITION = ("orders", 0)
# Loop turns a request of the in-memory coordinator may take to settle, at most.
TURNS = 50
# The broker test: transactions counted, and how long a client call may take.
TRANSACTIONS = 20
TIMEOUT_S = 30.0


class CountingLog(MemoryLog):
    """A memory log that counts the durable waits it could not answer at once."""

    def __init__(self) -> None:
        super().__init__(partitions=PARTITIONS)
        self.fsyncs_asked = 0

    def wait_durable(self, partition: int, end_offset: int) -> asyncio.Future[None]:
        future = super().wait_durable(partition, end_offset)
        if not future.done():
            self.fsyncs_asked += 1
        return future


@pytest.fixture
def short_delay(monkeypatch: pytest.MonkeyPatch) -> float:
    delay = 0.002
    monkeypatch.setattr(txn_module, "COMPLETION_FSYNC_DELAY_S", delay)
    return delay


async def _answered(log: CountingLog, request: asyncio.Future[object]) -> None:
    """Let ``request`` run, everything appended made durable as it waits (an fsync)."""
    for _ in range(TURNS):
        await asyncio.sleep(0)
        log.make_durable(PARTITION)
        if request.done():
            return
    raise AssertionError(f"not answered within {TURNS} loop turns")


async def _committed(log: CountingLog) -> tuple[TransactionCoordinator, int, int]:
    """A coordinator with one committed transaction whose markers are written and whose
    COMPLETE record is appended; ``log.fsyncs_asked`` counts from the PREPARE durable on."""
    markers = RecordingMarkers()
    coordinator = transaction_coordinator(log, markers)
    await coordinator.on_elected(PARTITION, 0)
    log.auto_durable = False
    init = asyncio.ensure_future(coordinator.init_producer_id(TID, 60_000, -1, -1))
    await _answered(log, init)
    pid, epoch = init.result().producer_id, init.result().producer_epoch
    added = asyncio.ensure_future(coordinator.add_partitions(TID, pid, epoch, [TOPIC_PARTITION]))
    await _answered(log, added)
    assert added.result().error == E.none
    ended = asyncio.ensure_future(coordinator.end_txn(TID, pid, epoch, True))
    await _answered(log, ended)  # made durable up to the PREPARE record, no further
    assert ended.result().error == E.none
    log.fsyncs_asked = 0
    for _ in range(10):  # the markers (durable at once here), then the COMPLETE appended
        await asyncio.sleep(0)
    assert len(markers.sent) == 1
    assert log.log(PARTITION)[-1].offset == log.durable[PARTITION]  # COMPLETE, not durable
    return coordinator, pid, epoch


def _state(coordinator: TransactionCoordinator) -> TxnState:
    """The id's replayed (durable) state."""
    metadata = coordinator.shards[PARTITION].get(TID)
    assert metadata is not None
    return metadata.state


def test_the_next_transactions_first_request_fsyncs_the_completion_with_it(
    short_delay: float,
) -> None:
    """Main's coordinator asks for 2 fsyncs here: the COMPLETE record's, as soon as it is
    appended, and the next AddPartitionsToTxn's."""

    async def scenario() -> None:
        log = CountingLog()
        coordinator, pid, epoch = await _committed(log)
        added = asyncio.ensure_future(
            coordinator.add_partitions(TID, pid, epoch, [TOPIC_PARTITION])
        )
        for _ in range(5):
            await asyncio.sleep(0)
        assert not added.done()  # its record waits for durability, with the COMPLETE's
        log.make_durable(PARTITION)
        assert (await added).error == E.none
        await asyncio.sleep(short_delay * 5)  # the marker task's wait: durable already
        await _answered(log, added)
        assert log.fsyncs_asked == 1
        assert _state(coordinator) is TxnState.ONGOING
        await coordinator.stop()

    asyncio.run(scenario())


def test_a_completion_without_a_next_request_is_fsynced_after_the_delay(
    short_delay: float,
) -> None:
    """What keeps a transaction that is not followed from staying prepared."""

    async def scenario() -> None:
        log = CountingLog()
        coordinator, _, _ = await _committed(log)
        assert _state(coordinator) is TxnState.PREPARE_COMMIT
        await asyncio.sleep(short_delay * 5)
        assert log.fsyncs_asked == 1  # asked by the marker task itself, after the delay
        for _ in range(TURNS):
            log.make_durable(PARTITION)
            await asyncio.sleep(0)
        assert _state(coordinator) is TxnState.COMPLETE_COMMIT
        await coordinator.stop()

    asyncio.run(scenario())


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddedBroker]:
    # Longer than any client's pause between transactions here, so that what is counted
    # is the mechanism, not the machine's speed (the broker runs in this process).
    monkeypatch.setattr(txn_module, "COMPLETION_FSYNC_DELAY_S", TIMEOUT_S)
    with EmbeddedBroker() as embedded:
        yield embedded


def test_a_transaction_costs_the_real_flusher_four_fsync_rounds(broker: EmbeddedBroker) -> None:
    """The flusher's fsync covers everything appended to the log when it starts, so the
    next AddPartitionsToTxn's fsync makes the COMPLETE record durable too: four rounds per
    transaction (AddPartitionsToTxn's record, the Produce, PREPARE, the marker). Main's
    coordinator: five (the COMPLETE's own), 98-100 for 20 transactions."""
    assert broker.broker is not None
    with KafkaConnection(broker.bootstrap_servers) as conn:
        assert create_topics(conn, {"orders": 1})["orders"].error_code == E.none
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": TID, "linger.ms": 0}
    )
    producer.init_transactions(TIMEOUT_S)

    def transaction() -> None:
        producer.begin_transaction()
        for i in range(10):
            producer.produce("orders", b"x" * 100, partition=0, key=str(i).encode())
        producer.commit_transaction(TIMEOUT_S)

    transaction()  # the topics' first writes, the producer's connections
    before = broker.broker.flusher.fsync_rounds
    for _ in range(TRANSACTIONS):
        transaction()
    rounds = broker.broker.flusher.fsync_rounds - before
    # The first of them also makes the warm-up's COMPLETE durable; the last one's waits.
    assert rounds <= 4 * TRANSACTIONS, rounds
