"""The sparse offset index of one segment (Kafka's ``.index`` file).

Entries are 8 bytes, big-endian: offset relative to the segment's base offset (uint32)
and the byte position of a batch in the ``.log`` file (uint32). As in Kafka, an entry is
added when more than ``index.interval.bytes`` were appended since the last one, keyed by
the batch's last offset. Entries are kept in memory too: lookups never touch the file.

Durability: the file is not fsynced with the data it indexes (Kafka's segment flush does
fsync both; see ``storage/log.py``). An acknowledged append waits for its ``.log`` file
only; the index is fsynced before anything trusts it: before a recovery-point checkpoint
covering its entries is written, at a clean close, and after a clean open rebuilt it
(``PartitionLog._sync_indexes``, which skips an index an fsync already covered: one with
its data while the file cache was crowded, or the cache's own before it closed the file).
Recovery trusts an entry only below the checkpointed recovery point and rebuilds the rest
of the segment's index from the log, so entries a crash lost or garbled beyond that point
cost a re-read, never a record.
"""

from __future__ import annotations

import errno
import os
import struct
from array import array
from bisect import bisect_right
from pathlib import Path

from oncelog.storage.file_cache import FileCache, size_or_create

__all__ = ["ENTRY_SIZE", "OffsetIndex"]

ENTRY_SIZE = 8
_ENTRY = struct.Struct(">II")


class OffsetIndex:
    """In-memory copy plus append-only file of (relative offset, position) entries."""

    def __init__(self, path: Path, base_offset: int, file_cache: FileCache) -> None:
        self.path = path
        self.base_offset = base_offset
        self._offsets = array("q")  # absolute offsets, for bisect
        self._positions = array("q")
        size_or_create(path)
        self._file_cache = file_cache
        self.file = file_cache.file(path, os.O_RDWR | os.O_APPEND)
        # Written since its last fsync. An index found on disk is durable: a clean close
        # and every checkpoint fsync it, and so do recovery and a clean open that rebuilt it.
        self.unsynced = False

    def __len__(self) -> int:
        return len(self._offsets)

    def load(self, log_size: int) -> bool:
        """Read the file; return False (leaving the index empty) if it fails Kafka-style
        sanity checks, so the caller rebuilds it from the log."""
        with self._file_cache.using(self.file) as fd:
            data = os.pread(fd, os.fstat(fd).st_size, 0)
        if len(data) % ENTRY_SIZE:
            return False
        offsets, positions = array("q"), array("q")
        last_offset, last_position = -1, -1
        for relative, position in _ENTRY.iter_unpack(data):
            offset = self.base_offset + relative
            if offset <= last_offset or position <= last_position or position >= log_size:
                return False
            offsets.append(offset)
            positions.append(position)
            last_offset, last_position = offset, position
        self._offsets, self._positions = offsets, positions
        return True

    def append(self, offset: int, position: int) -> None:
        """Add an entry; OSError if the file did not take all of it (the segment then takes
        its batch back and cuts the file to whole entries: see ``LogSegment.append``). A
        part-written entry left in place would shift every later one by its length."""
        entry = _ENTRY.pack(offset - self.base_offset, position)
        with self._file_cache.using(self.file, write=True) as fd:
            written = os.write(fd, entry)
        self.unsynced = True
        if written != ENTRY_SIZE:  # a full disk may take part of it
            raise OSError(errno.ENOSPC, f"wrote {written} of {ENTRY_SIZE} bytes to {self.path}")
        self._offsets.append(offset)
        self._positions.append(position)

    def lookup(self, offset: int) -> int:
        """Position of the last indexed batch whose key offset is <= ``offset`` (0 if
        none): scanning forward from there finds the batch holding ``offset``."""
        i = bisect_right(self._offsets, offset)
        return self._positions[i - 1] if i else 0

    def last_position(self) -> int:
        return self._positions[-1] if self._positions else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or beyond ``position`` (the log was cut there)."""
        keep = bisect_right(self._positions, position - 1)
        del self._offsets[keep:]
        del self._positions[keep:]
        with self._file_cache.using(self.file, write=True) as fd:
            os.ftruncate(fd, keep * ENTRY_SIZE)
        self.unsynced = True

    def reset(self) -> None:
        self.truncate_to_position(0)

    def close(self) -> None:
        self._file_cache.retire(self.file)
