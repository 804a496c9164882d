"""Log compaction decisions: which records, batches and markers a cleaning pass keeps.

Pure (no I/O, no clock): the cleaner in ``storage/cleaner.py`` reads batches and feeds
them here one by one, in log order, and writes what the answers say. The rules are
Kafka 4.x's log cleaner (``LogCleaner.Cleaner``, ``CleanedTransactionMetadata``,
``LogCleanerManager.cleanableOffsets``, ``MemoryRecords.filterTo``), restated:

Which part of the log is cleaned
    Whole segments from the log start up to the *first uncleanable offset*: the base of
    the segment holding the smallest of the last stable offset, the active segment's base
    and (with ``min.compaction.lag.ms``) the first segment holding a record younger than
    the lag. Nothing at or past the LSO, nothing in the active segment. The *dirty* part
    starts at the cleaner checkpoint (where the last pass stopped); its share of the bytes
    is the dirty ratio, which must exceed ``min.cleanable.dirty.ratio`` unless a dirty
    segment is older than ``max.compaction.lag.ms``.

The key map
    Built over the dirty part only: each key's last offset, from committed or
    non-transactional records. Records of aborted transactions never enter it (an aborted
    value must not hide the committed one before it), control batches never enter it.

Which records survive
    A record past the map's last offset survives (it was not compared). Otherwise it
    survives iff it has a key, is not aborted, holds the map's offset for its key (or its
    key is not in the map: the clean part was already compacted), and is not a tombstone
    whose batch's delete horizon has passed. A tombstone that survives gets a delete
    horizon (now + ``delete.retention.ms``) written into its batch (KIP-534: the batch's
    base timestamp, flagged by attribute bit 0x40); a later pass after that time drops it.

Which batches survive
    A batch whose records all go is dropped, except: the batch holding a live producer's
    last data offset (or, for a producer whose last entry is a marker, its marker of that
    epoch) is kept empty, so its epoch and last sequence survive and a retry still
    deduplicates; and the last batch of each cleaned group is kept empty, so the cleaned
    segment still ends at the same offset (recovery of an interrupted swap relies on it).
    A kept batch keeps its base offset and last offset delta, so offsets keep their gaps.

Which markers survive
    A marker is never dropped while any data batch of its transaction remains: an ABORT
    marker then also keeps its entry in the cleaned transaction index, so read_committed
    consumers still skip the aborted data. Once no data batch remains, the marker gets a
    delete horizon on the next pass and goes on the first pass after it, unless it is its
    producer's last entry.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from oncelog.protocol.record_batch import ATTR_DELETE_HORIZON, BatchHeader
from oncelog.storage.txn_index import AbortedTxn

__all__ = [
    "KEY_MAP_ENTRY_OVERHEAD",
    "BatchPlan",
    "CleanableRange",
    "CleaningRules",
    "ControlKind",
    "Drop",
    "KeepAsIs",
    "KeepEmpty",
    "KeyMap",
    "KeyedRecord",
    "ProducerLastEntry",
    "Rewrite",
    "SegmentStats",
    "TransactionTracker",
    "cleanable_range",
    "delete_horizon_ms",
    "group_segments",
    "map_batch",
    "plan_batch",
]


class KeyedRecord(Protocol):
    """What the rules read of a record (``record_batch.DecodedRecord`` is one)."""

    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...


class ControlKind(enum.Enum):
    """The control record of a control batch."""

    COMMIT = "commit"
    ABORT = "abort"
    EMPTY = "empty"  # a marker an earlier pass emptied
    OTHER = "other"  # a control type this broker does not write (kept)


def delete_horizon_ms(header: BatchHeader) -> int | None:
    """The batch's KIP-534 delete horizon, if a cleaner set one."""
    return header.base_timestamp if header.attributes & ATTR_DELETE_HORIZON else None


# --- transactions seen while scanning (Kafka's CleanedTransactionMetadata) -------------


@dataclass(slots=True)
class _AbortedInProgress:
    txn: AbortedTxn
    data_seen: bool = False


