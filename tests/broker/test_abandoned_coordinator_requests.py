"""Coordinator requests whose requester goes away (the client disconnects, so the broker
cancels its connection's handlers): what they began is carried to its end, and what they
had not begun is not begun for them.

- An EndTxn cancelled while its PREPARE record waits for its fsync: the record is replayed
  and the markers are sent all the same, or the transaction would stay prepared and hold
  its partitions' last stable offset until a restart.
- A request parked behind its id's markers (CONCURRENT_TRANSACTIONS answered by waiting)
  that is cancelled takes its place back: no write is begun for it later.
- An offset commit cancelled while its record waits for its fsync: the commit is replayed
  when durable, not only once some later write of the partition settles.
- A SyncGroup leader cancelled while its assignment's record waits for its fsync: the
  followers parked on it still get their assignments.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from oncelog.broker.group_coordinator import GroupCoordinator
from oncelog.broker.transaction_coordinator import TransactionCoordinator, TxnResponse
from oncelog.coordinator_partitions import partition_for
from oncelog.groups import GroupConfig, OffsetCommitPartition, OffsetCommitRequest
from oncelog.groups.messages import (
    JoinGroupRequest,
    JoinGroupResponse,
    Protocol,
    SyncGroupRequest,
    SyncGroupResponse,
)
from oncelog.transactions.coordinator import TransactionCoordinatorShard
from oncelog.transactions.state import TxnState

from .memory_log import MemoryLog
from .test_coordinator_leadership import (
    TID,
    RecordingMarkers,
    commit_until_prepared,
    transaction_coordinator,
)


async def _parked_behind_markers() -> tuple[
    MemoryLog, TransactionCoordinator, RecordingMarkers, int, asyncio.Future[TxnResponse]
]:
    """A transaction prepared with its markers held, and the next transaction's
    AddPartitionsToTxn (orders-2) parked behind them."""
    log = MemoryLog(partitions=3)
    markers = RecordingMarkers()
    markers.hold = True
    coordinator = transaction_coordinator(log, markers)
    await coordinator.on_elected(partition_for(TID, 3), 0)
    pid = await commit_until_prepared(coordinator)
    parked = asyncio.ensure_future(coordinator.add_partitions(TID, pid, 0, [("orders", 2)]))
    await asyncio.sleep(0.05)
    return log, coordinator, markers, pid, parked


def test_a_cancelled_parked_request_is_not_run_when_its_id_settles() -> None:
    """The next transaction's AddPartitionsToTxn arrives while the last one's markers are in
    flight and is parked; its task is cancelled (the client went away). When the markers
    land, nothing may begin a write on its behalf. Before the fix the parked entry stayed
    behind and the completion ran it: an ONGOING record appended that nobody settled, so
    the id stayed "being written" and the client's own retry was refused with
    CONCURRENT_TRANSACTIONS after a second's wait, again and again, until some other
    write of the partition happened to replay it."""

    async def scenario() -> None:
        log, coordinator, markers, pid, parked = await _parked_behind_markers()
        partition = partition_for(TID, 3)
        assert not parked.done()  # waiting for the markers, not answered
        parked.cancel()
        with pytest.raises(asyncio.CancelledError):
            await parked

        markers.hold = False
        shard = coordinator.shards[partition]
        await _until(lambda: _state(shard) is TxnState.COMPLETE_COMMIT)
        await asyncio.sleep(0.05)  # any write begun for the cancelled request is appended
        metadata = shard.get(TID)
        assert metadata is not None
        assert metadata.state is TxnState.COMPLETE_COMMIT
        assert shard.pending(TID) is None
        assert len(log.log(partition)) == 4  # init, add, prepare, complete: nothing after
        # The client's own retry after reconnecting is answered as a first try would be.
        retried = await coordinator.add_partitions(TID, pid, 0, [("orders", 2)])
        assert retried.error.name == "none"
        await coordinator.stop()

    asyncio.run(scenario())


def test_a_parked_request_runs_when_its_id_settles() -> None:
    """The control: the same request, left waiting, is run when the markers land and is
    answered as a first try would be."""

    async def scenario() -> None:
        _, coordinator, markers, _, parked = await _parked_behind_markers()
        partition = partition_for(TID, 3)
        assert not parked.done()
        markers.hold = False
        answer = await parked
        assert answer.error.name == "none"
        metadata = coordinator.shards[partition].get(TID)
        assert metadata is not None
        assert metadata.state is TxnState.ONGOING
        assert ("orders", 2) in metadata.partitions
        await coordinator.stop()

    asyncio.run(scenario())


async def _until(condition: Callable[[], bool], tries: int = 200) -> None:
    """Until ``condition`` holds, for up to ``tries`` hundredths of a second."""
    for _ in range(tries):
        if condition():
            return
        await asyncio.sleep(0.01)


async def _cancelled_during_its_fsync(
    log: MemoryLog, partition: int, request: Coroutine[Any, Any, Any]
) -> None:
    """Run ``request`` until its records wait for their fsync, cancel it there (its client
    went away), then complete the fsync."""
    log.auto_durable = False
    appended = len(log.log(partition))
    started = asyncio.ensure_future(request)
    await _until(lambda: len(log.log(partition)) > appended)
    assert len(log.log(partition)) > appended and not started.done()
    started.cancel()
    with pytest.raises(asyncio.CancelledError):
        await started
    log.auto_durable = True
    log.make_durable(partition)


def _state(shard: TransactionCoordinatorShard) -> TxnState | None:
    metadata = shard.get(TID)
    return None if metadata is None else metadata.state


def test_a_request_cancelled_in_the_step_its_retry_begins_is_followed_up() -> None:
    """``_wake`` begins the parked request's retry (its ONGOING record appended) and, in
    that same step, the request's task is cancelled. Its write must still be settled:
    left unsettled, the id would stay "being written" and every retry of the client's
    would be refused with CONCURRENT_TRANSACTIONS."""

    async def scenario() -> None:
        _, coordinator, markers, pid, parked = await _parked_behind_markers()
        partition = partition_for(TID, 3)
        wake = coordinator._wake

        def wake_then_cancel(transactional_id: str) -> None:
            wake(transactional_id)
            parked.cancel()

        coordinator._wake = wake_then_cancel  # type: ignore[method-assign]
        markers.hold = False
        with pytest.raises(asyncio.CancelledError):
            await parked
        shard = coordinator.shards[partition]
        await _until(lambda: shard.pending(TID) is None)
        assert shard.pending(TID) is None
        assert _state(shard) is TxnState.ONGOING
        metadata = shard.get(TID)
        assert metadata is not None and ("orders", 2) in metadata.partitions
        retried = await coordinator.add_partitions(TID, pid, 0, [("orders", 2)])
        assert retried.error.name == "none"
        await coordinator.stop()

    asyncio.run(scenario())


def test_an_end_txn_whose_requester_went_away_still_completes() -> None:
    async def scenario() -> None:
        log = MemoryLog(partitions=3)
        partition = partition_for(TID, 3)
        markers = RecordingMarkers()
        coordinator = transaction_coordinator(log, markers)
        await coordinator.on_elected(partition, 0)
        init = await coordinator.init_producer_id(TID, 60_000, -1, -1)
        pid, epoch = init.producer_id, init.producer_epoch
        parts = [("orders", 0), ("orders", 1)]
        assert (await coordinator.add_partitions(TID, pid, epoch, parts)).error.name == "none"

        # The PREPARE record waits for its fsync, which completes after the client went away.
        await _cancelled_during_its_fsync(
            log, partition, coordinator.end_txn(TID, pid, epoch, True)
        )

        shard = coordinator.shards[partition]

        await _until(lambda: _state(shard) is TxnState.COMPLETE_COMMIT)
        assert markers.sent == [(pid, epoch, True, 0, (("orders", 0), ("orders", 1)))]
        assert _state(shard) is TxnState.COMPLETE_COMMIT
        await coordinator.stop()

    asyncio.run(scenario())


def test_an_offset_commit_whose_requester_went_away_is_replayed_once_durable() -> None:
    async def scenario() -> None:
        log = MemoryLog(partitions=1)
        coordinator = GroupCoordinator(
            log, log, log, lambda: 1_000, GroupConfig(initial_rebalance_delay_ms=0)
        )
        await coordinator.on_elected(0, 1)
        commit = OffsetCommitRequest("g", (OffsetCommitPartition("orders", 0, 42),))

        await _cancelled_during_its_fsync(
            log, 0, coordinator.run("g", lambda shard, now: shard.commit_offsets(commit, now))
        )

        def offset() -> int | None:
            partitions = coordinator.shard_for("g").fetch_offsets("g").partitions
            return partitions[0].offset if partitions else None

        await _until(lambda: offset() == 42)
        assert offset() == 42
        await coordinator.stop()

    asyncio.run(scenario())


def test_a_sync_group_leader_that_went_away_still_answers_its_followers() -> None:
    async def scenario() -> None:
        log = MemoryLog(partitions=1)
        coordinator = GroupCoordinator(
            log, log, log, _clock, GroupConfig(initial_rebalance_delay_ms=0)
        )
        await coordinator.on_elected(0, 1)
        await coordinator.start()
        leader, follower = await _two_members_joined(coordinator)

        following = asyncio.ensure_future(_sync(coordinator, follower, {}))
        await asyncio.sleep(0.05)
        assert not following.done(), "a follower's SyncGroup waits for the leader's"

        assignments = {leader.member_id: b"a", follower.member_id: b"b"}
        await _cancelled_during_its_fsync(log, 0, _sync(coordinator, leader, assignments))

        async with asyncio.timeout(2):
            answer = await following
        assert (answer.error_code.name, answer.assignment) == ("none", b"b")
        await coordinator.stop()

    asyncio.run(scenario())


def _clock() -> int:
    return int(asyncio.get_running_loop().time() * 1000)


async def _two_members_joined(
    coordinator: GroupCoordinator,
) -> tuple[JoinGroupResponse, JoinGroupResponse]:
    """Two members of group "g" in one generation: the leader's and the follower's joins.
    The first member's join makes a generation of its own; the second's starts a
    rebalance, which the first member's rejoin completes."""
    first = await _join(coordinator, "")
    second = asyncio.ensure_future(_join(coordinator, ""))
    await asyncio.sleep(0.05)
    answers = [await _join(coordinator, first.member_id), await second]
    (leader,) = [a for a in answers if a.member_id == a.leader]
    (follower,) = [a for a in answers if a.member_id != a.leader]
    return leader, follower


async def _join(coordinator: GroupCoordinator, member_id: str) -> JoinGroupResponse:
    join = JoinGroupRequest(
        "g", member_id, "consumer", (Protocol("range", b""),), 10_000, api_version=3
    )
    return await coordinator.run_parked("g", lambda s, rid, now: s.join_group(join, rid, now))


async def _sync(
    coordinator: GroupCoordinator, member: JoinGroupResponse, assignments: dict[str, bytes]
) -> SyncGroupResponse:
    sync = SyncGroupRequest("g", member.generation_id, member.member_id, assignments)
    return await coordinator.run_parked("g", lambda s, rid, now: s.sync_group(sync, rid, now))
