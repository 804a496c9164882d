"""The transaction coordinator after a ``__transaction_state`` write that failed with an I/O
error: the partition answers NOT_COORDINATOR and sends nothing until the broker restarts;
the restarted coordinator loads the log, completes what the log holds prepared, and the
producer's retry is answered. A transactional produce meanwhile is told to retry
(NOT_ENOUGH_REPLICAS), not to abort. Driven in memory, without a broker."""

from __future__ import annotations

import asyncio

import pytest

from oncelog.broker.transaction_coordinator import TransactionCoordinator
from oncelog.coordinator_partitions import partition_for
from oncelog.protocol.errors import ErrorCode as E
from oncelog.protocol.errors import KafkaError
from oncelog.transactions.state import TxnState

from .memory_log import MemoryLog
from .test_coordinator_leadership import TID, RecordingMarkers, transaction_coordinator

PARTITIONS = 3
PARTITION = partition_for(TID, PARTITIONS)
ORDERS = [("orders", 0), ("orders", 1)]


async def reaches(coordinator: TransactionCoordinator, state: TxnState) -> None:
    """Wait (bounded) until the id's shard holds ``state``."""
    for _ in range(200):
        shard = coordinator.shards.get(PARTITION)
        metadata = None if shard is None else shard.get(TID)
        if metadata is not None and metadata.state is state:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{TID} never reached {state}")


@pytest.mark.parametrize("after_write", [False, True], ids=["nothing-written", "written"])
def test_end_txn_whose_prepare_write_failed_is_answered_after_a_restart(after_write: bool) -> None:
    """Before: the OSError escaped EndTxn and the id stayed pending for ever (every retry
    CONCURRENT_TRANSACTIONS, no marker sent even when the PREPARE_COMMIT was in the log)."""

    async def scenario() -> None:
        log = MemoryLog(partitions=PARTITIONS)
        markers = RecordingMarkers()
        failing = transaction_coordinator(log, markers)
        await failing.on_elected(PARTITION, 0)
        init = await failing.init_producer_id(TID, 60_000, -1, -1)
        pid, epoch = init.producer_id, init.producer_epoch
        assert (await failing.add_partitions(TID, pid, epoch, ORDERS)).error == E.none
        log.io_error = OSError(28, "No space left on device")
        log.io_error_after_write = after_write
        assert (await failing.end_txn(TID, pid, epoch, True)).error == E.not_coordinator
        assert (await failing.end_txn(TID, pid, epoch, True)).error == E.not_coordinator
        assert failing.shards == {} and markers.sent == []
        await failing.stop()

        restarted = transaction_coordinator(log, markers)
        await restarted.on_elected(PARTITION, 0)
        if after_write:  # the log holds PREPARE_COMMIT: the load completes it
            await reaches(restarted, TxnState.COMPLETE_COMMIT)
        assert (await restarted.end_txn(TID, pid, epoch, True)).error == E.none
        await reaches(restarted, TxnState.COMPLETE_COMMIT)
        assert [m[:3] for m in markers.sent] == [(pid, epoch, True)]
        await restarted.stop()

    asyncio.run(scenario())


def test_a_transactional_produce_while_the_partition_is_out_is_told_to_retry() -> None:
    """Loading (at start) or failed: nothing can be verified, and nothing is appended."""

    async def scenario() -> None:
        log = MemoryLog(partitions=PARTITIONS)
        release = log.loads_wait_for = asyncio.Event()
        coordinator = transaction_coordinator(log, RecordingMarkers())
        loading = asyncio.ensure_future(coordinator.on_elected(PARTITION, 0))
        await asyncio.sleep(0.01)
        with pytest.raises(KafkaError) as refused:
            coordinator.check_write(TID, 5000, 0, "orders", 0)
        assert refused.value.code == E.not_enough_replicas
        release.set()
        await loading
        init = await coordinator.init_producer_id(TID, 60_000, -1, -1)
        pid, epoch = init.producer_id, init.producer_epoch
        assert (await coordinator.add_partitions(TID, pid, epoch, ORDERS)).error == E.none
        coordinator.check_write(TID, pid, epoch, "orders", 0)
        log.io_error = OSError(5, "Input/output error")
        assert (await coordinator.end_txn(TID, pid, epoch, True)).error == E.not_coordinator
        with pytest.raises(KafkaError) as out:
            coordinator.check_write(TID, pid, epoch, "orders", 0)
        assert out.value.code == E.not_enough_replicas
        await coordinator.stop()

    asyncio.run(scenario())
