"""One cleaning pass over one partition log: the thin I/O around ``compaction.py``.

Runs in a worker thread, never on the event loop. It reads the log through duplicated
descriptors taken when the pass was planned (so retention or deletion on the event loop
cannot pull a file from under it), builds the key map over the dirty segments, and writes
each group of old segments into one new segment under ``.cleaned`` names, fsynced. It
changes nothing the broker reads: :meth:`PartitionLog.replace_segments` swaps the
cleaned segments in afterwards, on the event loop, if the old ones are still there.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from oncelog.protocol.record_batch import (
    BatchHeader,
    control_marker,
    parse_header,
)
from oncelog.protocol.record_rewrite import (
    RawRecord,
    empty_batch,
    read_raw_records,
    retained_batch,
)
from oncelog.storage.compaction import (
    BatchPlan,
    CleaningRules,
    ControlKind,
    Drop,
    KeepAsIs,
    KeepEmpty,
    KeyMap,
    TransactionTracker,
    group_segments,
    map_batch,
    plan_batch,
)
from oncelog.storage.file_cache import FileCache
from oncelog.storage.segment import LogSegment, scan_file
from oncelog.storage.throttle import Throttler
from oncelog.storage.txn_index import AbortedTxn

__all__ = [
    "CLEANED_SUFFIX",
    "CleanedGroup",
    "CleanerStats",
    "CleaningAborted",
    "CleaningJob",
    "CleaningResult",
    "SegmentSource",
    "clean",
]

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
PROGRESS_EVERY_BATCHES = 1000


class CleaningAborted(Exception):
    """The pass was asked to stop (the log is being deleted, truncated or closed)."""


@dataclass(frozen=True, slots=True)
class SegmentSource:
    """An inactive segment as the pass found it: its own descriptor, and the live
    segment object, which the swap checks is still in the log, at the same size."""

    segment: LogSegment
    fd: int
    size_bytes: int

    @property
    def base_offset(self) -> int:
        return self.segment.base_offset


@dataclass(frozen=True, slots=True)
class CleaningJob:
    """Everything a pass needs, taken on the event loop at one moment."""

    name: str
    directory: Path
    sources: tuple[SegmentSource, ...]  # the inactive segments below first_uncleanable
    first_dirty_offset: int
    first_uncleanable_offset: int
    aborted_in_dirty: tuple[AbortedTxn, ...]
    aborted_in_log: tuple[AbortedTxn, ...]
    rules: CleaningRules
    segment_bytes: int
    index_interval_bytes: int
    file_cache: FileCache  # the log's file cache, which the cleaned segment's files join
    key_map_bytes: int
    # log.cleaner.io.max.bytes.per.second: bytes read and written, both phases together
    io_max_bytes_per_s: float

    def close(self) -> None:
        for source in self.sources:
            os.close(source.fd)


@dataclass(frozen=True, slots=True)
class CleanedGroup:
    """Old segments and the cleaned one (base offset of the first) that replaces them."""

    replaced: tuple[SegmentSource, ...]
    cleaned: LogSegment


@dataclass(slots=True)
class CleanerStats:
    """What a pass did, for its log line and the metrics."""

    map_batches: int = 0
    map_keys: int = 0
    map_utilization: float = 0.0
    bytes_read: int = 0
    bytes_written: int = 0
    batches_read: int = 0
    batches_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    undecodable_batches: int = 0
    started: float = field(default_factory=time.monotonic)
    elapsed_s: float = 0.0


@dataclass(frozen=True, slots=True)
class CleaningResult:
    """A finished pass: the cleaned segment groups (under ``.cleaned`` names, not yet swapped
    in), where the next pass starts and what this one did."""

    groups: tuple[CleanedGroup, ...]
    end_offset: int  # the next pass's first dirty offset
    stats: CleanerStats

    def discard(self) -> None:
        """Remove the cleaned files (the swap did not happen)."""
        for group in self.groups:
            group.cleaned.delete()


Progress = Callable[[int, int], None]  # (bytes done, bytes in the pass)


def clean(
    job: CleaningJob, stop: threading.Event, progress: Progress | None = None
) -> CleaningResult:
    """Build the key map, then write every group's cleaned segment, at no more than the
    job's byte rate. Raises CleaningAborted when ``stop`` is set (a throttled pass notices
    at once); cleaned files written so far are removed."""
    stats = CleanerStats()
    throttler = Throttler(job.io_max_bytes_per_s, stop.wait)
    key_map = _build_key_map(job, stop, throttler, stats)
    end = key_map.latest_offset + 1
    groups = group_segments([s for s in job.sources if s.base_offset < end], job.segment_bytes, end)
    total = sum(s.size_bytes for g in groups for s in g)
    tracker = TransactionTracker(job.aborted_in_log)

    def check(nbytes: int) -> None:
        if stop.is_set() or throttler.done(nbytes):
            raise CleaningAborted()
        if progress is not None and stats.batches_read % PROGRESS_EVERY_BATCHES == 0:
            progress(stats.bytes_read, total)

    done: list[CleanedGroup] = []
    try:
        for group in groups:
            cleaned = _clean_group(job, group, tracker, key_map, check, stats)
            done.append(CleanedGroup(tuple(group), cleaned))
    except BaseException:
        for finished in done:
            finished.cleaned.delete()
        raise
    stats.elapsed_s = time.monotonic() - stats.started
    return CleaningResult(tuple(done), end, stats)


def _build_key_map(
    job: CleaningJob, stop: threading.Event, throttler: Throttler, stats: CleanerStats
) -> KeyMap:
    """The key map over the dirty segments, from the first dirty offset on."""
    key_map = KeyMap(job.key_map_bytes)
    tracker = TransactionTracker(job.aborted_in_dirty)
    start = job.first_dirty_offset
    for source, upper in _with_upper_bounds(job.sources, job.first_uncleanable_offset):
        if upper <= start or source.base_offset >= job.first_uncleanable_offset:
            continue
        for _, header, data in scan_file(source.fd, source.size_bytes, with_data=True):
            if stop.is_set() or throttler.done(header.size):
                raise CleaningAborted()
            assert data is not None
            kind = _control_kind(header, data)
            try:
                mapped = map_batch(header, kind, _lazy_records(data), tracker, key_map, start)
            except _UNREADABLE as exc:
                _note_unreadable(job, header, exc, stats)
                mapped = True
                key_map.cover_to(header.last_offset)
            if not mapped:
                log.info(
                    "%s: key map full at offset %d; this pass cleans up to there",
                    job.name,
                    header.base_offset,
                )
                break
            stats.map_batches += 1
        else:
            key_map.cover_to(upper - 1)  # a gap at the segment's end is mapped too
            continue
        break
    stats.map_keys, stats.map_utilization = len(key_map), key_map.utilization
    return key_map


def _with_upper_bounds(
    sources: Sequence[SegmentSource], last_upper: int
) -> list[tuple[SegmentSource, int]]:
    """Each source with the first offset after it (the next one's base)."""
    uppers = [s.base_offset for s in sources[1:]] + [last_upper]
    return list(zip(sources, uppers, strict=True))


def _clean_group(
    job: CleaningJob,
    group: Sequence[SegmentSource],
    tracker: TransactionTracker,
    key_map: KeyMap,
    check: Callable[[int], None],
    stats: CleanerStats,
) -> LogSegment:
    """Write one group's cleaned segment (``.cleaned`` names), fsynced."""
    base = group[0].base_offset
    for suffix in (".log", ".index", ".txnindex"):
        (job.directory / f"{base:020d}{suffix}{CLEANED_SUFFIX}").unlink(missing_ok=True)
    cleaned = LogSegment(
        job.directory, base, job.index_interval_bytes, job.file_cache, CLEANED_SUFFIX
    )
    try:
        cleaned.txn_index.path.touch()  # always one: the swap replaces the old one with it
        batches = (
            (header, data)
            for source in group
            for _, header, data in scan_file(source.fd, source.size_bytes, with_data=True)
        )
        for (header, data), last in _flag_last(batches):
            assert data is not None
            written = _copy_batch(job, cleaned, header, data, tracker, key_map, last, stats)
            check(header.size + written)
        cleaned.fsync()
    except BaseException:
        cleaned.delete()
        raise
    return cleaned


T = TypeVar("T")


def _flag_last(items: Iterable[T]) -> Iterator[tuple[T, bool]]:
    """Each item with whether it is the last one."""
    iterator = iter(items)
    try:
        current = next(iterator)
    except StopIteration:
        return
    for following in iterator:
        yield current, False
        current = following
    yield current, True


def _copy_batch(
    job: CleaningJob,
    cleaned: LogSegment,
    header: BatchHeader,
    data: memoryview,
    tracker: TransactionTracker,
    key_map: KeyMap,
    last_of_group: bool,
    stats: CleanerStats,
) -> int:
    """Decide one batch and write what it becomes into ``cleaned``; the bytes written."""
    stats.batches_read += 1
    stats.bytes_read += header.size
    stats.records_read += header.record_count
    records = _lazy_records(data)
    plan: BatchPlan
    try:
        plan, entry = plan_batch(
            header,
            _control_kind(header, data),
            records,
            tracker,
            key_map,
            job.rules,
            last_of_group=last_of_group,
        )
    except _UNREADABLE as exc:
        _note_unreadable(job, header, exc, stats)
        plan, entry = KeepAsIs(), None
    if entry is not None:
        cleaned.txn_index.append(entry)
    if isinstance(plan, Drop):
        return 0
    out: bytes | memoryview
    if isinstance(plan, KeepAsIs):
        out = data
        stats.records_kept += header.record_count
    elif isinstance(plan, KeepEmpty):
        out = empty_batch(header)
    else:
        kept = [records()[i] for i in plan.kept]
        out = retained_batch(header, kept, delete_horizon_ms=plan.delete_horizon_ms)
        stats.records_kept += len(kept)
    written = parse_header(out)
    cleaned.append(
        out,
        written.base_offset,
        written.last_offset,
        written.max_timestamp,
        now_ms=written.max_timestamp,  # its segment rolls by its batches' own time, as before
    )
    stats.batches_written += 1
    stats.bytes_written += len(out)
    return len(out)


# A stored batch whose records (or compressed payload) do not parse although its CRC
# holds (written before produce validated records): kept whole, never guessed at.
_UNREADABLE = (ValueError,)


def _note_unreadable(
    job: CleaningJob, header: BatchHeader, exc: Exception, stats: CleanerStats
) -> None:
    stats.undecodable_batches += 1
    log.warning(
        "%s: batch at offset %d kept as it is, its records cannot be read: %s",
        job.name,
        header.base_offset,
        exc,
    )


def _lazy_records(data: memoryview) -> Callable[[], list[RawRecord]]:
    """The batch's records, decoded on the first call only (most batches of a pass
    that are aborted or control batches never are)."""
    return functools.cache(lambda: read_raw_records(data))


def _control_kind(header: BatchHeader, data: memoryview) -> ControlKind | None:
    if not header.is_control:
        return None
    if header.record_count == 0:
        return ControlKind.EMPTY
    marker = control_marker(data)
    if marker is None:
        return ControlKind.OTHER
    return ControlKind.COMMIT if marker[0] else ControlKind.ABORT
