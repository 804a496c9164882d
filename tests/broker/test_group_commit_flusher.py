"""GroupCommitFlusher on its own: who is answered by which fsync, and what a failed fsync
does to its waiters (the broker-level tests in test_durability.py cover acks=all)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from oncelog.broker import durability
from oncelog.broker.durability import GroupCommitFlusher
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.storage import PartitionLog
from oncelog.storage.file_cache import FileCache

from ..fsync_pools import (
    HeldFsyncPool,
    PythonFsyncPool,
    fsync_threads,
    may_run_real_time,
    policies_of_new_threads,
)
from ..storage.test_index_durability import CONFIG, append_batches

TIMEOUT_S = 30.0


@dataclass
class _Claim:
    target: int
    to_fsync: list[int]


class _Log:
    """A partition log whose flushes the test steers: a flush claims the end it sees when
    it begins; the pool holds its fsync until the test lets it finish (or fail); its end
    makes that end durable unless it failed."""

    def __init__(self, fd: int) -> None:
        self.end = 0
        self.recovery_point = 0
        self.closed = False
        self.failed = False  # offline after a failed fsync (this log's failures pass)
        self.flushes_started = 0
        self.fail_next: Exception | None = None  # raised by the next begin_flush
        self.fds_per_flush = 1
        self.extra_fd: int | None = None  # fsynced with the claim's file (a pipe fails it)
        self.running = 0  # flushes begun and not ended
        self.file_cache = FileCache()  # never crowded: flushes split around the fsync pool
        self._fd = fd

    def begin_flush(self) -> _Claim:
        self.flushes_started += 1
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        self.running += 1
        extra = [] if self.extra_fd is None else [self.extra_fd]
        return _Claim(self.end, [self._fd] * self.fds_per_flush + extra)

    def end_flush(self, claim: _Claim, error: BaseException | None) -> int:
        self.running -= 1
        if error is None:
            self.recovery_point = max(self.recovery_point, claim.target)
        return self.recovery_point


class _Partition:
    def __init__(self, fd: int) -> None:
        self.log = _Log(fd)

    def check_offline(self) -> None:
        """A cluster's hook after a failed flush (broker.partition.Partition): none here."""


@contextlib.asynccontextmanager
async def _flushing(
    pool_class: type[HeldFsyncPool] = HeldFsyncPool,
) -> AsyncIterator[tuple[GroupCommitFlusher, Any, _Log, HeldFsyncPool]]:
    """A started flusher whose fsyncs the test lets finish, and a partition; the flusher
    is stopped after."""
    pools: list[HeldFsyncPool] = []

    def pool(threads: int) -> HeldFsyncPool:
        pools.append(pool_class(threads))
        return pools[-1]

    flusher = GroupCommitFlusher(pool)
    flusher.start()
    with tempfile.TemporaryFile() as file:
        partition = _Partition(file.fileno())
        try:
            yield flusher, partition, partition.log, pools[0]
        finally:
            await flusher.stop()


async def _fsync_handed_off(pool: HeldFsyncPool) -> None:
    """Wait until the flusher has handed an fsync to the pool."""
    for _ in range(1000):
        if pool.held:
            return
        await asyncio.sleep(0.001)
    raise AssertionError("no fsync was handed off")


async def _let_a_flush_finish(pool: HeldFsyncPool, error: int = 0) -> None:
    """Once an fsync has been handed off, let it finish (with errno ``error``, if given)."""
    await _fsync_handed_off(pool)
    pool.finish(error)


async def _append_twice_the_second_while_fsyncing(
    flusher: GroupCommitFlusher, partition: Any, pool: HeldFsyncPool
) -> tuple[asyncio.Future[None], asyncio.Future[None]]:
    """Offset 0 appended and waited for; once its fsync has started (and taken the log's
    end), offset 1 appended and waited for."""
    partition.log.end = 1
    first = flusher.wait_durable(partition, 1)
    await _fsync_handed_off(pool)
    partition.log.end = 2
    return first, flusher.wait_durable(partition, 2)


def _run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), TIMEOUT_S * 2))


