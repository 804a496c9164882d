"""Periodic partition upkeep: time-based rolls, retention, producer expiry, scheduled
flushes and checkpoints.

Each job has its own period (Kafka's keys); one task ticks once a second and runs the
jobs that are due, so an idle broker does almost nothing. The pass over the partitions
yields to the event loop every SLICE partitions, so thousands of partitions never hold up
a request for long; checkpoints are written off the loop, and only where they changed.
A failure (a disk full, no file descriptor left) is logged once per pass with how many
partitions it hit, not once per partition.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from oncelog.storage.atomic_file import write_in_thread

if TYPE_CHECKING:
    from oncelog.broker.config import BrokerConfig
    from oncelog.broker.durability import GroupCommitFlusher
    from oncelog.broker.partition import Partition


class PartitionSource(Protocol):
    """Where the partitions to look after come from: the topic registry of a single node,
    the replica manager of a cluster broker."""

    def partitions(self) -> list[Partition]: ...


log = logging.getLogger(__name__)

TICK_S = 1.0
# Kafka's log.flush.offset.checkpoint.interval.ms default: how often recovery points
# are persisted, which bounds how much log an unclean start has to rescan.
CHECKPOINT_INTERVAL_MS = 60_000
# Partitions looked at between two yields to the event loop (about a millisecond of work).
SLICE = 256


class Maintenance:
    """The broker's periodic upkeep task (see the module docstring)."""

    def __init__(
        self,
        topics: PartitionSource,
        flusher: GroupCommitFlusher,
        config: BrokerConfig,
        clock_ms: Callable[[], int],
    ) -> None:
        self._topics = topics
        self._flusher = flusher
        self._config = config  # read at each use: producer.id.expiration.ms is dynamic
        self._retention_interval_ms = config.log_retention_check_interval_ms
        self._clock_ms = clock_ms
        self._next_retention_ms = 0
        self._next_checkpoint_ms = 0

    async def run(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            await self.tick(self._clock_ms())

    async def tick(self, now_ms: int) -> None:
        retention_due = now_ms >= self._next_retention_ms
        checkpoint_due = now_ms >= self._next_checkpoint_ms
        failures = _Failures("maintenance")
        for count, partition in enumerate(self._topics.partitions(), 1):
            if count % SLICE == 0:
                await asyncio.sleep(0)
            if partition.log.closed:  # its topic was deleted while this pass yielded
                continue
            try:
                partition.log.maybe_roll(now_ms)
                if retention_due:
                    deleted = partition.log.apply_retention(now_ms, partition.high_watermark)
                    if deleted:
                        log.info("retention deleted %d segment(s) of %r", deleted, partition)
                        partition.after_retention()
                    expired = partition.expire_producers(
                        now_ms, self._config.producer_id_expiration_ms
                    )
                    if expired:
                        log.info("%r: producer ids %s expired", partition, expired)
            except OSError as exc:
                failures.add(partition, exc)
            if partition.flush_overdue(now_ms):
                self._flusher.request_flush(partition)
        failures.report()
        if retention_due:
            self._next_retention_ms = now_ms + self._retention_interval_ms
        if checkpoint_due:
            self._next_checkpoint_ms = now_ms + CHECKPOINT_INTERVAL_MS
            stopping = threading.Event()
            failed: list[Partition] = []
            await write_in_thread(lambda: self._write_checkpoints(stopping, failed), stopping)
            for partition in failed:  # back on the loop: a failed index fsync took it offline
                partition.check_offline()

    def _write_checkpoints(self, stopping: threading.Event, failed: list[Partition]) -> None:
        """Each partition's recovery checkpoint (its indexes fsynced first), until
        ``stopping`` is set (the broker stops: each log writes its own when it closes).
        The partitions it failed on are added to ``failed``."""
        failures = _Failures("writing the recovery checkpoint")
        for partition in self._topics.partitions():
            if stopping.is_set():
                break
            try:
                partition.log.write_recovery_checkpoint()
            except OSError as exc:
                failures.add(partition, exc)
                failed.append(partition)
        failures.report()


class _Failures:
    """The partitions one pass failed on, reported in one log line."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._count = 0
        self._first: str | None = None

    def add(self, partition: Partition, exc: OSError) -> None:
        self._count += 1
        if self._first is None:
            self._first = f"{partition!r}: {exc}"

    def report(self) -> None:
        if self._count:
            log.error(
                "%s failed for %d partition(s); first %s", self._what, self._count, self._first
            )
