"""The log cleaner (Kafka's ``LogCleaner`` with its ``LogCleanerManager``): compacts the
partitions whose ``cleanup.policy`` includes ``compact``.

One task on the event loop picks the filthiest log (``compaction.cleanable_range``), takes
what a pass needs at one moment (segments, last stable offset, aborted transactions, the
producers' last entries), runs the pass in a worker thread (``storage/cleaner.py``) and
swaps the cleaned segments in back on the loop. Produce and fetch go on meanwhile: the
pass touches neither the active segment nor anything at or past the last stable offset,
and the swap is refused (the pass thrown away) if the segments it read changed.

Where each log's last pass stopped is kept in ``cleaner-offset-checkpoint`` in its
directory (Kafka keeps one such file per log directory).
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from oncelog.producers.snapshot import snapshot_path
from oncelog.storage.checkpoint import read_checkpoint, write_checkpoint
from oncelog.storage.cleaner import (
    CleanerStats,
    CleaningAborted,
    CleaningJob,
    CleaningResult,
    clean,
)
from oncelog.storage.compaction import (
    CleanableRange,
    CleaningRules,
    ProducerLastEntry,
    cleanable_range,
)

if TYPE_CHECKING:
    from oncelog.broker.config import BrokerConfig
    from oncelog.broker.maintenance import PartitionSource
    from oncelog.broker.partition import Partition

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "cleaner-offset-checkpoint"
PROGRESS_LOG_INTERVAL_S = 10.0


@dataclass(slots=True)
class CleanerStatus:
    """What the cleaner has done, for metrics and tools (Kafka's cleaner gauges)."""

    passes: int = 0
    passes_discarded: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    last_pass: CleanerStats | None = None
    last_pass_partition: str = ""
    current_partition: str = ""
    current_bytes_done: int = 0
    current_bytes_total: int = 0
    max_dirty_ratio: float = 0.0
    last_run_ms: int = 0
    dirty_ratios: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Candidate:
    partition: Partition
    range: CleanableRange


class LogCleaner:
    """The event-loop side of log compaction: picks the filthiest log, runs a pass in a worker
    thread and swaps the cleaned segments in (see the module docstring)."""

    def __init__(
        self, partitions: PartitionSource, config: BrokerConfig, *, clock_ms: Callable[[], int]
    ) -> None:
        """``partitions``: what this broker holds (a single node's topics, or a cluster
        broker's replicas, leaders and followers alike: each cleans its own log, as in
        Kafka)."""
        self._partitions = partitions
        self._config = config  # read at each pass: the cleaner's keys are dynamic
        self._clock_ms = clock_ms
        self._stopping = False
        self._pass_stop = threading.Event()  # set to abort the pass under way
        self._wake = asyncio.Event()
        self._current: Partition | None = None
        self._task: asyncio.Task[None] | None = None
        self.status = CleanerStatus()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="log-cleaner")

    async def stop(self) -> None:
        """Abort the pass under way (its files are removed) and wait for the thread."""
        self._stopping = True
        self._pass_stop.set()
        self._wake.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    def wake(self) -> None:
        """Look for work now (tests, and after a config change)."""
        self._wake.set()

    def abort(self, partition: Partition) -> None:
        """Stop cleaning ``partition`` (it is being deleted or truncated). The pass's
        result is thrown away; the swap would refuse it anyway."""
        if self._current is partition:
            log.info("aborting the cleaning of %r", partition)
            self._pass_stop.set()

    def truncated(self, partition: Partition, offset: int) -> None:
        """A follower's log was cut at ``offset`` (or started over there): abort a pass
        over it and move its cleaner checkpoint back to the cut, so the next pass starts
        within the log (Kafka's ``abortAndPauseCleaning`` and ``maybeTruncateCheckpoint``
        around ``LogManager.truncateTo``)."""
        self.abort(partition)
        path = partition.log.directory / CHECKPOINT_FILE
        checkpoint = read_checkpoint(path)
        if checkpoint is not None and checkpoint > offset:
            write_checkpoint(path, offset)

    # -- the loop ------------------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._stopping:
            try:
                cleaned = await self.clean_filthiest()
            except Exception:
                log.exception("log cleaner pass failed")
                cleaned = False
            if cleaned:
                continue
            self._wake.clear()
            try:
                async with asyncio.timeout(self._config.log_cleaner_backoff_ms / 1000):
                    await self._wake.wait()
            except TimeoutError:
                pass

    async def clean_filthiest(self) -> bool:
        """Clean the dirtiest log that needs it; False if none does."""
        now = self._clock_ms()
        self.status.last_run_ms = now
        candidate = self._filthiest(now)
        if candidate is None:
            return False
        await self.clean_partition(candidate.partition, candidate.range, now)
        return True

    def _filthiest(self, now_ms: int) -> _Candidate | None:
        best: _Candidate | None = None
        ratios: dict[str, float] = {}
        for partition in self._partitions.partitions():
            config = partition.log.config
            # A failed log is offline until a restart (Kafka's cleaner drops the logs of an
            # offline directory): cleaning it could only fail again, or rewrite it from pages
            # the kernel may have dropped, and as the filthiest it would hold up every other.
            if not config.compact or partition.log.failed:
                continue
            found = find_cleanable(partition, now_ms)
            ratios[f"{partition.topic}-{partition.index}"] = found.dirty_ratio
            if not found.should_clean(config.min_cleanable_dirty_ratio):
                continue
            if best is None or found.dirty_ratio > best.range.dirty_ratio:
                best = _Candidate(partition, found)
        self.status.dirty_ratios = ratios
        self.status.max_dirty_ratio = max(ratios.values(), default=0.0)
        return best

    # -- one pass ------------------------------------------------------------------------------

    async def clean_partition(
        self, partition: Partition, found: CleanableRange, now_ms: int
    ) -> bool:
        """One pass over ``partition``; True if its cleaned segments were swapped in."""
        job = cleaning_job(
            partition,
            found,
            now_ms,
            self._config.log_cleaner_dedupe_buffer_size,
            self._config.log_cleaner_io_max_bytes_per_second,
        )
        name = job.name
        log.info(
            "cleaning %s: offsets %d..%d dirty (%.0f%% of %d bytes)",
            name,
            found.first_dirty_offset,
            found.first_uncleanable_offset,
            100 * found.dirty_ratio,
            found.clean_bytes + found.cleanable_bytes,
        )
        self._current = partition
        self._pass_stop.clear()
        self.status.current_partition = name
        try:
            result = await asyncio.to_thread(clean, job, self._pass_stop, self._progress(name))
        except CleaningAborted:
            log.info("cleaning of %s aborted", name)
            return False
        except OSError:
            if self._live(partition) is partition:
                raise
            log.info("cleaning of %s stopped: the topic was deleted", name)
            return False
        finally:
            job.close()
            self._current = None
            self.status.current_partition = ""
            self.status.current_bytes_done = self.status.current_bytes_total = 0
        return await self._swap(partition, name, result)

    async def _swap(self, partition: Partition, name: str, result: CleaningResult) -> bool:
        partition_log = partition.log
        swapped = (
            not self._pass_stop.is_set()
            and partition is self._live(partition)
            and partition_log.replace_segments(result.groups)
        )
        stats = result.stats
        self.status.passes += 1
        if not swapped:
            self.status.passes_discarded += 1
            await asyncio.to_thread(result.discard)
            log.info("cleaning of %s thrown away: the log changed meanwhile", name)
            return False
        self.status.bytes_read += stats.bytes_read
        self.status.bytes_written += stats.bytes_written
        self.status.last_pass, self.status.last_pass_partition = stats, name
        replaced = [s.base_offset for g in result.groups for s in g.replaced[1:]]
        await asyncio.to_thread(after_swap, partition, result.end_offset, replaced)
        log.info(
            "cleaned %s in %.2f s: %d keys mapped; read %d batches (%d bytes, %d records), "
            "wrote %d batches (%d bytes, %d records) into %d segment(s)",
            name,
            stats.elapsed_s,
            stats.map_keys,
            stats.batches_read,
            stats.bytes_read,
            stats.records_read,
            stats.batches_written,
            stats.bytes_written,
            stats.records_kept,
            len(result.groups),
        )
        return True

    def _live(self, partition: Partition) -> Partition | None:
        """The partition if this broker still holds it (not deleted, not dropped)."""
        return next((p for p in self._partitions.partitions() if p is partition), None)

    def _progress(self, name: str) -> Callable[[int, int], None]:
        """Called from the worker thread as the pass goes: status and a log line now
        and then (plain attribute writes: the event loop only reads them)."""
        last = [time.monotonic()]

        def report(done: int, total: int) -> None:
            self.status.current_bytes_done, self.status.current_bytes_total = done, total
            if time.monotonic() - last[0] >= PROGRESS_LOG_INTERVAL_S:
                last[0] = time.monotonic()
                log.info("cleaning %s: %d of %d bytes", name, done, total)

        return report