def test_an_append_made_while_an_fsync_runs_waits_for_the_next_one() -> None:
    async def test() -> None:
        async with _flushing() as (flusher, partition, log, pool):
            first, second = await _append_twice_the_second_while_fsyncing(flusher, partition, pool)
            pool.finish()
            await asyncio.wait_for(first, TIMEOUT_S)
            assert not second.done(), "answered by an fsync that did not cover it"
            await _let_a_flush_finish(pool)
            await asyncio.wait_for(second, TIMEOUT_S)
            assert (log.flushes_started, flusher.fsync_rounds) == (2, 2)

    _run(test)


def test_appends_of_one_loop_step_share_one_fsync() -> None:
    async def test() -> None:
        async with _flushing() as (flusher, partition, log, pool):
            waits = []
            for end in (1, 2, 3):  # three requests handled in the same step
                log.end = end
                waits.append(flusher.wait_durable(partition, end))
            await _let_a_flush_finish(pool)
            await asyncio.wait_for(asyncio.gather(*waits), TIMEOUT_S)
            assert flusher.fsync_rounds == 1

    _run(test)


def test_a_failed_fsync_fails_its_waiters_and_the_next_fsync_answers_later_ones() -> None:
    async def test() -> None:
        async with _flushing() as (flusher, partition, log, pool):
            log.end = 1
            failed = flusher.wait_durable(partition, 1)
            await _let_a_flush_finish(pool, errno.EIO)
            with pytest.raises(KafkaError) as raised:
                await asyncio.wait_for(failed, TIMEOUT_S)
            assert raised.value.code == ErrorCode.kafka_storage_error
            assert log.recovery_point == 0
            later = flusher.wait_durable(partition, 1)
            await _let_a_flush_finish(pool)
            await asyncio.wait_for(later, TIMEOUT_S)
            assert log.recovery_point == 1

    _run(test)


def test_an_fsync_that_fails_on_a_log_deleted_meanwhile_is_no_storage_failure() -> None:
    """The topic is deleted while its fsync runs, which then fails on the removed
    directory: the waiter is told UNKNOWN_TOPIC_OR_PARTITION, as Kafka tells one of a
    deleted topic, not KAFKA_STORAGE_ERROR, and no offline check runs."""

    async def test() -> None:
        async with _flushing() as (flusher, partition, log, pool):
            checked: list[bool] = []
            partition.check_offline = lambda: checked.append(True)
            log.end = 1
            waiting = flusher.wait_durable(partition, 1)
            await _fsync_handed_off(pool)
            log.closed = True  # deleted with its directory while the fsync runs
            pool.finish(errno.EIO)
            with pytest.raises(KafkaError) as raised:
                await asyncio.wait_for(waiting, TIMEOUT_S)
            assert raised.value.code == ErrorCode.unknown_topic_or_partition
            assert checked == []

    _run(test)


def test_a_flush_that_fails_other_than_by_os_error_answers_its_waiters_too() -> None:
    """A bug in a flush (not an OSError) gives its waiters the retriable
    REQUEST_TIMED_OUT (the appends stay in the log) rather than leaving them waiting, and
    the next append is flushed as usual."""

    async def test() -> None:
        async with _flushing() as (flusher, partition, log, pool):
            log.end = 1
            log.fail_next = ValueError("a bug")
            failed = flusher.wait_durable(partition, 1)
            with pytest.raises(KafkaError) as raised:
                await asyncio.wait_for(failed, TIMEOUT_S)
            assert raised.value.code == ErrorCode.request_timed_out
            later = flusher.wait_durable(partition, 1)
            await _let_a_flush_finish(pool)
            await asyncio.wait_for(later, TIMEOUT_S)

    _run(test)


class _BrokenLog(_Log):
    """A log whose ``failed`` raises while ``broken``: a bug in the hand-off itself."""

    broken = True

    @property
    def failed(self) -> bool:
        if self.broken:
            raise ValueError("a bug in the hand-off")
        return False

    @failed.setter
    def failed(self, _value: bool) -> None:
        pass


