"""Producer state snapshot files: ``<20-digit offset>.snapshot`` in the partition directory.

A snapshot named N holds the producer state after every batch below offset N, so start-up
loads the newest one at or below the recovery point and replays only the log after it.

Layout (big-endian), version 2::

    version int16 | crc uint32 (CRC32C of everything after it) |
    entry_count int32 | open_count int32 | oldest_timestamp int64 | live_bytes int64 |
    open*:  producer_id int64 | txn_first_offset int64      (producers with an open txn)
    index*: producer_id int64 | position int32              (ascending producer id)
    entries area: entry*, each at its index position; ``live_bytes`` of it are referenced
    (the rest are entries a later snapshot replaced):
      producer_id int64 | producer_epoch int16 | coordinator_epoch int32 |
      last_timestamp int64 | current_txn_first_offset int64 (-1: none) |
      batch_count int8 (0..5) |
      batch*: first_seq int32 | last_seq int32 | first_offset int64 |
              last_offset int64 | timestamp int64

Version 1 (still read) is ``entry_count`` and the entries, in producer id order.

Start-up must not grow with the number of producers: a version-2 snapshot is checked (CRC)
and kept as bytes, and an entry is decoded the first time its producer is looked up (a
binary search of the index), so a partition with a million idle producers is ready as
soon as the file is read. Writing the next snapshot copies the entries area as it is and
appends the producers that changed since, re-encoding everything only once more than half
of the area is stale.

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
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping, Set
from pathlib import Path

import crc32c

from oncelog.producers.state import (
    BATCHES_TO_RETAIN,
    BatchMetadata,
    ProducerStateEntry,
    ProducerStateManager,
    SnapshotEntries,
)
from oncelog.storage.atomic_file import write_atomically

__all__ = [
    "SNAPSHOT_SUFFIX",
    "SNAPSHOT_VERSION",
    "CorruptSnapshot",
    "StoredSnapshot",
    "decode_snapshot",
    "delete_snapshots_below",
    "encode_snapshot",
    "latest_snapshot_at_or_below",
    "list_snapshots",
    "load_snapshot",
    "read_snapshot",
    "read_state",
    "snapshot_path",
    "write_snapshot",
]

SNAPSHOT_VERSION = 2
SNAPSHOT_SUFFIX = ".snapshot"

_HEADER = struct.Struct(">hI")  # version, crc
_COUNT = struct.Struct(">i")
# entries, open transactions, oldest last timestamp, bytes of the area still referenced
_COUNTS = struct.Struct(">iiqq")
_OPEN = struct.Struct(">qq")  # producer id, first offset of its open transaction
_INDEX = struct.Struct(">qi")  # producer id, position in the entries area
_PID = struct.Struct(">q")
_ENTRY = struct.Struct(">qhiqqb")
_BATCH = struct.Struct(">iiqqq")
_NO_TIMESTAMP = 2**63 - 1
_NAME = re.compile(r"^(\d{20})\.snapshot$")


class CorruptSnapshot(Exception):
    """The file is not a whole, intact snapshot of a version we know: rebuild from the log."""


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """The file content for ``entries`` (ordered by producer id, so equal state gives
    equal bytes)."""
    ordered = sorted(entries, key=lambda e: e.producer_id)
    area = bytearray()
    index = bytearray()
    for e in ordered:
        index += _INDEX.pack(e.producer_id, len(area))
        area += _encode_entry(e)
    open_txns = {
        e.producer_id: e.current_txn_first_offset
        for e in ordered
        if e.current_txn_first_offset is not None
    }
    oldest = min((e.last_timestamp for e in ordered), default=_NO_TIMESTAMP)
    return _assemble(index, area, open_txns, oldest, len(area))


def _encode_entry(e: ProducerStateEntry) -> bytes:
    txn_first = -1 if e.current_txn_first_offset is None else e.current_txn_first_offset
    out = bytearray(
        _ENTRY.pack(
            e.producer_id,
            e.producer_epoch,
            e.coordinator_epoch,
            e.last_timestamp,
            txn_first,
            len(e.batches),
        )
    )
    for b in e.batches:
        out += _BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp)
    return bytes(out)


def _assemble(
    index: bytes | bytearray,
    area: bytes | bytearray,
    open_txns: Mapping[int, int],
    oldest: int,
    live_bytes: int,
) -> bytes:
    count = len(index) // _INDEX.size
    body = bytearray(_COUNTS.pack(count, len(open_txns), oldest, live_bytes))
    for pid, first in sorted(open_txns.items()):
        body += _OPEN.pack(pid, first)
    body += index
    body += area
    return _HEADER.pack(SNAPSHOT_VERSION, crc32c.crc32c(body)) + bytes(body)


def encode_state(manager: ProducerStateManager) -> bytes:
    """The snapshot of ``manager``. The entries area of the snapshot it was loaded from is
    copied as it is and the decoded entries are appended (the index is merged, runs of
    the old one copied whole): writing costs the producers used since, not all of them.
    Everything is re-encoded once less than half of that area is still referenced."""
    stored = manager.snapshot
    decoded = sorted(manager.decoded_entries(), key=lambda e: e.producer_id)
    if not isinstance(stored, StoredSnapshot):
        return encode_snapshot(decoded)
    live = stored.live_bytes - sum(stored.entry_size(pid) for pid in manager.shadowed)
    if 2 * live < len(stored.area):
        return encode_snapshot(manager.entries.values())
    area = bytearray(stored.area)
    added: dict[int, bytes] = {}
    for e in decoded:
        added[e.producer_id] = _INDEX.pack(e.producer_id, len(area))
        encoded = _encode_entry(e)
        area += encoded
        live += len(encoded)
    index = stored.merged_index(manager.shadowed, added)
    oldest = min([stored.oldest_timestamp, *(e.last_timestamp for e in decoded)])
    return _assemble(index, area, manager.open_transactions, oldest, live)


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    """Every entry, decoded; ``CorruptSnapshot`` on anything but an intact file."""
    stored = load_snapshot(data)
    return list(stored.entries()) if isinstance(stored, StoredSnapshot) else stored


def load_snapshot(data: bytes) -> StoredSnapshot | list[ProducerStateEntry]:
    """A version-2 snapshot as a lazily decoded ``StoredSnapshot``; a version-1 file
    decoded whole. ``CorruptSnapshot`` on anything but an intact file."""
    if len(data) < _HEADER.size + _COUNT.size:
        raise CorruptSnapshot(f"{len(data)} bytes is shorter than a snapshot header")
    version, stored_crc = _HEADER.unpack_from(data)
    if version not in (1, SNAPSHOT_VERSION):
        raise CorruptSnapshot(f"unknown snapshot version {version}")
    body = memoryview(data)[_HEADER.size :]
    actual_crc = crc32c.crc32c(body)
    if stored_crc != actual_crc:
        raise CorruptSnapshot(
            f"CRC mismatch: stored {stored_crc:#010x}, computed {actual_crc:#010x}"
        )
    try:
        if version == 1:
            return _decode_v1_entries(body)
        return StoredSnapshot(bytes(body))
    except struct.error as exc:
        raise CorruptSnapshot(f"truncated snapshot: {exc}") from exc


class StoredSnapshot(SnapshotEntries):
    """The producers of a version-2 snapshot, decoded one at a time when asked for."""

    def __init__(self, body: bytes) -> None:
        count, open_count, oldest, live_bytes = _COUNTS.unpack_from(body)
        if count < 0 or open_count < 0:
            raise CorruptSnapshot(f"negative counts {count}, {open_count}")
        self.count = count
        self.oldest_timestamp = oldest
        self.live_bytes = live_bytes
        pos = _COUNTS.size
        self.open_transactions = dict(_OPEN.iter_unpack(body[pos : pos + open_count * _OPEN.size]))
        if len(self.open_transactions) != open_count:
            raise CorruptSnapshot("truncated list of open transactions")
        self._index_at = pos + open_count * _OPEN.size
        self._area_at = self._index_at + count * _INDEX.size
        if self._area_at > len(body):
            raise CorruptSnapshot(f"truncated snapshot: {count} index entries do not fit")
        self._body = body
        if count:  # the last entry must lie inside the area (a cheap structural check)
            self._decode_at(self._index_position(count - 1))

    @property
    def area(self) -> memoryview:
        return memoryview(self._body)[self._area_at :]

    def producer_ids(self) -> Iterator[int]:
        index = memoryview(self._body)[self._index_at : self._area_at]
        return (pid for pid, _ in _INDEX.iter_unpack(index))

    def get(self, producer_id: int) -> ProducerStateEntry | None:
        i = self._find(producer_id)
        if i is None:
            return None
        return self._decode_at(self._index_position(i))

    def entries(self) -> Iterator[ProducerStateEntry]:
        index = memoryview(self._body)[self._index_at : self._area_at]
        return (self._decode_at(position) for _, position in _INDEX.iter_unpack(index))

    def merged_index(self, removed: Set[int], added: Mapping[int, bytes]) -> bytearray:
        """This index without ``removed`` producer ids, with the ``added`` index entries
        (producer id -> packed entry) in order: runs of the old index are copied whole."""
        out = bytearray()
        index = memoryview(self._body)[self._index_at : self._area_at]
        start = 0
        for pid in sorted(set(removed) | set(added)):
            i = self._lower_bound(pid)
            out += index[start * _INDEX.size : i * _INDEX.size]
            start = i
            if i < self.count and self._index_pid(i) == pid:
                start = i + 1  # replaced or removed
            if pid in added:
                out += added[pid]
        out += index[start * _INDEX.size :]
        return out

    def entry_size(self, producer_id: int) -> int:
        """Bytes the producer's entry takes in the area (0 if it has none here)."""
        i = self._find(producer_id)
        if i is None:
            return 0
        n_batches: int = self._body[self._area_at + self._index_position(i) + _ENTRY.size - 1]
        return _ENTRY.size + n_batches * _BATCH.size

    def _index_pid(self, i: int) -> int:
        return int(_PID.unpack_from(self._body, self._index_at + i * _INDEX.size)[0])

    def _index_position(self, i: int) -> int:
        return int(_INDEX.unpack_from(self._body, self._index_at + i * _INDEX.size)[1])

    def _lower_bound(self, producer_id: int) -> int:
        return bisect_left(range(self.count), producer_id, key=self._index_pid)

    def _find(self, producer_id: int) -> int | None:
        i = self._lower_bound(producer_id)
        return i if i < self.count and self._index_pid(i) == producer_id else None

    def _decode_at(self, position: int) -> ProducerStateEntry:
        entry, _ = _decode_entry(self._body, self._area_at + position)
        return entry