def find_cleanable(partition: Partition, now_ms: int) -> CleanableRange:
    """What a pass over ``partition`` may clean now (``compaction.cleanable_range`` fed
    from the live log, its producers and its checkpoint)."""
    partition_log = partition.log
    config = partition_log.config
    found = cleanable_range(
        partition_log.segment_stats(with_max_timestamps=config.min_compaction_lag_ms > 0),
        log_start_offset=partition_log.log_start_offset,
        log_end_offset=partition_log.log_end_offset,
        last_stable_offset=partition.last_stable_offset,
        checkpoint=read_checkpoint(partition_log.directory / CHECKPOINT_FILE),
        now_ms=now_ms,
        min_compaction_lag_ms=config.min_compaction_lag_ms,
        max_compaction_lag_ms=config.max_compaction_lag_ms,
    )
    if found.checkpoint_was_reset:
        log.warning(
            "%r: cleaner checkpoint outside the log; cleaning from the log start %d",
            partition,
            found.first_dirty_offset,
        )
    return found


def cleaning_job(
    partition: Partition,
    found: CleanableRange,
    now_ms: int,
    key_map_bytes: int,
    io_max_bytes_per_s: float = math.inf,
) -> CleaningJob:
    """Everything a pass over ``partition`` needs, taken now, on the event loop: the
    segments (with their own descriptors), the aborted transactions and each live
    producer's last entry, which the pass keeps."""
    partition_log = partition.log
    config = partition_log.config
    end = found.first_uncleanable_offset
    producers = {
        pid: ProducerLastEntry(entry.last_offset if entry.batches else None, entry.producer_epoch)
        for pid, entry in partition.producers.entries.items()
    }
    return CleaningJob(
        name=f"{partition.topic}-{partition.index}",
        directory=partition_log.directory,
        sources=tuple(partition_log.cleaning_sources(end)),
        first_dirty_offset=found.first_dirty_offset,
        first_uncleanable_offset=end,
        aborted_in_dirty=tuple(partition_log.aborted_txns(found.first_dirty_offset, end)),
        aborted_in_log=tuple(partition_log.aborted_txns(partition_log.log_start_offset, end)),
        rules=CleaningRules(now_ms, config.delete_retention_ms, producers),
        segment_bytes=config.segment_bytes,
        index_interval_bytes=config.index_interval_bytes,
        file_cache=partition_log.file_cache,
        key_map_bytes=key_map_bytes,
        io_max_bytes_per_s=io_max_bytes_per_s,
    )


def after_swap(partition: Partition, end_offset: int, replaced_bases: list[int]) -> None:
    """Persist where the next pass starts; drop the producer snapshots named after
    segments that no longer exist (as Kafka's ``replaceSegments`` does)."""
    directory = partition.log.directory
    write_checkpoint(directory / CHECKPOINT_FILE, end_offset)
    for base in replaced_bases:
        snapshot_path(directory, base).unlink(missing_ok=True)


def clean_now(partition: Partition, now_ms: int, key_map_bytes: int) -> CleaningResult | None:
    """One whole pass over ``partition`` in the calling thread, swap included (tests and
    tools; the broker runs the same steps with the pass in a worker thread). None if
    nothing was cleanable."""
    found = find_cleanable(partition, now_ms)
    if found.cleanable_bytes <= 0:
        return None
    job = cleaning_job(partition, found, now_ms, key_map_bytes)
    try:
        result = clean(job, threading.Event())
    finally:
        job.close()
    if not partition.log.replace_segments(result.groups):
        result.discard()
        return None
    after_swap(
        partition, result.end_offset, [s.base_offset for g in result.groups for s in g.replaced[1:]]
    )
    return result