def test_a_hand_off_that_fails_by_a_bug_fails_its_waiters_and_ends_the_chain(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Not only stopped threads (RuntimeError): any failure to hand a flush off answers
    its waiters REQUEST_TIMED_OUT and ends the partition's chain, so the next append
    starts an fsync again (left set, ``flushing`` would hold every later one)."""

    async def test() -> None:
        async with _flushing() as (flusher, partition, log, pool):
            broken = partition.log = _BrokenLog(log._fd)
            broken.end = 1
            failed = flusher.wait_durable(partition, 1)
            with pytest.raises(KafkaError) as raised:
                await asyncio.wait_for(failed, 5.0)
            assert raised.value.code == ErrorCode.request_timed_out
            [said] = [r for r in caplog.records if "handing off a flush" in r.getMessage()]
            assert said.exc_info is not None  # the bug's traceback is in the log
            broken.broken = False
            later = flusher.wait_durable(partition, 1)
            await _let_a_flush_finish(pool)
            await asyncio.wait_for(later, TIMEOUT_S)

    _run(test)


def test_a_failing_fsync_hook_leaves_the_partition_flushable_and_stop_returns() -> None:
    """An exception on the loop after an fsync (here the metrics hook) must not leave the
    partition's chain of fsyncs half-way: the waiter is answered, the next append is
    flushed, and ``stop`` returns."""

    def broken_hook(_seconds: float) -> None:
        raise ValueError("a bug in a hook")

    async def test() -> None:
        async with _flushing() as (flusher, partition, log, pool):
            flusher.on_fsync = broken_hook
            log.end = 1
            first = flusher.wait_durable(partition, 1)
            await _let_a_flush_finish(pool)
            await asyncio.wait_for(first, TIMEOUT_S)
            log.end = 2
            later = flusher.wait_durable(partition, 2)
            await _let_a_flush_finish(pool)
            await asyncio.wait_for(later, TIMEOUT_S)

    _run(test)


def test_stop_waits_for_the_fsync_in_flight_and_its_follow_up() -> None:
    async def test() -> None:
        async with _flushing() as (flusher, partition, log, pool):
            first, second = await _append_twice_the_second_while_fsyncing(flusher, partition, pool)
            stopping = asyncio.ensure_future(flusher.stop())
            for _ in range(3):
                await asyncio.sleep(0)
            assert not stopping.done(), "stop did not wait for the fsync in flight"
            pool.finish()
            await _let_a_flush_finish(pool)
            await asyncio.wait_for(stopping, TIMEOUT_S)
            assert first.result() is None and second.result() is None
            assert log.recovery_point == 2

    _run(test)


def test_the_first_fsync_is_handed_off_one_loop_turn_after_the_append() -> None:
    """Not in the same turn: the appends of that turn share it (an immediate hand-off
    would race the fsync thread for the GIL, and usually still win)."""

    async def test() -> None:
        async with _flushing() as (flusher, partition, log, pool):
            waits = []
            for end in (1, 2, 3):
                log.end = end
                waits.append(flusher.wait_durable(partition, end))
            assert pool.held == []
            await asyncio.sleep(0)
            assert len(pool.held) == 1
            pool.finish()
            await asyncio.wait_for(asyncio.gather(*waits), TIMEOUT_S)

    _run(test)


def test_the_real_pool_reports_a_failed_fsync_of_one_of_two_descriptors() -> None:
    """Through the C threads, not a stand-in: a claim of a file and a pipe (fsync of a
    pipe fails, EINVAL). The flush ends once both are back, failed: the waiter gets
    KAFKA_STORAGE_ERROR and the offline check runs; the next flush of the file alone
    answers the next waiter."""

    async def test() -> None:
        flusher = GroupCommitFlusher()
        flusher.start()
        read_end, write_end = os.pipe()
        try:
            with tempfile.TemporaryFile() as file:
                partition = _Partition(file.fileno())
                checked: list[bool] = []
                partition.check_offline = lambda: checked.append(True)  # type: ignore[method-assign]
                log = partition.log
                log.end, log.fds_per_flush = 1, 1
                log.extra_fd = read_end
                failed = flusher.wait_durable(partition, 1)
                with pytest.raises(KafkaError) as raised:
                    await asyncio.wait_for(failed, TIMEOUT_S)
                assert raised.value.code == ErrorCode.kafka_storage_error
                assert checked == [True] and log.running == 0 and log.recovery_point == 0
                log.extra_fd = None
                await asyncio.wait_for(flusher.wait_durable(partition, 1), TIMEOUT_S)
                assert log.recovery_point == 1
        finally:
            await flusher.stop()
            os.close(read_end)
            os.close(write_end)

    _run(test)


class _SubmitFailsOnTheSecond(HeldFsyncPool):
    def submit(self, token: int, fd: int) -> None:
        if len(self.held) == 1:
            raise RuntimeError("the fsync threads have stopped")
        super().submit(token, fd)


def test_a_flush_whose_fsyncs_could_not_all_be_submitted_still_ends() -> None:
    """A claim of two descriptors, the second refused by the pool: the flush ends when the
    first fsync comes back, failed (REQUEST_TIMED_OUT: the appends stay in the log). Left
    running, the claim would keep its files pinned, and no later flush of the log would
    raise its recovery point (one never does while another runs)."""

    async def test() -> None:
        async with _flushing(_SubmitFailsOnTheSecond) as (flusher, partition, log, pool):
            log.end, log.fds_per_flush = 1, 2
            failed = flusher.wait_durable(partition, 1)
            await _let_a_flush_finish(pool)
            with pytest.raises(KafkaError) as raised:
                await asyncio.wait_for(failed, TIMEOUT_S)
            assert raised.value.code == ErrorCode.request_timed_out
            assert log.running == 0, "the claim was left running"

    _run(test)


def test_a_failed_fsync_wins_over_a_failed_submit_of_the_same_flush() -> None:
    """The first of two fsyncs was submitted and fails (EIO), the second could not be
    submitted: the flush fails as a storage failure (KAFKA_STORAGE_ERROR, the offline
    check), not as the submit's RuntimeError, which would leave the log online and let
    the next fsync of the file (its error already reported) call the pages durable."""

    async def test() -> None:
        async with _flushing(_SubmitFailsOnTheSecond) as (flusher, partition, log, pool):
            checked: list[bool] = []
            partition.check_offline = lambda: checked.append(True)
            log.end, log.fds_per_flush = 1, 2
            failed = flusher.wait_durable(partition, 1)
            await _let_a_flush_finish(pool, errno.EIO)
            with pytest.raises(KafkaError) as raised:
                await asyncio.wait_for(failed, TIMEOUT_S)
            assert raised.value.code == ErrorCode.kafka_storage_error
            assert checked == [True]

    _run(test)


def test_a_flush_that_fails_to_end_does_not_lose_the_others_of_its_batch() -> None:
    """Two partitions' fsyncs come back together; ending the first raises (a bug of
    ours): the second's waiter is still answered (the batch was taken off the pool)."""

    async def test() -> None:
        async with _flushing() as (flusher, first, _, pool):
            second = _Partition(first.log._fd)
            real_end = flusher._end

            def end_then_raise(fsyncs: Any) -> None:
                real_end(fsyncs)
                if fsyncs.partition is first:
                    raise ValueError("a bug")

            flusher._end = end_then_raise  # type: ignore[method-assign]
            first.log.end = second.log.end = 1
            waits = [flusher.wait_durable(first, 1), flusher.wait_durable(second, 1)]
            await _fsync_handed_off(pool)
            while len(pool.held) < 2:
                await asyncio.sleep(0.001)
            pool.finish()
            pool.finish()  # both answered before the loop collects them
            await asyncio.wait_for(asyncio.gather(*waits), 5)

    _run(test)


