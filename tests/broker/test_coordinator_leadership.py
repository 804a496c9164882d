"""The seam a cluster calls when leadership of coordinator partitions moves: the
transaction and group coordinators load a partition they are elected for (completing the
transactions they find prepared, with the new coordinator epoch) and answer NOT_COORDINATOR
for one they resigned. Driven in memory, without a broker."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable
from typing import Any

import pytest

from oncelog.broker.coordinator_runtime import CoordinatorError
from oncelog.broker.group_coordinator import GroupCoordinator
from oncelog.broker.transaction_coordinator import TransactionCoordinator, TxnSettings
from oncelog.coordinator_partitions import partition_for
from oncelog.groups import GroupConfig, OffsetCommitPartition, TxnOffsetCommitRequest
from oncelog.protocol.errors import ErrorCode as E
from oncelog.transactions.state import TxnState

from .memory_log import MemoryLog

SETTINGS = TxnSettings(
    max_timeout_ms=900_000,
    abort_timed_out_interval_ms=3_600_000,
    remove_expired_interval_ms=3_600_000,
    id_expiration_ms=7 * 24 * 3_600_000,
)
TID = "payments"


class RecordingMarkers:
    """Markers as a partition leader would receive them; ``hold`` keeps them unanswered."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, int, bool, int, tuple[tuple[str, int], ...]]] = []
        self.hold = False

    async def write(
        self,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        coordinator_epoch: int,
        partitions: Iterable[tuple[str, int]],
    ) -> dict[tuple[str, int], E]:
        parts = tuple(partitions)
        self.sent.append((producer_id, producer_epoch, committed, coordinator_epoch, parts))
        while self.hold:
            await asyncio.sleep(0.01)
        return dict.fromkeys(parts, E.none)


def transaction_coordinator(log: MemoryLog, markers: RecordingMarkers) -> TransactionCoordinator:
    pids = itertools.count(5000)

    async def offsets_partition(group_id: str) -> int:
        return 0

    return TransactionCoordinator(
        log,
        log,
        log,
        lambda: 1_000,
        SETTINGS,
        lambda: next(pids),
        markers,
        offsets_partition,
    )


async def commit_until_prepared(coordinator: TransactionCoordinator) -> int:
    init = await coordinator.init_producer_id(TID, 60_000, -1, -1)
    assert init.error == E.none
    pid, epoch = init.producer_id, init.producer_epoch
    added = await coordinator.add_partitions(TID, pid, epoch, [("orders", 0), ("orders", 1)])
    assert added.error == E.none
    assert (await coordinator.end_txn(TID, pid, epoch, True)).error == E.none
    return pid


def test_a_resigned_partition_answers_not_coordinator_and_the_elected_one_completes() -> None:
    async def scenario() -> None:
        log = MemoryLog(partitions=3)
        partition = partition_for(TID, 3)
        first_markers = RecordingMarkers()
        first_markers.hold = True  # the markers are in flight when leadership moves
        first = transaction_coordinator(log, first_markers)
        await first.on_elected(partition, 4)
        pid = await commit_until_prepared(first)
        await asyncio.sleep(0.01)
        assert first_markers.sent == [(pid, 0, True, 4, (("orders", 0), ("orders", 1)))]

        first.on_resigned(partition, 5)
        assert (await first.end_txn(TID, pid, 0, True)).error == E.not_coordinator
        assert first.shards == {}

        second_markers = RecordingMarkers()
        second = transaction_coordinator(log, second_markers)
        await second.on_elected(partition, 5)
        for _ in range(100):
            metadata = second.shards[partition].get(TID)
            if metadata is not None and metadata.state is TxnState.COMPLETE_COMMIT:
                break
            await asyncio.sleep(0.01)
        assert second_markers.sent == [(pid, 0, True, 5, (("orders", 0), ("orders", 1)))]
        assert second.shards[partition].get(TID).state is TxnState.COMPLETE_COMMIT
        first_markers.hold = False
        await first.stop()
        await second.stop()

    asyncio.run(scenario())


def test_groups_move_with_their_partition() -> None:
    async def scenario() -> None:
        log = MemoryLog(partitions=1)
        config = GroupConfig(initial_rebalance_delay_ms=0)
        first = GroupCoordinator(log, log, log, lambda: 1_000, config)
        await first.on_elected(0, 1)
        commit = TxnOffsetCommitRequest(
            transactional_id=TID,
            group_id="g",
            producer_id=77,
            producer_epoch=0,
            partitions=(OffsetCommitPartition("orders", 0, 42),),
        )
        answer: Any = await first.run(
            "g", lambda s, now: s.commit_transactional_offsets(commit, now)
        )
        assert [p.error_code for p in answer.partitions] == [E.none]
        await first.complete_transaction(0, 77, 0, True, 1)
        assert first.shard_for("g").fetch_offsets("g").partitions[0].offset == 42

        first.on_resigned(0, 2)
        with pytest.raises(CoordinatorError) as refused:
            first.shard_for("g")
        assert refused.value.code == E.not_coordinator

        second = GroupCoordinator(log, log, log, lambda: 2_000, config)
        await second.on_elected(0, 2)
        assert second.shard_for("g").fetch_offsets("g").partitions[0].offset == 42
        await first.stop()
        await second.stop()

    asyncio.run(scenario())