class TransactionTracker:
    """Follows transactions through a scan of the log in offset order.

    It is told the aborted transactions overlapping the scanned range (from the
    transaction indexes) and every batch in order; it answers whether a data batch belongs
    to an aborted transaction and whether a marker may go. One tracker per scan: the key
    map build and each cleaning pass have their own.
    """

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._upcoming = [(t.first_offset, t.last_offset, t.producer_id, t) for t in aborted]
        heapq.heapify(self._upcoming)
        self._aborting: dict[int, _AbortedInProgress] = {}
        self._committing: set[int] = set()  # producers with data seen since their last marker

    def _start_aborted_up_to(self, offset: int) -> None:
        while self._upcoming and self._upcoming[0][0] <= offset:
            txn = heapq.heappop(self._upcoming)[3]
            self._aborting.setdefault(txn.producer_id, _AbortedInProgress(txn))

    def data_batch(self, header: BatchHeader) -> bool:
        """Note a data batch; True if it belongs to an aborted transaction."""
        self._start_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        aborting = self._aborting.get(header.producer_id)
        if aborting is not None:
            aborting.data_seen = True
            return True
        self._committing.add(header.producer_id)
        return False

    def marker(self, header: BatchHeader, kind: ControlKind) -> tuple[bool, AbortedTxn | None]:
        """Note a control batch: (may it go, the index entry to keep for it).

        A marker may go once no data batch of its transaction was seen in this scan; an
        ABORT marker whose data is still there keeps its aborted-transaction entry.
        """
        self._start_aborted_up_to(header.last_offset)
        pid = header.producer_id
        if kind is ControlKind.ABORT:
            aborting = self._aborting.pop(pid, None)
            if aborting is not None and aborting.data_seen:
                return False, aborting.txn
            return True, None
        if kind is ControlKind.COMMIT:
            had_data = pid in self._committing
            self._committing.discard(pid)
            return not had_data, None
        return kind is ControlKind.EMPTY, None


# --- the key map --------------------------------------------------------------------------

# Rough bytes a dict entry of a bytes key and an int offset costs in CPython (entry, key
# object header, int object): bounds the map by `log.cleaner.dedupe.buffer.size`.
KEY_MAP_ENTRY_OVERHEAD = 100


class KeyMap:
    """Each key's last offset in the dirty part of the log (Kafka's OffsetMap, exact:
    keys themselves, not hashes, so two keys never collide).

    ``latest_offset`` is the last offset the map covers: records after it were not
    compared and are kept as they are.
    """

    def __init__(self, max_bytes: int) -> None:
        self._offsets: dict[bytes, int] = {}
        self._max_bytes = max_bytes
        self._bytes = 0
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._offsets)

    def get(self, key: bytes) -> int | None:
        return self._offsets.get(key)

    def fits(self, keys: Sequence[bytes]) -> bool:
        """Whether ``keys`` fit in the budget; an empty map takes any one batch, so
        cleaning always makes progress."""
        if not self._offsets:
            return True
        extra = sum(len(k) + KEY_MAP_ENTRY_OVERHEAD for k in keys if k not in self._offsets)
        return self._bytes + extra <= self._max_bytes

    def put(self, key: bytes, offset: int) -> None:
        if key not in self._offsets:
            self._bytes += len(key) + KEY_MAP_ENTRY_OVERHEAD
        self._offsets[key] = offset

    def cover_to(self, offset: int) -> None:
        """Everything up to ``offset`` was mapped (a gap, or a batch with no keys)."""
        self.latest_offset = max(self.latest_offset, offset)

    @property
    def utilization(self) -> float:
        return self._bytes / self._max_bytes if self._max_bytes else 1.0


def map_batch(
    header: BatchHeader,
    kind: ControlKind | None,
    records: Callable[[], Sequence[KeyedRecord]],
    tracker: TransactionTracker,
    key_map: KeyMap,
    start_offset: int,
) -> bool:
    """Add one batch of the dirty part to the map; False if the map is full (the batch
    is then not mapped, and mapping stops before it).

    ``kind`` is the control record of a control batch, None for a data batch.
    ``records`` is called only for data batches that are not aborted: the others are
    never decoded.
    """
    if kind is not None:
        tracker.marker(header, kind)
    elif not tracker.data_batch(header):
        keyed = [r for r in records() if r.key is not None and r.offset >= start_offset]
        if not key_map.fits([r.key for r in keyed if r.key is not None]):
            return False
        for record in keyed:
            assert record.key is not None
            key_map.put(record.key, record.offset)
    if header.last_offset >= start_offset:
        key_map.cover_to(header.last_offset)
    return True