class _RealPartition:
    """A real partition log, for what a truncation does to its waiters."""

    def __init__(self, log: PartitionLog) -> None:
        self.log = log

    def check_offline(self) -> None:
        """As _Partition's."""


@pytest.mark.parametrize("start_over", [False, True])
def test_a_cut_fails_the_waiters_of_what_it_removed_and_the_fsyncs_stop(
    tmp_path: Path, start_over: bool
) -> None:
    """A demoted leader's diverged tail cut (or its whole log dropped) while acks=all
    appends wait: their waiters get NOT_LEADER_OR_FOLLOWER at once. Without `cut`, a
    waiter above the new end kept the partition's fsyncs going round, thousands a second
    with nothing to sync, until the request timed out; a coordinator's write never did,
    and `stop` waited for it."""

    async def test() -> None:
        log = PartitionLog.open(tmp_path / "t-0", CONFIG, clean_shutdown=False)
        append_batches(log, 0, 10)  # offsets 0-19
        partition = _RealPartition(log)
        flusher = GroupCommitFlusher()
        flusher.start()
        try:
            below, beyond = flusher.wait_durable(partition, 10), flusher.wait_durable(partition, 20)
            if start_over:
                log.start_over_at(30)
                flusher.cut(partition, None)
            else:
                log.truncate_to(10)
                flusher.cut(partition, log.log_end_offset)
            failed = [beyond, below] if start_over else [beyond]
            for future in failed:
                with pytest.raises(KafkaError) as raised:
                    await asyncio.wait_for(future, 5)
                assert raised.value.code == ErrorCode.not_leader_or_follower
            if not start_over:
                await asyncio.wait_for(below, 5)  # the kept offsets: fsynced as usual
            await asyncio.sleep(0.2)
            assert flusher.fsync_rounds <= 2, f"{flusher.fsync_rounds} fsync rounds"
        finally:
            await asyncio.wait_for(flusher.stop(), 5)
            log.close()

    _run(test)