def _decode_entry(body: bytes | memoryview, pos: int) -> tuple[ProducerStateEntry, int]:
    pid, epoch, coordinator_epoch, last_ts, txn_first, n_batches = _ENTRY.unpack_from(body, pos)
    pos += _ENTRY.size
    if not 0 <= n_batches <= BATCHES_TO_RETAIN:
        raise CorruptSnapshot(f"producer {pid} has {n_batches} batches")
    batches = []
    for _ in range(n_batches):
        batches.append(BatchMetadata(*_BATCH.unpack_from(body, pos)))
        pos += _BATCH.size
    entry = ProducerStateEntry(
        pid,
        epoch,
        tuple(batches),
        coordinator_epoch,
        last_ts,
        None if txn_first < 0 else txn_first,
    )
    return entry, pos


def _decode_v1_entries(body: memoryview) -> list[ProducerStateEntry]:
    (count,) = _COUNT.unpack_from(body)
    if count < 0:
        raise CorruptSnapshot(f"negative entry count {count}")
    pos = _COUNT.size
    entries = []
    for _ in range(count):
        entry, pos = _decode_entry(body, pos)
        entries.append(entry)
    if pos != len(body):
        raise CorruptSnapshot(f"{len(body) - pos} bytes after the last entry")
    return entries


def write_snapshot(directory: Path, offset: int, manager: ProducerStateManager) -> Path:
    """Write the manager's state as the snapshot at ``offset``: a crash leaves the old file
    or the new one, never half of one (tmp file, fsync, rename, directory fsync)."""
    path = snapshot_path(directory, offset)
    write_atomically(path, encode_state(manager))
    return path


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    """Every entry of a snapshot file, decoded."""
    return decode_snapshot(path.read_bytes())


def read_state(path: Path) -> ProducerStateManager:
    """The producer state a snapshot file holds, its entries decoded when first used."""
    stored = load_snapshot(path.read_bytes())
    if isinstance(stored, StoredSnapshot):
        return ProducerStateManager(snapshot=stored)
    return ProducerStateManager(stored)


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
