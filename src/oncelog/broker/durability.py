"""Group commit: fsync off the event loop, one fsync for every append waiting at that moment.

A produce request with acks=-1 asks to be answered once its batches are on disk; so do the
coordinators' writes and transaction markers. Each registers what it waits for, and the
partition is fsynced on a worker thread. Appends that arrive while that fsync runs are
covered by the partition's next one, so under load many producers share each fsync
instead of queueing behind one fsync each.

Partitions are flushed independently and concurrently: a waiter is answered as soon as
its own partition is durable, not when every partition with waiters is. (One round for all
partitions, fsyncing them one after another, made every transaction wait for the data
partitions, the markers' partitions and `__transaction_state` in turn, several times.)

The threads that fsync never take the GIL (broker/_fsync_pool.c): the loop claims what a
flush covers (``PartitionLog.begin_flush``: pinning may reopen a file the cache closed,
and a roll's directory is opened, both on the loop now), a thread fsyncs and says so
through an eventfd, and the loop ends the flush (``end_flush``) and answers the waiters.
Python threads running the whole flush took the GIL twice per fsync while the loop holds
it nearly all the time under load; what that cost and what this change measured, commit
p99 included, is in README's "The fsync threads without the GIL" (issue 12). While the
file cache is crowded a flush fsyncs the offset index with its data under the log's
checkpoint lock (storage/log.py), which the loop must not hold across an fsync: those
flushes still run whole on Python threads.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from oncelog.broker._fsync_pool import FsyncPool
from oncelog.broker.fsync_threads import FsyncThreads
from oncelog.broker.partition import Partition
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.storage.log import FlushClaim

log = logging.getLogger(__name__)

# fsyncs in flight at once (one flush per partition at most). Threads wait on the disk,
# not on the CPU, so a few more than the cores.
FSYNC_THREADS = 8


@dataclass(eq=False)
class _Partition:
    """Who waits on one partition's durability, and whether fsyncs of it are under way."""

    waiters: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)
    requested: bool = False  # flush without a waiter (flush.messages, flush.ms)
    # Set from the kick until no waiter is left after an fsync: fsyncs of the partition
    # run one at a time, one after the other while waiters remain (``stop`` awaits it).
    flushing: asyncio.Future[None] | None = None
    started: float = 0.0  # time.monotonic() when the running fsync was handed off
    offline: bool = False  # the log was already offline when that fsync was handed off


@dataclass(eq=False)
class _Fsyncs:
    """One flush's fsyncs on the pool: it ends when the last of them does."""

    partition: Partition
    state: _Partition
    claim: FlushClaim
    running: int
    error: BaseException | None = None  # the first fsync's failure, or a failed submit


