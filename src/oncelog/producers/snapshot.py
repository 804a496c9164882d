"""Producer state snapshot files: ``<20-digit offset>.snapshot`` in the partition directory.

A snapshot named N holds the producer state after every batch below offset N, so start-up
loads the newest one at or below the recovery point and replays only the log after it.

Layout (big-endian), version 2::

    version int16 | crc uint32 (CRC32C of everything after it) |
    entry_count int32 | open_count int32 | oldest_idle_timestamp int64 | live_bytes int64 |
    open*:        producer_id int64 | txn_first_offset int64  (producers with an open txn)
    producer_ids: entry_count x int64, ascending
    positions:    entry_count x int64, each entry's position in the entries area
    entries area: entry*, at their positions; ``live_bytes`` of it are referenced (the
                  rest are entries a later snapshot replaced or dropped):
      producer_id int64 | producer_epoch int16 | coordinator_epoch int32 |
      last_timestamp int64 | current_txn_first_offset int64 (-1: none) |
      batch_count int8 (0..5) |
      batch*: first_seq int32 | last_seq int32 | first_offset int64 |
              last_offset int64 | timestamp int64

``oldest_idle_timestamp`` is the oldest last timestamp of the entries without an open
transaction (the only ones that can expire). Version 1 (still read) is ``entry_count``
and the entries, in producer id order.

Start-up must not grow with the number of producers: a version-2 snapshot is checked (CRC)
and kept as bytes, the two index columns become arrays, and an entry is decoded the first
time its producer is looked up (a binary search in C), so a partition with a million idle
producers is ready as soon as the file is read. Writing the next snapshot copies the
entries area as it is and appends the producers that changed since, re-encoding
everything only once more than half of the area is stale.

Kafka's snapshot keeps only each producer's last batch, so after a restart a retry of any
earlier in-flight batch gets OUT_OF_ORDER_SEQUENCE_NUMBER instead of its original offsets.
We keep all five (about 160 more bytes per producer), so duplicate detection is the same
before and after a restart. Last sequence, last offset and offset delta are not stored:
they are the last batch's.

encode/decode are pure; the file helpers are thin and never raise for a missing directory.
"""

from __future__ import annotations

import io
import re
import struct
import sys
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Set
from pathlib import Path

import crc32c

from oncelog.producers.state import (
    BATCHES_TO_RETAIN,
    NO_TIMESTAMP,
    BatchMetadata,
    ProducerStateEntry,
    ProducerStateManager,
)
from oncelog.storage.atomic_file import write_atomically

__all__ = [
    "SNAPSHOT_SUFFIX",
    "SNAPSHOT_VERSION",
    "CorruptSnapshot",
    "StoredSnapshot",
    "decode_snapshot",
    "decode_state",
    "delete_snapshots_below",
    "encode_snapshot",
    "encode_state",
    "latest_snapshot_at_or_below",
    "list_snapshots",
    "read_snapshot",
    "read_state",
    "snapshot_path",
    "write_snapshot",
]

SNAPSHOT_VERSION = 2
SNAPSHOT_SUFFIX = ".snapshot"

_HEADER = struct.Struct(">hI")  # version, crc
_COUNT = struct.Struct(">i")
# entries, open transactions, oldest idle last timestamp, bytes of the area still referenced
_COUNTS = struct.Struct(">iiqq")
_OPEN = struct.Struct(">qq")  # producer id, first offset of its open transaction
_COLUMN_ITEM = 8  # both index columns hold int64s
_ENTRY = struct.Struct(">qhiqqb")
_BATCH = struct.Struct(">iiqqq")
_IDLE_FIELDS = struct.Struct(">qq")  # last_timestamp, current_txn_first_offset
_IDLE_FIELDS_AT = 14  # after producer_id, producer_epoch, coordinator_epoch
_BATCH_COUNT_AT = _ENTRY.size - 1
_NAME = re.compile(r"^(\d{20})\.snapshot$")


class CorruptSnapshot(Exception):
    """The file is not a whole, intact snapshot of a version we know: rebuild from the log."""


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


# --- encoding ---------------------------------------------------------------------------------


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """The file content for ``entries`` (ordered by producer id, so equal state gives
    equal bytes)."""
    ordered = sorted(entries, key=lambda e: e.producer_id)
    area = bytearray()
    pids, positions = array("q"), array("q")
    for e in ordered:
        pids.append(e.producer_id)
        positions.append(len(area))
        area += _encode_entry(e)
    open_txns = {
        e.producer_id: e.current_txn_first_offset
        for e in ordered
        if e.current_txn_first_offset is not None
    }
    return _assemble(pids, positions, area, open_txns, _oldest_idle(ordered), len(area))


