"""The partition log: an ordered list of segments in ``<data_dir>/<topic>-<partition>/``.

Single writer: ``append``, ``read``, ``roll``, retention and truncation run on the event
loop thread. ``flush`` alone may run in a worker thread; it holds ``_lock`` only to claim
(pin) the dirty segments' files and note the log end offset, so an append never waits for
an fsync. Appends take the same lock, briefly, so the snapshot is consistent. The
group-commit flusher splits a flush in two on the loop (``begin_flush``, ``end_flush``)
and has threads without the GIL run the fsyncs in between (broker/_fsync_pool.c). A flush
that starts while another one's fsyncs run fsyncs that one's files too, and raises the
recovery point only if no other flush is still running when it ends (see ``_end_claim``).
``write_recovery_checkpoint`` may run in a worker thread too (the periodic checkpoint) while
the loop closes or deletes the log: checkpoint writes, close and delete take
``_checkpoint_lock``, so one temporary file never has two writers. A truncation that lowers
the recovery point writes its checkpoint (indexes first) on the loop thread, waiting for
the lock if the periodic checkpoint or a crowded flush (its ``.log`` + ``.index`` fsync)
holds it; so do ``close`` and ``delete`` of a replica a cluster drops.

What is durable when: an acknowledged append waits for an fsync of the segment's ``.log``
file (and ``.txnindex`` after an abort), never of its offset index. Kafka's segment flush
fsyncs the log and all its indexes together; oncelog parts from it there (one file per
durable append instead of two, issue 12) and keeps the invariant Kafka's recovery rests
on: everything a checkpoint covers, indexes included, was fsynced before the checkpoint
was written. So the offset index is fsynced before anything trusts it: before a
recovery-point checkpoint is written (recovery starts from its entries below that point)
and at a clean close and a clean open that rebuilt one (a clean start loads every index).
A crash before that costs the index's unsynced entries, which recovery rebuilds from the
log after the checkpointed recovery point. Durability of the data never waits for it,
except while the file cache is crowded: then a flush fsyncs the index with its data, so
that closing it for another file costs no fsync under the cache's lock (file_cache.py).
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.record_batch import (
    LOG_OVERHEAD,
    BatchHeader,
    assign_offsets,
    decode_records,
)
from oncelog.storage.checkpoint import fsync_directory, read_checkpoint, write_checkpoint
from oncelog.storage.cleaner import CLEANED_SUFFIX, CleanedGroup, SegmentSource
from oncelog.storage.compaction import SegmentStats
from oncelog.storage.file_cache import CachedFile, FileCache, open_files
from oncelog.storage.fsync import fsync_together
from oncelog.storage.recovery import RecoveryReport, recover_segment
from oncelog.storage.segment import MAX_RELATIVE_OFFSET, LogSegment, scan_file, segment_file_name
from oncelog.storage.txn_index import AbortedTxn

__all__ = ["AppendResult", "FlushClaim", "LogConfig", "PartitionLog", "SegmentInfo"]

log = logging.getLogger(__name__)

RECOVERY_POINT_FILE = "recovery-point"
RECOVERY_PROGRESS_INTERVAL_S = 10.0
# Kafka keeps log start offsets in one log-start-offset-checkpoint per log directory; we
# keep one per partition, beside the recovery point, written before DeleteRecords answers.
LOG_START_FILE = "log-start-offset"
_DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True)
class LogConfig:
    """Per-topic log settings; Kafka's names in comments."""

    segment_bytes: int = 1 << 30  # segment.bytes / log.segment.bytes
    segment_ms: int = 7 * _DAY_MS  # segment.ms / log.roll.ms
    retention_ms: int = 7 * _DAY_MS  # retention.ms / log.retention.ms; -1 = forever
    retention_bytes: int = -1  # retention.bytes / log.retention.bytes; -1 = unlimited
    index_interval_bytes: int = 4096  # index.interval.bytes
    max_message_bytes: int = 1048588  # max.message.bytes
    compact: bool = False  # cleanup.policy has compact
    delete: bool = True  # cleanup.policy has delete: retention applies
    delete_retention_ms: int = _DAY_MS  # delete.retention.ms
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    max_compaction_lag_ms: int = (1 << 63) - 1  # max.compaction.lag.ms

    @property
    def roll_ms(self) -> int:
        """Segment age that rolls the active segment: a compacted log rolls by
        max.compaction.lag.ms too, or its newest records could never be cleaned
        (Kafka's ``LogConfig.maxSegmentMs``)."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms


@dataclass(frozen=True)
class AppendResult:
    """Where an append went: its offsets, byte position and segment."""

    base_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    position: int  # byte position in the segment
    segment_base_offset: int


@dataclass(frozen=True)
class SegmentInfo:
    """One segment file of a partition log."""

    base_offset: int
    size_bytes: int
    path: Path


@dataclass(eq=False)
class FlushClaim:
    """What one flush fsyncs, claimed under the log's lock: every record below ``target``
    is durable once ``fds`` (pinned open until the flush ends) and, with ``dir_dirty``,
    the log's directory are fsynced."""

    target: int  # the log end offset when it was claimed
    cuts: int  # the log's truncations so far
    dirty: list[LogSegment]  # the segments it claimed (unclaimed again if it fails)
    files: list[CachedFile]  # theirs, and those of flushes still running
    fds: list[int]
    took_dir_dirty: bool  # it took the log's mark (set again if it fails)
    dir_dirty: bool  # the directory must be fsynced too (its mark, or a running flush's)
    dir_fd: int | None = None  # the directory, opened by begin_flush

    @property
    def to_fsync(self) -> list[int]:
        """Every descriptor the caller of ``begin_flush`` must fsync."""
        return self.fds if self.dir_fd is None else [*self.fds, self.dir_fd]