class GroupCommitFlusher:
    """The flusher: fsyncs, off the loop, every partition that has appends waiting to be
    durable, and wakes their waiters (see the module docstring).

    A partition's first fsync is handed to a thread one loop turn after the append that
    asked for it (``call_soon``), so that every append of that turn shares it; the
    thread's answer is handled in the loop turn that sees it, by a plain callback that
    answers the waiters and hands off the next fsync when appends arrived meanwhile. (A
    task awaiting a future per fsync, as before, spent one more loop turn per fsync, its
    wake-up: 0.35-0.38 ms at the median with 16 transactional producers, see
    fsync_threads.py. Throughput and commit latency did not move measurably with it, as
    the loop's CPU bounds them there: bench/commit_latency.py, README, issue 12.)

    ``pool``: makes what fsyncs the claimed descriptors, given the thread count (by
    default ``realtime_pool``: the GIL-free threads, at the SCHED_FIFO ``priority`` where
    the process may set it, 0 for none; the broker passes
    ``oncelog.fsync.realtime.priority``: a woken thread starts its fsync, and ends it after
    the I/O, without waiting for a CPU; README, "The fsync threads' wait for a CPU").
    Tests give stand-ins that hold an fsync until they let it finish, or fsync through
    Python so that a fault they inject there reaches the broker.
    """

    def __init__(
        self, pool: Callable[[int], FsyncPool] | None = None, *, priority: int = 0
    ) -> None:
        self._partitions: dict[Partition, _Partition] = {}
        self._priority = priority
        self._threads: FsyncThreads | None = None  # whole flushes, while the cache is crowded
        self._make_pool = pool
        self._pool: FsyncPool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tokens = itertools.count()
        self._fsyncs: dict[int, _Fsyncs] = {}  # by the token the pool answers with
        self._stopping = False
        self.fsync_rounds = 0  # partition fsyncs done (a round covers all its waiters)
        self.on_fsync: Callable[[float], None] | None = None  # seconds of each fsync

    def start(self) -> None:
        """Start the threads; on the event loop, which watches the pool's eventfd."""
        self._threads = FsyncThreads(FSYNC_THREADS)
        if self._make_pool is not None:
            self._pool = self._make_pool(FSYNC_THREADS)
        else:
            self._pool = realtime_pool(FSYNC_THREADS, self._priority)
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._pool.fileno(), self._collect)
        self._stopping = False

    async def stop(self) -> None:
        self._stopping = True
        flushing = [s.flushing for s in self._partitions.values() if s.flushing is not None]
        await asyncio.gather(*flushing, return_exceptions=True)
        error = KafkaError(ErrorCode.request_timed_out, "broker shutting down")
        for state in self._partitions.values():
            for _, future in state.waiters:
                if not future.done():
                    future.set_exception(error)
        self._partitions.clear()
        if self._threads is not None:
            self._threads.stop()
            self._threads = None
        if self._pool is not None and self._loop is not None:
            self._loop.remove_reader(self._pool.fileno())
            self._pool.stop()
            self._pool = None

    def wait_durable(self, partition: Partition, end_offset: int) -> asyncio.Future[None]:
        """A future resolved once every offset below `end_offset` is fsynced."""
        future = asyncio.get_running_loop().create_future()
        if partition.log.recovery_point >= end_offset:
            future.set_result(None)
            return future
        state = self._partitions.setdefault(partition, _Partition())
        state.waiters.append((end_offset, future))
        self._kick(partition, state)
        return future

    def cut(self, partition: Partition, kept_below: int | None) -> None:
        """A follower cut the partition's log below ``kept_below`` (None: it dropped the
        whole log and started over): fail the waiters for offsets it removed with
        NOT_LEADER_OR_FOLLOWER, the answer of a leadership that ended. Left waiting, such a
        waiter kept fsyncs of a log with nothing to sync going round (``_next`` hands off
        while anyone waits), held up ``stop``, and would have been answered once other
        records filled its offsets again."""
        error = KafkaError(ErrorCode.not_leader_or_follower, "the log was cut: not the leader")
        self._fail_waiters(partition, error, kept_below)

    def drop(self, partition: Partition, error: KafkaError) -> None:
        """This broker closes or deletes the partition's log (the replica moved away, its
        topic was deleted, the broker stops): fail every waiter with ``error``, the answer
        the closer knows to be Kafka's. Left to the next fsync round, they were all told
        UNKNOWN_TOPIC_OR_PARTITION (the closed log's answer), or KAFKA_STORAGE_ERROR when
        an fsync in flight met the deleted directory."""
        self._fail_waiters(partition, error, None)

    def _fail_waiters(
        self, partition: Partition, error: KafkaError, kept_below: int | None
    ) -> None:
        state = self._partitions.get(partition)
        if state is None:
            return
        kept = []
        for end_offset, future in state.waiters:
            if kept_below is not None and end_offset <= kept_below:
                kept.append((end_offset, future))
            elif not future.done():
                future.set_exception(error)
        state.waiters = kept

    def request_flush(self, partition: Partition) -> None:
        """Flush `partition` soon without anyone waiting on it."""
        state = self._partitions.setdefault(partition, _Partition())
        state.requested = True
        self._kick(partition, state)

    def _kick(self, partition: Partition, state: _Partition) -> None:
        if state.flushing is None and not self._stopping and self._threads is not None:
            loop = asyncio.get_running_loop()
            state.flushing = loop.create_future()
            loop.call_soon(self._next, partition, state)

    def _next(self, partition: Partition, state: _Partition) -> None:
        """Hand off the partition's next fsync while anyone waits for one, else end its
        chain. Every path ends in one or the other: a chain left half-way would keep
        ``flushing`` set, so no later append would start an fsync and ``stop`` would wait
        for ever."""
        if state.waiters or state.requested:
            try:
                self._hand_off(partition, state)
                return
            except Exception as exc:  # the threads are stopped, or a bug: no fsync will come
                if not isinstance(exc, RuntimeError):
                    log.exception("handing off a flush of %r failed", partition)
                _fail(state, KafkaError(ErrorCode.request_timed_out, f"not flushed: {exc}"))
                state.requested = False
        assert state.flushing is not None
        if not state.flushing.done():  # cancelled when a cancelled ``stop`` gathered it
            state.flushing.set_result(None)
        state.flushing = None
        self._partitions.pop(partition, None)

    def _hand_off(self, partition: Partition, state: _Partition) -> None:
        """Claim what the partition's flush covers and have the pool fsync it (a thread
        the whole flush, while the file cache is crowded); ``_flushed`` gets the answer,
        in a later loop turn."""
        threads, pool, loop = self._threads, self._pool, self._loop
        if threads is None or pool is None or loop is None:
            raise RuntimeError("the fsync threads have stopped")
        state.requested = False
        state.offline = partition.log.failed  # already: its failure was logged then
        state.started = time.monotonic()
        if partition.log.file_cache.crowded:  # the index goes with its data (PartitionLog.flush)
            threads.submit(partition.log.flush, functools.partial(self._flushed, partition, state))
            return
        try:
            claim = partition.log.begin_flush()
        except Exception as exc:  # offline, a reopen failed, or a bug: _answer tells which
            loop.call_soon(self._flushed, partition, state, None, exc)
            return
        if claim is None:  # closed meanwhile
            loop.call_soon(self._flushed, partition, state, None, None)
            return
        fsyncs = _Fsyncs(partition, state, claim, 0)
        token = next(self._tokens)
        self._fsyncs[token] = fsyncs
        try:
            for fd in claim.to_fsync:
                pool.submit(token, fd)
                fsyncs.running += 1
        except Exception as exc:  # stopped, or out of memory: the claim still ends, failed
            fsyncs.error = exc
        if not fsyncs.running:  # nothing written since the last flush, or none submitted
            del self._fsyncs[token]
            loop.call_soon(self._end, fsyncs)

    def _collect(self) -> None:
        """On the loop, when the pool's eventfd is readable: the fsyncs that ended; a flush
        whose last fsync ended is ended (``end_flush``) and its waiters answered."""
        if self._pool is None:
            return
        for token, error_number in self._pool.collect():
            fsyncs = self._fsyncs[token]
            fsyncs.running -= 1
            if error_number and not isinstance(fsyncs.error, OSError):  # a failed fsync
                # wins over a failed submit: only it takes the log offline
                fsyncs.error = OSError(error_number, os.strerror(error_number))
            if fsyncs.running == 0:
                del self._fsyncs[token]
                try:
                    self._end(fsyncs)
                except Exception:  # a bug of ours must not lose the rest of the batch
                    log.exception("ending a flush of %r failed", fsyncs.partition)

    def _end(self, fsyncs: _Fsyncs) -> None:
        error = fsyncs.error
        try:
            fsyncs.partition.log.end_flush(fsyncs.claim, error)
        except Exception as exc:  # a bug: _answer tells the waiters
            error = error or exc
        self._flushed(fsyncs.partition, fsyncs.state, None, error)

    def _flushed(
        self,
        partition: Partition,
        state: _Partition,
        _durable: int | None,
        error: BaseException | None,
    ) -> None:
        """On the loop, with an fsync's outcome: answer its waiters, then go on. What the
        flush returned (its recovery point) is not used: ``_answer`` reads the log's."""
        try:
            self._answer(partition, state, error)
        except Exception:  # a bug of ours must not leave the chain half-way (see _next)
            log.exception("answering the waiters of %r failed", partition)
            _fail(state, KafkaError(ErrorCode.request_timed_out, "not known to be flushed"))
        if error is None and self.on_fsync is not None:
            try:
                self.on_fsync(time.monotonic() - state.started)
            except Exception:
                log.exception("the fsync hook failed")
        self._next(partition, state)

    def _answer(
        self,
        partition: Partition,
        state: _Partition,
        error: BaseException | None,
    ) -> None:
        """Answer the waiters the fsync covered, or fail them all when it failed."""
        if partition.log.closed:  # its topic was deleted: the offsets never will be
            # before a failure: an fsync in flight when the directory went is no storage
            # failure (a deleted topic's waiters get UNKNOWN_TOPIC_OR_PARTITION, as Kafka)
            self.fsync_rounds += 1
            _fail(state, KafkaError(ErrorCode.unknown_topic_or_partition, "deleted"))
        elif isinstance(error, OSError):
            log.log(
                logging.DEBUG if state.offline else logging.ERROR,
                "fsync of %r failed: %s",
                partition,
                error,
            )
            _fail(state, KafkaError(ErrorCode.kafka_storage_error, f"fsync failed: {error}"))
            partition.check_offline()  # cluster: its leadership moves (guarded there)
        elif error is not None:
            # A bug of ours, not a storage failure: the log keeps the appends and a later
            # fsync covers them, so the waiters get Kafka's retriable answer for an acks=all
            # append not known durable in time (an idempotent retry is deduplicated).
            log.error("flush of %r failed", partition, exc_info=error)
            _fail(state, KafkaError(ErrorCode.request_timed_out, f"flush failed: {error!r}"))
        else:
            self.fsync_rounds += 1
            # The log's recovery point as the loop sees it now, not the fsync's answer: it
            # covers only fsynced offsets, and a cut since the fsync ended (on the loop,
            # before this callback) lowered it below records appended after the cut.
            state.waiters = _answer_covered(state.waiters, partition.log.recovery_point)