def encode_state(manager: ProducerStateManager) -> bytes:
    """The snapshot of ``manager``. The entries area of the snapshot it was loaded from is
    copied as it is and the entries decoded since are appended (the index columns merged,
    runs of the old ones copied whole): writing costs the producers used since, not all
    of them. Everything is re-encoded once less than half of that area is referenced."""
    stored = manager.snapshot
    if not isinstance(stored, StoredSnapshot):
        return encode_snapshot(manager.decoded_entries())
    decoded = sorted(manager.decoded_entries(), key=lambda e: e.producer_id)
    shadowed = manager.shadowed
    live = stored.live_bytes - sum(stored.entry_size(pid) for pid in shadowed)
    if 2 * live < len(stored.area):
        return encode_snapshot(manager.entries.values())
    area = bytearray(stored.area)
    added: dict[int, int] = {}
    for e in decoded:
        added[e.producer_id] = len(area)
        encoded = _encode_entry(e)
        area += encoded
        live += len(encoded)
    pids, positions = stored.merged_index(shadowed, added)
    oldest = min(manager.snapshot_oldest_idle, _oldest_idle(decoded))
    return _assemble(pids, positions, area, manager.open_transactions, oldest, live)


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


def _oldest_idle(entries: Iterable[ProducerStateEntry]) -> int:
    return min(
        (e.last_timestamp for e in entries if e.current_txn_first_offset is None),
        default=NO_TIMESTAMP,
    )


def _assemble(
    pids: array[int],
    positions: array[int],
    area: bytes | bytearray,
    open_txns: Mapping[int, int],
    oldest_idle: int,
    live_bytes: int,
) -> bytes:
    body = bytearray(_COUNTS.pack(len(pids), len(open_txns), oldest_idle, live_bytes))
    for pid, first in sorted(open_txns.items()):
        body += _OPEN.pack(pid, first)
    body += _big_endian(pids)
    body += _big_endian(positions)
    body += area
    return _HEADER.pack(SNAPSHOT_VERSION, crc32c.crc32c(body)) + bytes(body)


def _big_endian(column: array[int]) -> bytes:
    if sys.byteorder == "big":
        return column.tobytes()
    swapped = array(column.typecode, column)
    swapped.byteswap()
    return swapped.tobytes()


def _column(data: bytes) -> array[int]:
    column = array("q")
    column.frombytes(data)
    if sys.byteorder == "little":
        column.byteswap()
    return column


# --- decoding ---------------------------------------------------------------------------------


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    """Every entry, decoded; ``CorruptSnapshot`` on anything but an intact file."""
    stored = _load(io.BytesIO(data).read)
    return list(stored.entries()) if isinstance(stored, StoredSnapshot) else stored


def _load(read: Callable[[int], bytes]) -> StoredSnapshot | list[ProducerStateEntry]:
    """A version-2 snapshot as a lazily decoded ``StoredSnapshot``; a version-1 file
    decoded whole. ``read(n)`` gives the next n bytes (fewer at the end): a file is read
    section by section, so only the entries area stays in memory as bytes.
    ``CorruptSnapshot`` on anything but an intact file."""
    head = read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise CorruptSnapshot(f"{len(head)} bytes is shorter than a snapshot header")
    version, stored_crc = _HEADER.unpack(head)
    if version == 1:
        body = read(-1)
        _check_crc(stored_crc, crc32c.crc32c(body))
        return _decode_v1_entries(body)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshot(f"unknown snapshot version {version}")
    crc = 0

    def section(size: int) -> bytes:
        nonlocal crc
        data = read(size)
        if len(data) != size:
            raise CorruptSnapshot(f"truncated snapshot: {len(data)} of {size} bytes")
        crc = crc32c.crc32c(data, crc)
        return data

    count, open_count, oldest, live_bytes = _COUNTS.unpack(section(_COUNTS.size))
    if count < 0 or open_count < 0:
        raise CorruptSnapshot(f"negative counts {count}, {open_count}")
    open_txns = dict(_OPEN.iter_unpack(section(open_count * _OPEN.size)))
    pids = _column(section(count * _COLUMN_ITEM))
    positions = _column(section(count * _COLUMN_ITEM))
    area = read(-1)
    crc = crc32c.crc32c(area, crc)
    _check_crc(stored_crc, crc)
    return StoredSnapshot(pids, positions, area, open_txns, oldest, live_bytes)