def test_an_fsync_answered_after_a_cut_covers_only_what_the_cut_left(tmp_path: Path) -> None:
    """The fsync of 0-19 ends; before the loop handles its answer, the log is cut to 10,
    records 10-19 appended again (leader again) and waited for: they are not durable, and
    the finished fsync's answer must not say they are (``end_flush`` sees the cut)."""

    async def test() -> None:
        log = PartitionLog.open(tmp_path / "t-0", CONFIG, clean_shutdown=False)
        append_batches(log, 0, 10)  # offsets 0-19
        partition = _RealPartition(log)
        pools: list[HeldFsyncPool] = []
        flusher = GroupCommitFlusher(lambda n: pools.append(HeldFsyncPool(n)) or pools[-1])
        flusher.start()
        try:
            first = flusher.wait_durable(partition, 20)
            await _fsync_handed_off(pools[0])
            pools[0].finish()  # fsynced and answered; the loop has not seen it yet
            log.truncate_to(10)
            flusher.cut(partition, log.log_end_offset)
            with pytest.raises(KafkaError):
                await asyncio.wait_for(first, TIMEOUT_S)
            append_batches(log, 100, 5)  # 10-19 again, never fsynced
            again = flusher.wait_durable(partition, 20)
            await _fsync_handed_off(pools[0])  # the finished one handled, the next handed off
            assert not again.done() and log.recovery_point < 20, "answered, not durable"
            while pools[0].held:  # the log's file, and its directory (the cut changed it)
                pools[0].finish()
            await asyncio.wait_for(again, TIMEOUT_S)  # by the next fsync
            assert log.recovery_point == 20
        finally:
            await asyncio.wait_for(flusher.stop(), TIMEOUT_S)
            log.close()

    _run(test)


def _policies_of_a_started_flusher(flusher: GroupCommitFlusher) -> set[int]:
    async def test() -> set[int]:
        before = fsync_threads()
        flusher.start()
        try:
            return policies_of_new_threads(before)
        finally:
            await flusher.stop()

    return asyncio.run(asyncio.wait_for(test(), TIMEOUT_S))


def test_a_flusher_given_a_priority_fsyncs_on_sched_fifo_threads_where_the_process_may() -> None:
    expected = os.SCHED_FIFO if may_run_real_time() else os.SCHED_OTHER
    assert _policies_of_a_started_flusher(GroupCommitFlusher(priority=1)) == {expected}


def test_a_flusher_given_no_priority_fsyncs_on_threads_of_the_normal_policy() -> None:
    assert _policies_of_a_started_flusher(GroupCommitFlusher(priority=0)) == {os.SCHED_OTHER}
    assert _policies_of_a_started_flusher(GroupCommitFlusher()) == {os.SCHED_OTHER}


@pytest.mark.parametrize(
    ("priority", "granted", "said"),
    [
        (1, True, "fsync threads at SCHED_FIFO priority 1"),
        (1, False, "LimitRTPRIO=1"),
        (0, False, "oncelog.fsync.realtime.priority=0"),
    ],
)
def test_the_fsync_threads_priority_is_said_once_in_the_log(
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    priority: int,
    granted: bool,
    said: str,
) -> None:
    class Pool(PythonFsyncPool):
        realtime = granted

    monkeypatch.setattr(durability, "FsyncPool", Pool)
    with caplog.at_level(logging.INFO, logger=durability.__name__):
        durability.realtime_pool(1, priority).stop()
    lines = [r.getMessage() for r in caplog.records if "fsync threads" in r.getMessage()]
    assert len(lines) == 1 and said in lines[0]