def realtime_pool(threads: int, priority: int) -> FsyncPool:
    """The GIL-free fsync threads, at SCHED_FIFO ``priority`` where the process may set it
    (CAP_SYS_NICE or RLIMIT_RTPRIO), 0 for the normal policy; which one they got is said
    once in the log. Fsyncs are as durable either way; at the normal policy a waiter may
    wait for a CPU as well as for the disk."""
    pool = FsyncPool(threads, priority=priority)
    if pool.realtime:
        log.info("fsync threads at SCHED_FIFO priority %d (I/O best-effort)", priority)
    elif priority:
        log.info(
            "fsync threads at the normal priority: no right to SCHED_FIFO %d; allow it with "
            "RLIMIT_RTPRIO >= %d (systemd LimitRTPRIO=%d) or CAP_SYS_NICE, or set "
            "oncelog.fsync.realtime.priority=0",
            priority,
            priority,
            priority,
        )
    else:
        log.info("fsync threads at the normal priority (oncelog.fsync.realtime.priority=0)")
    return pool


def _fail(state: _Partition, error: KafkaError) -> None:
    for _, future in state.waiters:
        if not future.done():
            future.set_exception(error)
    state.waiters = []


def _answer_covered(
    waiters: list[tuple[int, asyncio.Future[None]]], durable: int
) -> list[tuple[int, asyncio.Future[None]]]:
    """Answer every waiter whose offsets are below ``durable``; the ones still waiting
    (appended after the fsync took the log's end: the next fsync covers them)."""
    still = []
    for end_offset, future in waiters:
        if future.done():
            continue
        if end_offset <= durable:
            future.set_result(None)
        else:
            still.append((end_offset, future))
    return still
