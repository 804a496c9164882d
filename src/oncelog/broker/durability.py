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
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from oncelog.broker.fsync_threads import FsyncThreads
from oncelog.broker.partition import Partition
from oncelog.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

# fsyncs in flight at once (one per partition at most). Threads wait on the disk, not on
# the CPU, so a few more than the cores.
FSYNC_THREADS = 8


@dataclass(eq=False)
class _Partition:
    """Who waits on one partition's durability, and whether an fsync of it is running."""

    waiters: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)
    requested: bool = False  # flush without a waiter (flush.messages, flush.ms)
    flushing: asyncio.Task[None] | None = None


class GroupCommitFlusher:
    """The flusher task: fsyncs, off the loop, every partition that has appends waiting to be
    durable, and wakes their waiters (see the module docstring)."""

    def __init__(self) -> None:
        self._partitions: dict[Partition, _Partition] = {}
        self._threads: FsyncThreads | None = None
        self._stopping = False
        self.fsync_rounds = 0  # partition fsyncs done (a round covers all its waiters)
        self.on_fsync: Callable[[float], None] | None = None  # seconds of each fsync

    def start(self) -> None:
        self._threads = FsyncThreads(FSYNC_THREADS)
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

    def request_flush(self, partition: Partition) -> None:
        """Flush `partition` soon without anyone waiting on it."""
        state = self._partitions.setdefault(partition, _Partition())
        state.requested = True
        self._kick(partition, state)

    def _kick(self, partition: Partition, state: _Partition) -> None:
        if state.flushing is None and not self._stopping and self._threads is not None:
            state.flushing = asyncio.ensure_future(self._flush(partition, state))

    async def _flush(self, partition: Partition, state: _Partition) -> None:
        """fsync the partition until no waiter is left beyond its recovery point."""
        threads = self._threads
        assert threads is not None
        try:
            while state.waiters or state.requested:
                state.requested = False
                offline = partition.log.failed  # already: its failure was logged then
                try:
                    started = time.monotonic()
                    durable = await threads.run(partition.log.flush)
                    if self.on_fsync is not None:
                        self.on_fsync(time.monotonic() - started)
                except OSError as exc:
                    log.log(
                        logging.DEBUG if offline else logging.ERROR,
                        "fsync of %r failed: %s",
                        partition,
                        exc,
                    )
                    _fail(state, KafkaError(ErrorCode.kafka_storage_error, f"fsync failed: {exc}"))
                    partition.check_offline()
                    continue
                self.fsync_rounds += 1
                if partition.log.closed:  # its topic was deleted: the offsets never will be
                    _fail(state, KafkaError(ErrorCode.unknown_topic_or_partition, "deleted"))
                    continue
                still = []
                for end_offset, future in state.waiters:
                    if future.done():
                        continue
                    if end_offset <= durable:
                        future.set_result(None)
                    else:  # appended after the fsync started: the next one covers it
                        still.append((end_offset, future))
                state.waiters = still
        finally:
            state.flushing = None
            if not state.waiters and not state.requested:
                self._partitions.pop(partition, None)


def _fail(state: _Partition, error: KafkaError) -> None:
    for _, future in state.waiters:
        if not future.done():
            future.set_exception(error)
    state.waiters = []