# --- what a cleaning pass keeps ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProducerLastEntry:
    """A live producer's last entry in the producer state: the batch holding
    ``last_data_offset`` is kept; with no data offset (the entry's last write was a marker
    of a new epoch), its markers of ``producer_epoch`` are."""

    last_data_offset: int | None
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class CleaningRules:
    """What a pass decides by, beside the key map and the tracker."""

    now_ms: int
    delete_retention_ms: int
    producers: Mapping[int, ProducerLastEntry]


@dataclass(frozen=True, slots=True)
class Drop:
    """Leave the batch out."""


@dataclass(frozen=True, slots=True)
class KeepAsIs:
    """Copy the batch's bytes unchanged."""


@dataclass(frozen=True, slots=True)
class KeepEmpty:
    """Keep only the batch's header, with no records (Kafka's ``writeEmptyHeader``)."""


@dataclass(frozen=True, slots=True)
class Rewrite:
    """Re-encode the batch with the records at ``kept`` (indices, in order), in the same
    codec, with its offsets and sequences; ``delete_horizon_ms`` set means: write that
    horizon into the batch (the batch had none)."""

    kept: tuple[int, ...]
    delete_horizon_ms: int | None


BatchPlan = Drop | KeepAsIs | KeepEmpty | Rewrite


def _is_producers_last(header: BatchHeader, producers: Mapping[int, ProducerLastEntry]) -> bool:
    entry = producers.get(header.producer_id) if header.has_producer_id else None
    if entry is None:
        return False
    if entry.last_data_offset is not None:
        return header.last_offset == entry.last_data_offset
    return header.is_control and header.producer_epoch == entry.producer_epoch


def plan_batch(
    header: BatchHeader,
    kind: ControlKind | None,
    records: Callable[[], Sequence[KeyedRecord]],
    tracker: TransactionTracker,
    key_map: KeyMap,
    rules: CleaningRules,
    *,
    last_of_group: bool,
) -> tuple[BatchPlan, AbortedTxn | None]:
    """Decide one batch of a cleaning pass: the plan and, for an ABORT marker whose data
    remains, the entry the cleaned transaction index must hold.

    ``kind`` is the control record of a control batch, None for a data batch.
    ``records`` is called only for data batches that are not aborted.
    """
    horizon = delete_horizon_ms(header)
    must_keep = last_of_group or _is_producers_last(header, rules.producers)
    emptied = KeepEmpty() if must_keep else Drop()
    if kind is not None:
        discardable, index_entry = tracker.marker(header, kind)
        if header.record_count == 0 or (
            discardable and horizon is not None and horizon <= rules.now_ms
        ):
            return emptied, index_entry
        if discardable and horizon is None:
            new_horizon = rules.now_ms + rules.delete_retention_ms
            return Rewrite(tuple(range(header.record_count)), new_horizon), index_entry
        return KeepAsIs(), index_entry
    if tracker.data_batch(header):
        return emptied, None
    batch = records()
    kept = tuple(i for i, r in enumerate(batch) if _keeps_record(r, horizon, key_map, rules))
    if not kept:
        return emptied, None
    needs_horizon = horizon is None and any(batch[i].value is None for i in kept)
    if len(kept) == len(batch) and not needs_horizon:
        return KeepAsIs(), None
    horizon_ms = rules.now_ms + rules.delete_retention_ms if needs_horizon else None
    return Rewrite(kept, horizon_ms), None


def _keeps_record(
    record: KeyedRecord, horizon: int | None, key_map: KeyMap, rules: CleaningRules
) -> bool:
    if record.offset > key_map.latest_offset:
        return True
    if record.key is None:
        return False  # written before the topic was compacted: Kafka drops these too
    latest = key_map.get(record.key)
    if latest is not None and record.offset < latest:
        return False
    return record.value is not None or horizon is None or rules.now_ms < horizon


# --- which part of the log to clean (Kafka's LogCleanerManager) --------------------------


@dataclass(frozen=True, slots=True)
class SegmentStats:
    """What the cleaner's scheduling reads of a segment (the last one is the active)."""

    base_offset: int
    size_bytes: int
    max_timestamp: int  # -1 when empty
    first_batch_timestamp: int | None


