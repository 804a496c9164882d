"""Group commit: fsync off the event loop, one fsync for every append waiting at that moment.

A produce request with acks=-1 asks to be answered once its batches are on disk. It
registers what it waits for and the flusher task fsyncs every partition with waiters in
one worker-thread call. Appends that arrive while that fsync runs are covered by the
next one, so under load many producers share each fsync instead of queueing behind one
fsync each.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from oncelog.broker.partition import Partition
from oncelog.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)


class GroupCommitFlusher:
    def __init__(self) -> None:
        self._pending: dict[Partition, list[tuple[int, asyncio.Future[None]]]] = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.fsync_rounds = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="group-commit-flusher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for waiters in self._pending.values():
            for _, future in waiters:
                if not future.done():
                    future.set_exception(
                        KafkaError(ErrorCode.request_timed_out, "broker shutting down")
                    )
        self._pending.clear()

    def wait_durable(self, partition: Partition, end_offset: int) -> asyncio.Future[None]:
        """A future resolved once every offset below `end_offset` is fsynced."""
        future = asyncio.get_running_loop().create_future()
        if partition.log.recovery_point >= end_offset:
            future.set_result(None)
            return future
        self._pending.setdefault(partition, []).append((end_offset, future))
        self._wakeup.set()
        return future

    def request_flush(self, partition: Partition) -> None:
        """Flush `partition` in the next round without anyone waiting on it."""
        self._pending.setdefault(partition, [])
        self._wakeup.set()

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            batch, self._pending = self._pending, {}
            if not batch:
                continue
            try:
                await asyncio.to_thread(_flush_all, list(batch))
            except OSError as exc:
                log.error("fsync failed: %s", exc)
                _fail(batch, KafkaError(ErrorCode.kafka_storage_error, f"fsync failed: {exc}"))
                continue
            self.fsync_rounds += 1
            for partition, waiters in batch.items():
                durable = partition.log.recovery_point
                for end_offset, future in waiters:
                    if future.done():
                        continue
                    if end_offset <= durable:
                        future.set_result(None)
                    else:  # appended after the fsync started: next round
                        self._pending.setdefault(partition, []).append((end_offset, future))
                        self._wakeup.set()


def _flush_all(partitions: Iterable[Partition]) -> None:
    for partition in partitions:
        partition.log.flush()


def _fail(
    batch: dict[Partition, list[tuple[int, asyncio.Future[None]]]], error: KafkaError
) -> None:
    for waiters in batch.values():
        for _, future in waiters:
            if not future.done():
                future.set_exception(error)
