"""Producer state snapshot files: ``<20-digit offset>.snapshot`` in the partition directory.

A snapshot named N holds the producer state after every batch below offset N, so start-up
loads the newest one at or below the recovery point and replays only the log after it.

Layout (big-endian), version 1::

    version int16 | crc uint32 (CRC32C of everything after it) | entry_count int32 |
    entry*: producer_id int64 | producer_epoch int16 | coordinator_epoch int32 |
            last_timestamp int64 | current_txn_first_offset int64 (-1: none) |
            batch_count int8 (0..5) |
            batch*: first_seq int32 | last_seq int32 | first_offset int64 |
                    last_offset int64 | timestamp int64

Kafka's snapshot keeps only each producer's last batch, so after a restart a retry of any
earlier in-flight batch gets OUT_OF_ORDER_SEQUENCE_NUMBER instead of its original offsets.
We keep all five (about 160 more bytes per producer), so duplicate detection is the same
before and after a restart. Last sequence, last offset and offset delta are not stored:
they are the last batch's.

encode/decode are pure; the file helpers are thin and never raise for a missing directory.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable
from pathlib import Path

import crc32c

from oncelog.producers.state import (
    BATCHES_TO_RETAIN,
    BatchMetadata,
    ProducerStateEntry,
    ProducerStateManager,
)
from oncelog.storage.atomic_file import write_atomically

__all__ = [
    "SNAPSHOT_SUFFIX",
    "SNAPSHOT_VERSION",
    "CorruptSnapshot",
    "decode_snapshot",
    "delete_snapshots_below",
    "encode_snapshot",
    "latest_snapshot_at_or_below",
    "list_snapshots",
    "read_snapshot",
    "snapshot_path",
    "write_snapshot",
]

SNAPSHOT_VERSION = 1
SNAPSHOT_SUFFIX = ".snapshot"

_HEADER = struct.Struct(">hI")  # version, crc
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqqb")
_BATCH = struct.Struct(">iiqqq")
_NAME = re.compile(r"^(\d{20})\.snapshot$")


class CorruptSnapshot(Exception):
    """The file is not a whole, intact snapshot of a version we know: rebuild from the log."""


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """The file content for ``entries`` (ordered by producer id, so equal state gives
    equal bytes)."""
    ordered = sorted(entries, key=lambda e: e.producer_id)
    body = bytearray(_COUNT.pack(len(ordered)))
    for e in ordered:
        txn_first = -1 if e.current_txn_first_offset is None else e.current_txn_first_offset
        body += _ENTRY.pack(
            e.producer_id,
            e.producer_epoch,
            e.coordinator_epoch,
            e.last_timestamp,
            txn_first,
            len(e.batches),
        )
        for b in e.batches:
            body += _BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp)
    return _HEADER.pack(SNAPSHOT_VERSION, crc32c.crc32c(body)) + bytes(body)


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    """Entries from file content; ``CorruptSnapshot`` on anything but an intact v1 file."""
    if len(data) < _HEADER.size + _COUNT.size:
        raise CorruptSnapshot(f"{len(data)} bytes is shorter than a snapshot header")
    version, stored_crc = _HEADER.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshot(f"unknown snapshot version {version}")
    body = memoryview(data)[_HEADER.size :]
    actual_crc = crc32c.crc32c(body)
    if stored_crc != actual_crc:
        raise CorruptSnapshot(
            f"CRC mismatch: stored {stored_crc:#010x}, computed {actual_crc:#010x}"
        )
    try:
        return _decode_entries(body)
    except struct.error as exc:
        raise CorruptSnapshot(f"truncated snapshot: {exc}") from exc


def _decode_entries(body: memoryview) -> list[ProducerStateEntry]:
    (count,) = _COUNT.unpack_from(body)
    if count < 0:
        raise CorruptSnapshot(f"negative entry count {count}")
    pos = _COUNT.size
    entries = []
    for _ in range(count):
        pid, epoch, coordinator_epoch, last_ts, txn_first, n_batches = _ENTRY.unpack_from(body, pos)
        pos += _ENTRY.size
        if not 0 <= n_batches <= BATCHES_TO_RETAIN:
            raise CorruptSnapshot(f"producer {pid} has {n_batches} batches")
        batches = []
        for _ in range(n_batches):
            batches.append(BatchMetadata(*_BATCH.unpack_from(body, pos)))
            pos += _BATCH.size
        entries.append(
            ProducerStateEntry(
                pid,
                epoch,
                tuple(batches),
                coordinator_epoch,
                last_ts,
                None if txn_first < 0 else txn_first,
            )
        )
    if pos != len(body):
        raise CorruptSnapshot(f"{len(body) - pos} bytes after the last entry")
    return entries


def write_snapshot(directory: Path, offset: int, manager: ProducerStateManager) -> Path:
    """Write the manager's state as the snapshot at ``offset``: a crash leaves the old file
    or the new one, never half of one (tmp file, fsync, rename, directory fsync)."""
    path = snapshot_path(directory, offset)
    write_atomically(path, encode_snapshot(manager.entries.values()))
    return path


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    return decode_snapshot(path.read_bytes())


def list_snapshots(directory: Path) -> list[int]:
    """Offsets of the snapshot files in ``directory``, ascending (temporary files excluded)."""
    if not directory.is_dir():
        return []
    return sorted(int(m[1]) for p in directory.iterdir() if (m := _NAME.match(p.name)))


def latest_snapshot_at_or_below(directory: Path, offset: int) -> int | None:
    """Offset of the newest snapshot usable for recovery up to ``offset``, if any."""
    return max((o for o in list_snapshots(directory) if o <= offset), default=None)


def delete_snapshots_below(directory: Path, offset: int) -> list[int]:
    """Delete snapshots below ``offset`` (e.g. the log start offset); returns their offsets."""
    doomed = [o for o in list_snapshots(directory) if o < offset]
    for o in doomed:
        snapshot_path(directory, o).unlink(missing_ok=True)
    return doomed