@dataclass(frozen=True, slots=True)
class CleanableRange:
    """The part of a log a pass may clean (whole segments below the first uncleanable offset)
    and how dirty it is."""

    first_dirty_offset: int
    first_uncleanable_offset: int  # a segment base: cleaning covers whole segments
    clean_bytes: int
    cleanable_bytes: int
    checkpoint_was_reset: bool
    overdue_ms: int  # how far past max.compaction.lag.ms the oldest dirty segment is

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0

    def should_clean(self, min_dirty_ratio: float) -> bool:
        """Kafka's rule: overdue with something to clean, or dirtier than the minimum."""
        if self.cleanable_bytes <= 0:
            return False
        return self.overdue_ms > 0 or self.dirty_ratio > min_dirty_ratio


def cleanable_range(
    segments: Sequence[SegmentStats],
    *,
    log_start_offset: int,
    log_end_offset: int,
    last_stable_offset: int,
    checkpoint: int | None,
    now_ms: int,
    min_compaction_lag_ms: int,
    max_compaction_lag_ms: int,
) -> CleanableRange:
    """The dirty range a pass may clean now, and the bytes on either side of it.

    ``segments`` are the log's, oldest first; the last one is the active segment.
    """
    first_dirty = log_start_offset if checkpoint is None else checkpoint
    reset = checkpoint is not None and not log_start_offset <= checkpoint <= log_end_offset
    if reset:
        first_dirty = log_start_offset
    dirty_inactive = _non_active_from(segments, first_dirty)
    limits = [last_stable_offset, segments[-1].base_offset]
    if min_compaction_lag_ms > 0:
        young = [s for s in dirty_inactive if s.max_timestamp > now_ms - min_compaction_lag_ms]
        if young:
            limits.append(young[0].base_offset)
    uncleanable = max(first_dirty, min(limits))
    holding = _non_active_from(segments, uncleanable)
    first_uncleanable = holding[0].base_offset if holding else segments[-1].base_offset
    low = min(first_dirty, first_uncleanable)
    return CleanableRange(
        first_dirty_offset=first_dirty,
        first_uncleanable_offset=first_uncleanable,
        clean_bytes=_bytes_in(segments, log_start_offset, first_dirty),
        cleanable_bytes=_bytes_in(segments, low, first_uncleanable),
        checkpoint_was_reset=reset,
        overdue_ms=_overdue_ms(dirty_inactive, now_ms, max_compaction_lag_ms),
    )


def _non_active_from(segments: Sequence[SegmentStats], offset: int) -> list[SegmentStats]:
    """The inactive segments from the one holding ``offset`` on (Kafka's
    ``nonActiveLogSegmentsFrom``): empty when ``offset`` lies in the active segment."""
    holding = 0
    for i, segment in enumerate(segments):
        if segment.base_offset <= offset:
            holding = i
    return list(segments[holding:-1])


def _bytes_in(segments: Sequence[SegmentStats], low: int, high: int) -> int:
    """Bytes of the segments holding offsets in [low, high)."""
    total = 0
    for i, segment in enumerate(segments):
        end = segments[i + 1].base_offset if i + 1 < len(segments) else _NO_END
        if segment.base_offset < high and end > low:
            total += segment.size_bytes
    return total


def _overdue_ms(dirty: Sequence[SegmentStats], now_ms: int, max_lag_ms: int) -> int:
    firsts = [t for s in dirty if (t := s.first_batch_timestamp) is not None and t > 0]
    if not firsts:
        return 0
    clean_until = now_ms - max(max_lag_ms, 0)
    earliest = min(firsts)
    return clean_until - earliest if earliest < clean_until else 0


class _Sized(Protocol):
    @property
    def base_offset(self) -> int: ...
    @property
    def size_bytes(self) -> int: ...


S = TypeVar("S", bound=_Sized)


def group_segments(segments: Sequence[S], max_bytes: int, end_offset: int) -> list[list[S]]:
    """Consecutive segments below ``end_offset`` grouped so each group's bytes stay within
    ``max_bytes`` (segment.bytes) and its offsets within a segment's 32-bit relative range:
    each group becomes one cleaned segment, so small cleaned segments merge over time."""
    chosen = [s for s in segments if s.base_offset < end_offset]
    groups: list[list[S]] = []
    for i, segment in enumerate(chosen):
        upper = chosen[i + 1].base_offset - 1 if i + 1 < len(chosen) else end_offset - 1
        if groups:
            group = groups[-1]
            size = sum(s.size_bytes for s in group)
            if size + segment.size_bytes <= max_bytes and upper - group[0].base_offset <= _I32_MAX:
                group.append(segment)
                continue
        groups.append([segment])
    return groups


_I32_MAX = (1 << 31) - 1
_NO_END = 1 << 63
