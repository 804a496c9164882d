"""Crash recovery of one segment, after Kafka's ``LogSegment.recover()``.

Every batch is re-read and checked (whole, v2, CRC valid, offsets increasing and within
the segment's 32-bit relative range); the file is cut at the first batch that fails and
the index is rebuilt from the batches kept. The caller deletes later segments if bytes
were dropped, since nothing after a hole can be trusted.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from oncelog.protocol.record_batch import crc_is_valid
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


def recover_segment(segment: LogSegment, trusted_offset: int | None = None) -> SegmentRecovery:
    """Validate ``segment``, truncate at the first bad batch, fsync.

    With ``trusted_offset`` (the recovery point: every offset below it was fsynced, the
    index too), validation starts at the last indexed batch at or below it rather than at
    the segment's start, so an unclean start costs the unflushed tail, not the segment.
    """
    start = 0
    if trusted_offset is not None and segment.index.load(segment.size):
        start = segment.index.lookup(trusted_offset)
    if start:
        segment.resume_at(start)
    else:
        segment.reset_state()
    expected = segment.base_offset
    valid_end = 0
    batches = 0
    reason = "torn batch"
    for position, header, data in segment.scan(start, with_data=True):
        assert data is not None
        if not crc_is_valid(data):
            reason = f"CRC mismatch in batch at offset {header.base_offset}"
            break
        if header.base_offset < expected or header.last_offset_delta < 0:
            reason = f"offset {header.base_offset} out of order (expected >= {expected})"
            break
        if header.last_offset - segment.base_offset > MAX_RELATIVE_OFFSET:
            reason = f"offset {header.last_offset} beyond the segment's relative range"
            break
        if position == start and start:
            segment.next_offset = header.next_offset  # indexed already
        else:
            segment.note_batch(position, header)
        expected = header.next_offset
        valid_end = position + header.size
        batches += 1
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
    os.fsync(segment.fd)
    segment.dirty = False
    return SegmentRecovery(batches, dropped)