def _check_crc(stored: int, computed: int) -> None:
    if stored != computed:
        raise CorruptSnapshot(f"CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")


class StoredSnapshot:
    """The producers of a version-2 snapshot, decoded one at a time when asked for (the
    ``SnapshotEntries`` a ``ProducerStateManager`` reads from)."""

    def __init__(
        self,
        producer_ids: array[int],
        positions: array[int],
        area: bytes,
        open_transactions: Mapping[int, int],
        oldest_idle_timestamp: int,
        live_bytes: int,
    ) -> None:
        self._pids = producer_ids
        self._positions = positions
        self.area = area
        self.open_transactions = open_transactions
        self.oldest_idle_timestamp = oldest_idle_timestamp
        self.live_bytes = live_bytes
        self.count = len(producer_ids)
        if self.count and (
            min(positions) < 0 or max(positions) + _ENTRY.size > len(area) or live_bytes < 0
        ):
            raise CorruptSnapshot("an index position lies outside the entries area")

    def get(self, producer_id: int) -> ProducerStateEntry | None:
        i = self._find(producer_id)
        return None if i is None else self._decode_at(self._positions[i])

    def producer_ids(self) -> Iterator[int]:
        return iter(self._pids)

    def entries(self) -> Iterator[ProducerStateEntry]:
        return (self._decode_at(position) for position in self._positions)

    def idle_candidates(self) -> Iterator[tuple[int, int]]:
        """``(producer id, last timestamp)`` of every entry without an open transaction,
        read without decoding the entries (expiry looks at a million of them)."""
        area = self.area
        for pid, position in zip(self._pids, self._positions, strict=True):
            last_timestamp, txn_first = _IDLE_FIELDS.unpack_from(area, position + _IDLE_FIELDS_AT)
            if txn_first < 0:
                yield pid, last_timestamp

    def entry_size(self, producer_id: int) -> int:
        """Bytes the producer's entry takes in the area (0 if it has none here)."""
        i = self._find(producer_id)
        if i is None:
            return 0
        batches: int = self.area[self._positions[i] + _BATCH_COUNT_AT]
        return _ENTRY.size + batches * _BATCH.size

    def merged_index(
        self, removed: Set[int], added: Mapping[int, int]
    ) -> tuple[array[int], array[int]]:
        """The index columns without the ``removed`` producer ids, with ``added`` (producer
        id -> position) in order: runs of the old columns are copied whole."""
        pids, positions = array("q"), array("q")
        start = 0
        for pid in sorted(set(removed) | set(added)):
            i = bisect_left(self._pids, pid)
            pids.extend(self._pids[start:i])
            positions.extend(self._positions[start:i])
            start = i + 1 if i < self.count and self._pids[i] == pid else i
            if pid in added:
                pids.append(pid)
                positions.append(added[pid])
        pids.extend(self._pids[start:])
        positions.extend(self._positions[start:])
        return pids, positions

    def _find(self, producer_id: int) -> int | None:
        if not self.count or producer_id > self._pids[-1]:
            return None  # the common miss: producer ids are allocated in increasing order
        i = bisect_left(self._pids, producer_id)
        return i if i < self.count and self._pids[i] == producer_id else None

    def _decode_at(self, position: int) -> ProducerStateEntry:
        try:
            entry, _ = _decode_entry(self.area, position)
        except struct.error as exc:
            raise CorruptSnapshot(f"truncated entry at position {position}: {exc}") from exc
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


def _decode_v1_entries(body: bytes) -> list[ProducerStateEntry]:
    try:
        (count,) = _COUNT.unpack_from(body)
        if count < 0:
            raise CorruptSnapshot(f"negative entry count {count}")
        pos = _COUNT.size
        entries = []
        for _ in range(count):
            entry, pos = _decode_entry(body, pos)
            entries.append(entry)
    except struct.error as exc:
        raise CorruptSnapshot(f"truncated snapshot: {exc}") from exc
    if pos != len(body):
        raise CorruptSnapshot(f"{len(body) - pos} bytes after the last entry")
    return entries


# --- files ------------------------------------------------------------------------------------


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
    with path.open("rb") as f:
        return _manager(_load(f.read))


def decode_state(data: bytes) -> ProducerStateManager:
    """``read_state`` for file content already in memory."""
    return _manager(_load(io.BytesIO(data).read))


def _manager(stored: StoredSnapshot | list[ProducerStateEntry]) -> ProducerStateManager:
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
