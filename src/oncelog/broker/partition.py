"""One topic-partition as the broker sees it: its log, its offsets and who waits on it.

All writes to a partition happen on the event loop, one after another (one writer per
partition); only the fsync runs on a worker thread (see durability.py).
"""

from __future__ import annotations

import asyncio
from oncelog.protocol.record_batch import BatchHeader, split_batches
from oncelog.storage import AppendResult, PartitionLog


class Partition:
    def __init__(
        self,
        topic: str,
        index: int,
        log: PartitionLog,
        *,
        max_message_bytes: int,
        log_append_time: bool,
        flush_messages: int,
        flush_ms: int,
    ) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.max_message_bytes = max_message_bytes
        self.log_append_time = log_append_time
        self.flush_messages = flush_messages
        self.flush_ms = flush_ms
        self._unflushed_since_ms: int | None = None
        self._waiters: list[asyncio.Future[None]] = []

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.index})"

    @property
    def high_watermark(self) -> int:
        """On a single node every appended batch is committed: the HW is the log end."""
        return self.log.log_end_offset

    @property
    def fsync_before_ack(self) -> bool:
        """acks=-1 waits for an fsync when every message is to be flushed (the default)."""
        return self.flush_messages <= 1

    def flush_due(self) -> bool:
        """More unflushed messages than `flush.messages` allows."""
        return self.log.log_end_offset - self.log.recovery_point >= self.flush_messages

    def flush_overdue(self, now_ms: int) -> bool:
        """Unflushed data older than `flush.ms` (checked by the maintenance task)."""
        if self.log.log_end_offset <= self.log.recovery_point:
            self._unflushed_since_ms = None
            return False
        if self._unflushed_since_ms is None:
            self._unflushed_since_ms = now_ms
        return now_ms - self._unflushed_since_ms >= self.flush_ms

    @property
    def last_stable_offset(self) -> int:
        return self.high_watermark

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def append_records(self, records: bytes, now_ms: int) -> AppendResult:
        """Validate the one batch a produce request carries for a partition, then append it."""
        ((header, batch),) = split_batches(records, max_message_bytes=self.max_message_bytes)
        return self.append_batch(batch, header, now_ms)

    def append_batch(self, batch: bytes | memoryview, header: BatchHeader, now_ms: int) -> AppendResult:
        result = self.log.append(batch, header, now_ms, log_append_time=self.log_append_time)
        self._wake_waiters()
        return result

    def wait_for_append(self, waiter: asyncio.Future[None]) -> None:
        """Resolve `waiter` at the next append (used by long-polling fetches)."""
        self._waiters.append(waiter)

    def forget_waiter(self, waiter: asyncio.Future[None]) -> None:
        try:
            self._waiters.remove(waiter)
        except ValueError:
            pass

    def _wake_waiters(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