class PartitionLog:
    """Append, read, flush, roll, retain and recover one partition's segments."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: list[LogSegment],
        recovery_point: int,
        report: RecoveryReport,
        file_cache: FileCache,
        log_start_offset: int | None = None,
    ) -> None:
        self.directory = directory
        self.config = config
        # The file cache of every segment file of this log: the process's, taken when the
        # log was opened (a test may give its logs their own without moving others').
        self.file_cache = file_cache
        self.report = report
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._recovery_point = recovery_point
        # Never below the first segment's base; above it after DeleteRecords.
        self._log_start_offset = min(
            max(log_start_offset or 0, segments[0].base_offset), segments[-1].next_offset
        )
        self._checkpointed: int | None = None  # the recovery point the checkpoint file holds
        self._lock = threading.Lock()
        # Serialises checkpoint writes with close and delete (they share one temporary
        # file name), without holding up appends for the checkpoint's fsyncs.
        self._checkpoint_lock = threading.Lock()
        # One ``flush`` at a time (the group-commit flusher's begin/end_flush do not take
        # it: held from the loop until an fsync thread is done, a ``close`` on the loop
        # would wait for ever; its flushes of a partition run one after another anyway).
        # Overlapping flushes are made safe by ``_claims`` below.
        self._flush_lock = threading.Lock()
        # Truncations so far (``truncate_to``, ``start_over_at``; on the loop, not waiting
        # for a flush): a flush whose fsync overlapped one must not raise the recovery point
        # to the end it saw before the cut, above what was appended after it.
        self._cuts = 0
        self._dir_dirty = False  # segment files created or deleted since the last flush
        # Flushes whose fsyncs are running. A flush that finds nothing dirty (a running
        # one claimed it) would otherwise raise the recovery point over data whose fsync
        # is still running, and a ``close`` checkpoint it: a new claim takes the running
        # ones' files too.
        self._claims: list[FlushClaim] = []
        # Why this log is offline; None while it is not. After a failed fsync the kernel
        # may have dropped the dirty pages and marked them clean, so a later fsync can
        # succeed without them ever reaching the disk ("fsyncgate"); a write whose torn
        # tail could not be cut off leaves bytes recovery must trim; an index entry that
        # could not be written or cut leaves an index recovery must rebuild. Either way nothing
        # beyond the recovery point is called durable again, and nothing more is appended,
        # until a restart recovers the log from that point (Kafka takes the log dir offline).
        self._storage_failure: str | None = None
        # Called with the new segment's base offset just before a roll (under the log's
        # lock, before the batch that triggered it is written): the producer state is
        # snapshotted there, as Kafka does, so a restart replays only the active segment.
        self.on_roll: Callable[[int], None] | None = None

    # --- opening ---

    @classmethod
    def open(cls, directory: Path, config: LogConfig, *, clean_shutdown: bool) -> PartitionLog:
        """Open (or create) the log. After an unclean shutdown, every segment at or above
        the recovery point is re-validated and the log cut at the first bad batch."""
        directory.mkdir(parents=True, exist_ok=True)
        for stray in directory.glob("*.tmp"):
            stray.unlink()
        complete_interrupted_swaps(directory)
        bases = sorted(int(p.stem) for p in directory.glob("*.log") if p.stem.isdigit())
        for index in (*directory.glob("*.index"), *directory.glob("*.txnindex")):
            if not index.stem.isdigit() or int(index.stem) not in bases:
                index.unlink()
        file_cache = open_files
        segments = [
            LogSegment(directory, b, config.index_interval_bytes, file_cache) for b in bases
        ]
        # A log without a segment holds nothing to recover, whatever the last shutdown
        # was: a cluster broker creating a 50-partition topic's replicas once spent 100 of
        # its 334 event-loop fsyncs recovering and checkpointing new, empty logs.
        created = not segments
        if created:
            segments = [LogSegment(directory, 0, config.index_interval_bytes, file_cache)]
            fsync_directory(directory)
        checkpoint = read_checkpoint(directory / RECOVERY_POINT_FILE)
        # What a start would take as the recovery point: the file's, else the log start.
        recovery_point = checkpoint if checkpoint is not None else segments[0].base_offset
        checkpointed = recovery_point
        if clean_shutdown or created:
            for segment in segments:
                segment.load()
            report = RecoveryReport()
            recovery_point = min(recovery_point, segments[-1].next_offset)
        else:
            segments, report = _recover(directory, segments, recovery_point)
            recovery_point = segments[-1].next_offset
        log_start = read_checkpoint(directory / LOG_START_FILE)
        opened = cls(directory, config, segments, recovery_point, report, file_cache, log_start)
        opened._checkpointed = checkpointed
        if not (clean_shutdown or created):
            opened._checkpointed = None  # written after every recovery, indexes first
            opened.write_recovery_checkpoint()
        else:  # an index a load rebuilt (missing, or failing its checks) is trusted later
            with opened._checkpoint_lock:
                opened._sync_indexes()
        return opened

    # --- offsets ---

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def closed(self) -> bool:
        """Closed at shutdown or deleted with its topic: nothing more can be written."""
        return not self._segments

    @property
    def failed(self) -> bool:
        """An fsync of this log failed, a torn write could not be cut off, or an index
        write or cut failed: it takes no append and reports nothing more durable until the
        broker restarts and recovers it (see ``__init__``)."""
        return self._storage_failure is not None

    def take_offline(self, cause: str) -> None:
        """Take the log offline (see ``failed``) for a failure its owner saw: a coordinator
        whose append failed cannot tell what the write left (broker/coordinator_runtime.py),
        so its log goes offline as after a failed fsync. No-op if it already is."""
        with self._lock:
            if self._storage_failure is None:
                self._storage_failure = cause

    def _offline_reason(self) -> str:
        return f"{self._storage_failure}; the log is offline until the broker restarts"

    # --- writing ---

    def append(
        self,
        batch: bytes | bytearray | memoryview,
        header: BatchHeader,
        now_ms: int,
        *,
        log_append_time: bool = False,
        leader_epoch: int = 0,
    ) -> AppendResult:
        """Assign offsets to one validated batch and write it (no fsync, no decoding)."""
        if self._storage_failure is not None:
            raise KafkaError(ErrorCode.kafka_storage_error, self._offline_reason())
        size = header.batch_length + LOG_OVERHEAD
        if size > self.config.max_message_bytes:
            raise KafkaError(
                ErrorCode.message_too_large,
                f"batch of {size} bytes exceeds max.message.bytes {self.config.max_message_bytes}",
            )
        max_timestamp = header.max_timestamp if not log_append_time else now_ms
        with self._lock:
            base = self._segments[-1].next_offset  # the log end offset
            last = base + header.last_offset_delta
            active = self._segment_for_locked(size, base, last, now_ms)
            data = assign_offsets(batch, base, leader_epoch, now_ms if log_append_time else None)
            try:
                position = active.append(data, base, last, max_timestamp, now_ms)
            except OSError as exc:
                if active.torn is not None:  # the segment could not cut the write off
                    self._storage_failure = f"a write to {active.path.name} was torn: {exc}"
                raise
        return AppendResult(
            base,
            last,
            now_ms if log_append_time else -1,
            position,
            active.base_offset,
        )

    def append_replicated(
        self, batch: bytes | bytearray | memoryview, header: BatchHeader, now_ms: int
    ) -> None:
        """Append a batch exactly as the leader stored it (offsets, leader epoch and CRC
        included): a follower's copy must be byte-for-byte the leader's. Its base offset is
        the log end offset (the fetcher asked from there), or past it where the leader's
        log cleaner removed the batches in between (offsets keep their gaps, as Kafka's
        follower append allows); never before it."""
        with self._lock:
            if self._storage_failure is not None:
                raise KafkaError(ErrorCode.kafka_storage_error, self._offline_reason())
            if header.base_offset < self.log_end_offset:
                raise KafkaError(
                    ErrorCode.unknown_server_error,
                    f"replicated batch at offset {header.base_offset} is below the log end "
                    f"offset {self.log_end_offset}",
                )
            active = self._segment_for_locked(
                header.size, header.base_offset, header.last_offset, now_ms
            )
            try:
                active.append(
                    batch if isinstance(batch, bytes) else bytes(batch),
                    header.base_offset,
                    header.last_offset,
                    header.max_timestamp,
                    now_ms,
                )
            except OSError as exc:
                if active.torn is not None:  # as ``append``: offline until a restart
                    self._storage_failure = f"a write to {active.path.name} was torn: {exc}"
                raise

    def _segment_for_locked(self, size: int, base: int, last: int, now_ms: int) -> LogSegment:
        """The segment a batch of ``size`` bytes at offsets ``base``..``last`` goes into,
        rolling a new one when the active one is full, old, or cannot index offsets that
        far. Never past a torn segment: the batches after it would be lost when recovery
        stops at the tear."""
        active = self._segments[-1]
        if active.torn is not None:
            raise OSError(active.torn.errno, f"{active.path.name} has a torn tail: {active.torn}")
        if active.size and (
            active.size + size > self.config.segment_bytes
            or self._aged(active, now_ms)
            or last - active.base_offset > MAX_RELATIVE_OFFSET
        ):
            active = self._roll_locked()
        return active

    def maybe_roll(self, now_ms: int) -> None:
        """Time-based roll for a periodic task (a quiet partition rolls without appends)."""
        with self._lock:
            active = self._segments[-1]
            failed = self._storage_failure is not None  # a torn segment fails its log too
            if not failed and active.size and self._aged(active, now_ms):
                self._roll_locked()

    def _aged(self, segment: LogSegment, now_ms: int) -> bool:
        """segment.ms elapsed since its first batch arrived (after a restart: since that
        batch's max timestamp, as Kafka does)."""
        first = segment.first_batch_ms
        return first is not None and now_ms - first >= self.config.roll_ms

    def _roll_locked(self, base_offset: int | None = None) -> LogSegment:
        base = self.log_end_offset if base_offset is None else base_offset
        if self.on_roll is not None:
            self.on_roll(base)
        segment = LogSegment(
            self.directory, base, self.config.index_interval_bytes, self.file_cache
        )
        self._segments.append(segment)
        self._bases.append(base)
        self._dir_dirty = True
        return segment

    def flush(self) -> int:
        """fsync the data of every dirty segment; returns the new recovery point (every
        record below it is durable). Thread-safe. A flush whose fsync overlapped a
        truncation (``truncate_to``, ``start_over_at``) leaves the recovery point where the
        cut put it: what was appended after the cut waits for the next flush. The offset
        indexes are not fsynced here (see the module docstring): one file per fsync, not
        two, for the small appends that add an index entry nearly every time; except
        while the file cache is crowded (storage/file_cache.py), where a written index
        would be fsynced by the cache when it closes it, under its lock, maybe on the loop.
        Not while anyone else holds ``_checkpoint_lock`` (a checkpoint fsyncs them
        itself; otherwise they wait for the next flush or checkpoint).
        """
        with self._flush_lock:
            # A crowded file cache: fsync the indexes too, if no one holds
            # ``_checkpoint_lock`` (see the docstring). Claimed under it, held until the
            # fsync is done, so a checkpoint never follows an index claimed here but not
            # yet fsynced.
            with_indexes = self.file_cache.crowded and self._checkpoint_lock.acquire(blocking=False)
            try:
                return self._flush(with_indexes)
            finally:
                if with_indexes:
                    self._checkpoint_lock.release()

    def _flush(self, with_indexes: bool) -> int:
        with self._lock:
            claim = self._claim_locked(with_indexes=with_indexes)
        if claim is None:
            return self._recovery_point  # closed or deleted meanwhile: nothing to sync
        error: BaseException | None = None
        try:
            fsync_together(claim.fds)
            if claim.dir_dirty:
                fsync_directory(self.directory)
        except BaseException as exc:
            error = exc
        recovery_point = self._end_claim(claim, error)
        if error is not None:
            raise error
        return recovery_point

    def begin_flush(self) -> FlushClaim | None:
        """The first half of :meth:`flush`, for a caller that fsyncs on threads of its
        own without the GIL (the group-commit flusher): claims what is dirty and pins it
        open; the caller fsyncs ``claim.fds`` and ``claim.dir_fd``, then calls
        :meth:`end_flush` with the outcome. None when the log is closed. Raises OSError as
        :meth:`flush` does. Never claims the offset index (no ``_checkpoint_lock``: held
        until :meth:`end_flush` on the loop, a ``close`` on the loop would wait for ever);
        a crowded file cache flushes through :meth:`flush`."""
        with self._lock:
            claim = self._claim_locked(with_indexes=False)
        if claim is not None and claim.dir_dirty:
            try:
                claim.dir_fd = os.open(self.directory, os.O_RDONLY | os.O_CLOEXEC)
            except OSError as exc:
                self._end_claim(claim, exc)
                raise
        return claim

    def end_flush(self, claim: FlushClaim, error: BaseException | None) -> int:
        """The second half (see :meth:`begin_flush`): the fsyncs of ``claim`` ended, with
        ``error`` if one failed. Returns the recovery point."""
        if claim.dir_fd is not None:
            try:
                os.close(claim.dir_fd)
            except OSError as exc:  # the claim still ends (left running, no later flush
                error = error or exc  # would raise the recovery point)
            claim.dir_fd = None
        return self._end_claim(claim, error)

    def _claim_locked(self, *, with_indexes: bool) -> FlushClaim | None:
        """Under ``_lock``: what a flush starting now must fsync so that every record below
        the log end is durable when it ends. That includes what flushes still fsyncing
        have claimed (pinned again here): a segment they claimed looks clean, and this
        flush may end before theirs."""
        if not self._segments:
            return None
        if self._storage_failure is not None:
            raise OSError(errno.EIO, self._offline_reason())
        dirty = [s for s in self._segments if s.dirty]
        files = [f for s in dirty for f in s.claim_unsynced_files(with_index=with_indexes)]
        for running in self._claims:  # a deleted segment's file (retired) needs no fsync
            files.extend(f for f in running.files if f not in files and not f.retired)
        try:
            fds = self.file_cache.pin_for_sync(files)  # kept open until their fsync is done
        except OSError as exc:  # a reopen failed, or an eviction's fsync had failed
            for s in dirty:
                s.unclaim()  # else the next flush would call their data durable
            if _earlier_fsync_failed(files):
                self._storage_failure = f"an fsync of {self.directory.name} failed: {exc}"
            raise
        dir_dirty = self._dir_dirty or any(c.dir_dirty for c in self._claims)
        claim = FlushClaim(
            self.log_end_offset, self._cuts, dirty, files, fds, self._dir_dirty, dir_dirty
        )
        self._dir_dirty = False
        self._claims.append(claim)
        return claim

    def _end_claim(self, claim: FlushClaim, error: BaseException | None) -> int:
        """A claim's fsyncs ended: unpin its files; on success raise the recovery point to
        its target, unless a truncation overlapped it (what was appended after the cut
        waits for the next flush), the log failed meanwhile (after a failed fsync a later
        one may succeed without the pages the kernel dropped), or another flush is still
        running: two fsyncs of one open file share its writeback error, which only the
        first to look at it reports, so this one's success proves nothing until the
        other's outcome is known (it raises the point to its own target when it ends
        alone; a waiter above that waits for the next flush). On failure mark its segments
        to be synced again."""
        try:
            with self._lock:
                self._claims.remove(claim)
                if error is not None:
                    for s in claim.dirty:
                        s.unclaim()
                    self._dir_dirty |= claim.took_dir_dirty
                    if isinstance(error, OSError) and self._storage_failure is None:
                        self._storage_failure = f"an fsync of {self.directory.name} failed: {error}"
                elif (
                    self._cuts == claim.cuts and self._storage_failure is None and not self._claims
                ):
                    self._recovery_point = max(self._recovery_point, claim.target)
                recovery_point = self._recovery_point
            if error is not None:
                self.file_cache.sync_failed(claim.files)
        finally:
            for file in claim.files:
                self.file_cache.unpin(file)
        return recovery_point

    def write_recovery_checkpoint(self) -> None:
        """Persist the recovery point (periodically and at close) to shorten recovery;
        nothing to do when the file already holds it (an idle partition costs no fsync).
        Thread-safe; does nothing once the log is closed or deleted (close wrote the last
        one)."""
        with self._checkpoint_lock:
            if self._segments:
                self._write_checkpoint_if_moved()

    def _write_checkpoint_if_moved(self) -> None:
        """Under ``_checkpoint_lock``: the offset indexes first, then the checkpoint.

        Recovery trusts every index entry below the checkpointed recovery point, so those
        entries must be on disk before the checkpoint is: each was written before the
        flush that raised the recovery point read here, so the index fsync that follows
        covers it. A failed log writes none: its indexes may hold what its failure left
        (an index fsync that failed, an entry that could not be cut), and the next start
        recovers from the last checkpoint written while it was healthy."""
        recovery_point = self._recovery_point
        if recovery_point == self._checkpointed or self._storage_failure is not None:
            return
        self._sync_indexes()
        write_checkpoint(self.directory / RECOVERY_POINT_FILE, recovery_point)
        self._checkpointed = recovery_point

    def _sync_indexes(self) -> None:
        """fsync every offset index written since its last fsync. Under
        ``_checkpoint_lock``, so a checkpoint never follows an index another caller has
        claimed and is still fsyncing. A failed fsync takes the log offline, as a failed
        data fsync does: the kernel may have dropped the index's pages (see ``__init__``);
        any failure leaves the indexes to be fsynced again."""
        with self._lock:
            if self._storage_failure is not None:
                raise OSError(errno.EIO, self._offline_reason())
            claimed: list[LogSegment] = []
            files: list[CachedFile] = []
            for segment in self._segments:
                file = segment.claim_unsynced_index()
                if file is not None:
                    claimed.append(segment)
                    files.append(file)
            try:
                fds = self.file_cache.pin_for_sync(files)
            except OSError as exc:  # a reopen failed, or an eviction's fsync had failed
                self._index_sync_failed(claimed, exc, offline=_earlier_fsync_failed(files))
                raise
        if not fds:
            return
        try:
            fsync_together(fds)
        except BaseException as exc:
            with self._lock:
                self._index_sync_failed(claimed, exc, offline=isinstance(exc, OSError))
            self.file_cache.sync_failed(files)
            raise
        finally:
            for file in files:
                self.file_cache.unpin(file)

    def _index_sync_failed(
        self, claimed: list[LogSegment], exc: BaseException, *, offline: bool
    ) -> None:
        """Under ``_lock``: the claimed indexes are unsynced again, and with ``offline``
        (an fsync failed) the log is offline."""
        for segment in claimed:
            segment.unclaim_index()
        if offline and self._storage_failure is None:
            self._storage_failure = f"an fsync of {self.directory.name}'s indexes failed: {exc}"

    # --- reading ---

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> bytes:
        """Stored batches from the one holding ``offset``, bounded by ``max_bytes`` (but at
        least one whole batch if ``min_one_batch``) and by ``max_offset`` (exclusive: the
        high watermark or last stable offset; a batch reaching it is left out)."""
        self._check_offset(offset)
        if offset == self.log_end_offset or (max_offset is not None and offset >= max_offset):
            return b""
        parts: list[bytes] = []
        remaining = max_bytes
        i = bisect_right(self._bases, offset) - 1
        position = self._segments[i].find_position(offset)
        if position is None:  # offset in a gap after the segment's last batch
            i, position = i + 1, 0
        for segment in self._segments[i:]:
            chunk = segment.read(position, remaining, max_offset, min_one_batch and not parts)
            parts.append(chunk)
            remaining -= len(chunk)
            if position + len(chunk) < segment.size or remaining <= 0:
                break
            position = 0
        return b"".join(parts)

    def _check_offset(self, offset: int) -> None:
        if not self.log_start_offset <= offset <= self.log_end_offset:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}]",
            )

    def scan_headers(self, from_offset: int) -> Iterator[tuple[int, BatchHeader]]:
        """``(segment base offset, header)`` of every batch holding ``from_offset`` or
        later, reading headers only (dump-log)."""
        for segment, start in self._segments_from(from_offset):
            for _, header, _ in segment.scan(start):
                if header.last_offset >= from_offset:
                    yield segment.base_offset, header

    def batch_runs(self, from_offset: int) -> Iterator[memoryview]:
        """The stored bytes from the batch holding ``from_offset`` on, as runs of whole
        batches (about a MiB each), for loops that read a few header fields of every
        batch (the producer-state rebuild at start-up)."""
        for segment, start in self._segments_from(from_offset):
            for _, run in segment.batch_runs(start):
                yield run

    def _segments_from(self, offset: int) -> Iterator[tuple[LogSegment, int]]:
        """``(segment, position)``: where the batch holding ``offset`` (or the first after
        it) starts, then every later segment from its start."""
        i = max(bisect_right(self._bases, offset) - 1, 0)
        for segment in self._segments[i:]:
            start = segment.find_position(offset) if segment is self._segments[i] else 0
            if start is not None:
                yield segment, start

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp_ms``, as
        ListOffsets needs; None if there is none.

        The batch is found from headers (its max timestamp); the record inside it by
        decoding that one batch, whatever its codec. A batch that cannot be decoded (one
        stored before produce validated records) answers its (base offset, max
        timestamp).
        """
        for segment in self._segments:
            if segment.max_timestamp()[0] < timestamp_ms:
                continue
            for position, header, _ in segment.scan():
                if header.max_timestamp >= timestamp_ms:
                    return self._record_at_or_after(segment, position, header, timestamp_ms)
        return None

    def max_timestamp(self) -> tuple[int, int]:
        """(timestamp, offset) of the record with the largest timestamp, for ListOffsets
        MAX_TIMESTAMP; (-1, -1) when the log is empty."""
        best: tuple[int, LogSegment] | None = None
        for segment in self._segments:
            ts = segment.max_timestamp()[0]
            if ts >= 0 and (best is None or ts > best[0]):
                best = (ts, segment)
        if best is None:
            return -1, -1
        ts, segment = best
        offset = segment.max_timestamp()[1]
        position = segment.find_position(offset)
        assert position is not None
        header = next(segment.scan(position))[1]
        return self._record_at_or_after(segment, position, header, ts)[::-1]

    @staticmethod
    def _record_at_or_after(
        segment: LogSegment, position: int, header: BatchHeader, timestamp_ms: int
    ) -> tuple[int, int]:
        try:
            records = decode_records(segment.pread(header.size, position))
        except KafkaError as exc:  # stored before produce validated records
            log.warning("cannot decode the batch at offset %d: %s", header.base_offset, exc)
            return header.base_offset, header.max_timestamp
        for record in records:
            if record.timestamp >= timestamp_ms:
                return record.offset, record.timestamp
        return header.base_offset, header.max_timestamp

    # --- retention and truncation ---

    def apply_retention(self, now_ms: int, high_watermark: int | None = None) -> int:
        """Delete whole old segments (never the active one) past retention.ms or beyond
        retention.bytes, oldest first; the log start moves to the first kept segment.
        Only when cleanup.policy has delete: a compacted-only log keeps every segment.
        With a ``high_watermark`` (a replicated log), only segments wholly below it go, as
        in Kafka: nothing a follower may still need to fetch is deleted. A failed log keeps
        every segment until a restart recovers it, as Kafka's offline log directories are out
        of its retention: nothing more is written to (or deleted from) a failing disk."""
        config = self.config
        if not config.delete:
            return 0
        excess = self.size_bytes() - config.retention_bytes if config.retention_bytes >= 0 else 0
        doomed = 0
        for i, segment in enumerate(self._segments[:-1]):
            if high_watermark is not None and self._bases[i + 1] > high_watermark:
                break
            expired = config.retention_ms >= 0 and (
                now_ms - segment.max_timestamp()[0] > config.retention_ms
            )
            if not expired and excess < segment.size:
                break
            excess -= segment.size
            doomed += 1
        return self._delete_first(doomed) if doomed else 0

    def _delete_first(self, count: int) -> int:
        """Delete the first ``count`` segments; how many went (none once the log failed,
        checked again under the lock: an fsync thread may fail it meanwhile)."""
        with self._lock:
            if self._storage_failure is not None:
                return 0
            doomed = self._segments[:count]
            del self._segments[:count]
            del self._bases[:count]
            self._log_start_offset = max(self._log_start_offset, self._bases[0])
            self._recovery_point = max(self._recovery_point, self.log_start_offset)
            self._dir_dirty = True
        for segment in doomed:
            log.info("deleting segment %s", segment.path)
            segment.delete()
        return count

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding ``offset`` or later (whole batches, so the new log
        end may be below ``offset``). Truncating below the log start empties the log and
        restarts it at ``offset``."""
        if offset >= self.log_end_offset:
            return
        with self._lock:
            if offset <= self.log_start_offset:
                self._start_over_locked(offset)
                doomed = []
            else:
                i = bisect_right(self._bases, offset) - 1
                doomed = self._segments[i + 1 :]
                del self._segments[i + 1 :]
                del self._bases[i + 1 :]
                segment = self._segments[i]
                position = segment.find_position(offset)
                if position is not None:
                    new_end = _base_offset_at(segment, position)
                    try:
                        segment.truncate(position, new_end)
                    except OSError as exc:  # its files may keep what was cut (index entries)
                        self._storage_failure = f"cutting {segment.path.name} failed: {exc}"
                        raise
            lowered = self._recovery_point > self.log_end_offset
            self._recovery_point = min(self._recovery_point, self.log_end_offset)
            self._dir_dirty = True
            self._cuts += 1
        for segment in doomed:
            segment.delete()
        if lowered:
            # Persisted at once (as Kafka does after a truncation): a checkpoint above the
            # new end would let recovery trust batches appended after this cut unchecked.
            self.write_recovery_checkpoint()

    def advance_log_start(self, offset: int) -> int:
        """Move the log start offset up to ``offset`` (DeleteRecords), deleting the
        segments wholly below it; returns the new log start. The caller persists it
        (:meth:`write_log_start_checkpoint`) before telling anyone."""
        if not self.log_start_offset <= offset <= self.log_end_offset:
            self._check_offset(offset)
        if offset <= self._log_start_offset:
            return self._log_start_offset
        doomed = bisect_right(self._bases, offset) - 1
        with self._lock:
            self._log_start_offset = offset
        if doomed > 0:
            self._delete_first(doomed)
        return self._log_start_offset

    def write_log_start_checkpoint(self) -> None:
        write_checkpoint(self.directory / LOG_START_FILE, self._log_start_offset)

    # --- compaction (storage/cleaner.py cleans; these plan and swap) ---

    def segment_stats(self, *, with_max_timestamps: bool) -> list[SegmentStats]:
        """Size and timestamps of every segment, the active one last. A segment's max
        timestamp may need a scan of its headers after a restart: asked for only when
        min.compaction.lag.ms needs it (-1 otherwise)."""
        return [
            SegmentStats(
                s.base_offset,
                s.size,
                s.max_timestamp()[0] if with_max_timestamps else -1,
                s.first_batch_ms,
            )
            for s in self._segments
        ]

    def cleaning_sources(self, end_offset: int) -> list[SegmentSource]:
        """The inactive segments below ``end_offset``, each with a duplicated descriptor
        the cleaner thread reads (and closes) on its own."""
        with self._lock:
            chosen = [s for s in self._segments[:-1] if s.base_offset < end_offset]
            return [SegmentSource(s, s.duplicate_descriptor(), s.size) for s in chosen]

    def replace_segments(self, groups: Sequence[CleanedGroup]) -> bool:
        """Swap cleaned segments in for the ones they were cleaned from, if those are all
        still in the log unchanged and the log has not failed; False (nothing changed) if
        not. A failed log is rewritten by nothing but its recovery at the next start: a pass
        may have read pages the kernel dropped after the failed fsync (see ``__init__``).

        Crash-safe in three steps, each made durable before the next (Kafka's
        ``.cleaned``/``.swap``/``.deleted`` renames): cleaned files become ``.swap``;
        the replaced segments become ``.deleted`` and the cleaned indexes take their
        live names; the cleaned log takes its live name, over the first old segment's.
        :func:`complete_interrupted_swaps` finishes whatever a crash interrupted.
        """
        with self._lock:
            positions = [self._position_of(g) for g in groups]
            if self._storage_failure is not None or any(p is None for p in positions):
                return False
            for group in groups:
                group.cleaned.rename(SWAP_SUFFIX)
            fsync_directory(self.directory)
            for group in groups:
                for source in group.replaced[1:]:
                    source.segment.rename(DELETED_SUFFIX)
            fsync_directory(self.directory)
            for group, position in sorted(
                zip(groups, positions, strict=True), key=lambda gp: -(gp[1] or 0)
            ):
                group.cleaned.rename("")
                assert position is not None
                self._segments[position : position + len(group.replaced)] = [group.cleaned]
            self._bases = [s.base_offset for s in self._segments]
            self._dir_dirty = True
        for group in groups:
            group.replaced[0].segment.close()  # its files now hold the cleaned segment
            for source in group.replaced[1:]:
                source.segment.delete()
        return True

    def _position_of(self, group: CleanedGroup) -> int | None:
        """Where the group's old segments sit in the log, if all are there, in order, at
        the size the cleaner read (so neither retention, truncation nor a roll changed
        them) and none is the active segment."""
        first = group.replaced[0].segment
        if first not in self._segments:
            return None
        at = self._segments.index(first)
        here = self._segments[at : at + len(group.replaced)]
        unchanged = len(here) == len(group.replaced) and all(
            s is src.segment and s.size == src.size_bytes
            for s, src in zip(here, group.replaced, strict=True)
        )
        return at if unchanged and at + len(here) < len(self._segments) else None

    def start_over_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at ``offset`` (a follower whose log
        ends before the leader's log start)."""
        with self._lock:
            self._start_over_locked(offset)
            self._recovery_point = offset
            self._dir_dirty = True
            self._cuts += 1
        self.write_recovery_checkpoint()  # see truncate_to

    def _start_over_locked(self, offset: int) -> None:
        for segment in self._segments:
            segment.delete()
        self._segments, self._bases = [], []
        self._roll_locked(offset)
        self._log_start_offset = offset
        (self.directory / LOG_START_FILE).unlink(missing_ok=True)

    # --- aborted transactions ---

    def append_aborted_txn(self, entry: AbortedTxn) -> None:
        """Record an aborted transaction in the segment holding its ABORT marker.

        If the index file cannot be written, the log goes offline: its ABORT marker is
        already in the log and has moved the last stable offset, and a clean stop would
        leave the file without the entry for good, so read_committed consumers would get
        the aborted records after a restart. Offline, the next start recovers the log and
        indexes the marker again (``producers.loader``); until then the entry is in memory
        and reads skip the records (Kafka takes the log directory offline on any I/O error)."""
        with self._lock:
            segment = self._segments[bisect_right(self._bases, entry.last_offset) - 1]
            segment.dirty = True
            try:
                segment.txn_index.append(entry)
            except OSError as exc:
                self._storage_failure = f"a write to {segment.txn_index.path.name} failed: {exc}"
                raise

    def last_aborted_marker_offset(self) -> int:
        """Offset of the newest ABORT marker in the index, -1 if none."""
        for segment in reversed(self._segments):
            if segment.txn_index.entries:
                return segment.txn_index.entries[-1].last_offset
        return -1

    def aborted_txns(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        """Aborted transactions with records in [start_offset, end_offset), oldest first.

        An entry lives in the segment of its marker, which is never before the segment
        holding `start_offset` for a transaction that reaches it, but may be after the
        one holding `end_offset`.
        """
        first = max(bisect_right(self._bases, start_offset) - 1, 0)
        found: list[AbortedTxn] = []
        for segment in self._segments[first:]:
            found.extend(segment.txn_index.overlapping(start_offset, end_offset))
            # Kafka's stop rule: once a transaction ended with the stable offset past
            # `end_offset`, no transaction open before `end_offset` can end later.
            if any(e.last_stable_offset > end_offset for e in segment.txn_index.entries):
                break
        return found

    # --- describing and closing ---

    def segments(self) -> list[SegmentInfo]:
        return [SegmentInfo(s.base_offset, s.size, s.path) for s in self._segments]

    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def close(self) -> None:
        """Flush, fsync the indexes (a clean start loads them), persist the recovery
        point, close every descriptor (idempotent). A failed log is closed without a
        flush or a checkpoint: the next start recovers it from the last checkpoint."""
        if not self._segments:
            return
        if self._storage_failure is None:
            self.flush()
        with self._checkpoint_lock:
            try:
                if self._storage_failure is None:
                    # even if the recovery point did not move: an index cut back since
                    # (a failed append taken back) is loaded as it is at a clean start
                    self._sync_indexes()
                    self._write_checkpoint_if_moved()
            finally:
                self._close_segments()

    def delete(self) -> None:
        """Close without flushing and remove the partition directory (topic deletion)."""
        with self._checkpoint_lock:
            self._close_segments()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _close_segments(self) -> None:
        """Under the log's lock: a flush in another thread is duplicating descriptors."""
        with self._lock:
            for segment in self._segments:
                segment.close()
            self._segments = []


def _earlier_fsync_failed(files: list[CachedFile]) -> bool:
    """Whether ``pin_for_sync`` refused one of ``files`` because the fsync before its
    eviction failed (its pages may be gone: the log goes offline), rather than a reopen."""
    return any(file.error is not None for file in files)


def _base_offset_at(segment: LogSegment, position: int) -> int:
    return next(segment.scan(position))[1].base_offset


def _recover(
    directory: Path, segments: list[LogSegment], recovery_point: int
) -> tuple[list[LogSegment], RecoveryReport]:
    """Recover the segments that may hold unflushed data; drop everything after a cut.

    Logs what it is about to re-read and, for a long recovery, its progress every
    ``RECOVERY_PROGRESS_INTERVAL_S``: a start after a crash can take a while."""
    first = max(bisect_right([s.base_offset for s in segments], recovery_point) - 1, 0)
    for segment in segments[:first]:
        segment.load()
    to_read = sum(s.size for s in segments[first:])
    log.info(
        "%s: recovering %d segment(s) (%d bytes) from offset %d",
        directory.name,
        len(segments) - first,
        to_read,
        segments[first].base_offset,
    )
    started = last_report = time.monotonic()
    done = 0
    batches = truncated = recovered = 0
    for i in range(first, len(segments)):
        result = recover_segment(segments[i], recovery_point if i == first else None)
        recovered += 1
        batches += result.batches
        truncated += result.bytes_truncated
        done += segments[i].size + result.bytes_truncated
        if time.monotonic() - last_report >= RECOVERY_PROGRESS_INTERVAL_S:
            last_report = time.monotonic()
            log.info("%s: recovered %d of %d bytes", directory.name, done, to_read)
        if result.bytes_truncated:
            later = segments[i + 1 :]
            for segment in later:
                truncated += segment.size
                segment.delete()
            del segments[i + 1 :]
            if later:
                fsync_directory(directory)
            report = RecoveryReport(recovered, batches, truncated, len(later))
            log.warning(
                "%s: recovery dropped %d bytes (%d later segments deleted)",
                directory,
                truncated,
                len(later),
            )
            return segments, report
    log.info(
        "%s: recovered %d batches in %.2f s",
        directory.name,
        batches,
        time.monotonic() - started,
    )
    return segments, RecoveryReport(recovered, batches, 0, 0)


SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
_SEGMENT_FILES = (".log", ".index", ".txnindex")


def complete_interrupted_swaps(directory: Path) -> None:
    """Bring a directory a crash left mid-swap (see ``PartitionLog.replace_segments``)
    back to whole segments, before the segments are opened.

    - ``<base>.log.swap``: the swap was committed; the segments it replaces (bases after
      ``base`` and below its next offset: the cleaner keeps each group's last batch, so
      that is exactly the replaced range) are removed, the swap files take live names.
    - a ``.swap`` index without a ``.log.swap``: if its ``.log.cleaned`` is still there
      the pass never committed (removed); if not, the log already took its live name and
      the index follows it.
    - ``.cleaned`` and ``.deleted`` files: an uncommitted pass, replaced segments; removed.
    """
    changed = False
    for swapped_log in sorted(directory.glob(f"*.log{SWAP_SUFFIX}")):
        base = int(swapped_log.name[:20])
        end = _next_offset(swapped_log, base)
        for live in directory.glob("*.log"):
            if live.stem.isdigit() and base < int(live.stem) < end:
                for suffix in _SEGMENT_FILES:
                    (directory / segment_file_name(int(live.stem), suffix)).unlink(missing_ok=True)
        for suffix in (".txnindex", ".index", ".log"):
            pending = directory / segment_file_name(base, suffix + SWAP_SUFFIX)
            if pending.exists():
                pending.rename(directory / segment_file_name(base, suffix))
        log.warning("%s: completed the swap of cleaned segment %d..%d", directory, base, end)
        changed = True
    for index in directory.glob(f"*{SWAP_SUFFIX}"):
        base = int(index.name[:20])
        if (directory / segment_file_name(base, ".log" + CLEANED_SUFFIX)).exists():
            index.unlink()
        else:
            index.rename(index.with_name(index.name.removesuffix(SWAP_SUFFIX)))
        changed = True
    for leftover in (*directory.glob(f"*{CLEANED_SUFFIX}"), *directory.glob(f"*{DELETED_SUFFIX}")):
        leftover.unlink()
        changed = True
    if changed:
        fsync_directory(directory)


def _next_offset(path: Path, base: int) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        end = base
        for _, header, _ in scan_file(fd, os.fstat(fd).st_size):
            end = header.next_offset
        return end
    finally:
        os.close(fd)
