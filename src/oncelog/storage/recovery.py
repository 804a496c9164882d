"""Crash recovery of one segment, after Kafka's ``LogSegment.recover()``.

Every batch from the last indexed batch below the checkpointed recovery point on (from
the segment's start if there is none) is re-read and checked (whole, v2, CRC valid,
offsets increasing and within the segment's 32-bit relative range); the file is cut at
the first batch that fails and the index after that trusted batch is rebuilt from the
batches kept. Kafka's ``recover()`` re-reads the whole segment and resets its whole
index; trusting the index below the checkpoint is oncelog's own (see
:func:`recover_segment`). The caller deletes later segments if bytes were dropped, since
nothing after a hole can be trusted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

from oncelog.protocol.record_batch import LOG_OVERHEAD, RECOVERY_FIELDS, batch_crc
from oncelog.storage.segment import MAX_RELATIVE_OFFSET, LogSegment

__all__ = ["RecoveryReport", "SegmentRecovery", "recover_segment"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SegmentRecovery:
    """What recovering one segment did: batches kept, bytes cut off its end."""

    batches: int
    bytes_truncated: int


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What opening a partition log did: zero everywhere after a clean shutdown."""

    segments_recovered: int = 0
    batches_scanned: int = 0
    bytes_truncated: int = 0
    segments_deleted: int = 0


def recover_segment(segment: LogSegment, recovery_point: int | None = None) -> SegmentRecovery:
    """Validate ``segment``, truncate at the first bad batch, fsync.

    With ``recovery_point`` (every offset below it was fsynced, and the index entries
    below it were fsynced before it was checkpointed), validation starts at the last
    indexed batch wholly below it instead of the segment's start, so an unclean start
    costs the unflushed tail, not the whole segment; the index after that batch is rebuilt.
    Should that batch itself fail, the segment is validated from its start after all.
    """
    start = _trusted_position(segment, recovery_point)
    result = _validate_from(segment, start)
    if result is None:
        log.warning("%s: the batch at trusted position %d is damaged", segment.path, start)
        result = _validate_from(segment, 0)
        assert result is not None
    segment.fsync()  # the index too: the next recovery starts from it
    return result


def _trusted_position(segment: LogSegment, recovery_point: int | None) -> int:
    """The last indexed batch whose offsets all lie below ``recovery_point``: it was
    fsynced before the recovery point was, and its index entry before the checkpoint that
    records it (``PartitionLog._write_checkpoint_if_moved``); entries after it may be lost
    or garbled by the crash and are rebuilt. 0 if none, or if the index fails its checks."""
    if recovery_point is None or not segment.index.load(segment.size):
        return 0
    return segment.index.lookup(recovery_point - 1)


def _validate_from(segment: LogSegment, start: int) -> SegmentRecovery | None:
    """Re-note and check every batch from ``start``; truncate at the first bad one. None
    (nothing changed on disk) if ``start`` > 0 and the batch there is bad."""
    if start:
        segment.resume_at(start)
    else:
        segment.reset_state()
    expected = segment.base_offset
    valid_end = start
    batches = 0
    reason = "torn batch"
    for position, base, size, delta, max_timestamp, crc_ok in _stored_batches(segment, start):
        if not crc_ok:
            reason = f"CRC mismatch in batch at offset {base}"
            break
        if base < expected or delta < 0:
            reason = f"offset {base} out of order (expected >= {expected})"
            break
        last = base + delta
        if last - segment.base_offset > MAX_RELATIVE_OFFSET:
            reason = f"offset {last} beyond the segment's relative range"
            break
        if position == start and start:
            segment.note_indexed_batch_fields(last, size)
        else:
            segment.note_batch_fields(position, base, last, size, max_timestamp)
        expected = last + 1
        valid_end = position + size
        batches += 1
    if start and not batches:
        return None
    dropped = segment.size - valid_end
    if dropped:
        log.warning(
            "recovery of %s: %s at position %d; truncating %d bytes",
            segment.path,
            reason,
            valid_end,
            dropped,
        )
        segment.truncate(valid_end, segment.next_offset)
    return SegmentRecovery(batches, dropped)


def _stored_batches(
    segment: LogSegment, start: int
) -> Iterator[tuple[int, int, int, int, int, bool]]:
    """``(position, base offset, size, last offset delta, max timestamp, CRC valid)`` of
    every whole batch from ``start`` on. A tail after a crash can hold a hundred thousand
    small batches: each costs one compiled ``struct`` read and one CRC, no ``BatchHeader``."""
    unpack = RECOVERY_FIELDS.unpack_from
    for run_at, run in segment.batch_runs(start):
        pos, end = 0, len(run)
        while pos < end:
            base, length, crc, delta, max_timestamp = unpack(run, pos)
            size = LOG_OVERHEAD + length
            yield (
                run_at + pos,
                base,
                size,
                delta,
                max_timestamp,
                batch_crc(run[pos : pos + size]) == crc,
            )
            pos += size
