"""The aborted-transaction index of one segment (Kafka's ``.txnindex``).

One fixed-size entry per transaction whose ABORT marker sits in the segment: producer id,
first and last offset of the transaction, and the last stable offset right after it ended.
A read_committed fetch lists the entries that overlap what it returns, so the consumer
can drop those producers' records. The file is created at the first abort only: most
segments never have one.

Entries are appended in the order of their markers' offsets, so cutting the log keeps a
prefix of them: the file is cut in place with one ``ftruncate``, never rewritten. A rewrite
(truncate, then write the survivors back) would leave an empty file if the broker died in
between, and an aborted transaction whose entry is lost reads as committed.
"""

from __future__ import annotations

import errno
import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from oncelog.storage.file_cache import CachedFile, FileCache

log = logging.getLogger(__name__)

_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")  # version, producer id, first, last, last stable offset


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One entry of the aborted-transaction index."""

    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset
    last_stable_offset: int


class TransactionIndex:
    """The ``.txnindex`` file of one segment and its entries (see the module docstring)."""

    def __init__(self, path: Path, file_cache: FileCache) -> None:
        self.path = path
        self._file_cache = file_cache
        self.file: CachedFile | None = None  # opened at the first abort
        self.entries: list[AbortedTxn] = []
        self.unsynced = True  # written since a flush last fsynced it (not known yet: yes)
        if path.exists():
            self._load()

    def _load(self) -> None:
        data = self.path.read_bytes()
        whole = len(data) - len(data) % _ENTRY.size  # a torn last entry is dropped
        for position in range(0, whole, _ENTRY.size):
            version, producer_id, first, last, lso = _ENTRY.unpack_from(data, position)
            if version != _VERSION:
                break
            self.entries.append(AbortedTxn(producer_id, first, last, lso))
        kept = len(self.entries) * _ENTRY.size
        if kept < whole:
            log.warning("%s: unknown entry at byte %d; later entries dropped", self.path, kept)
        if kept != len(data):
            self._cut_file()

    def append(self, entry: AbortedTxn) -> None:
        """Index ``entry``: in memory first, so reads skip the aborted records even when the
        file write then fails (the log is taken offline then; see ``Log.append_aborted_txn``)."""
        self.entries.append(entry)
        self.unsynced = True
        encoded = _encode(entry)
        with self._file_cache.using(self._opened(), write=True) as fd:
            written = os.write(fd, encoded)
        if written != len(encoded):  # a full disk may take part of it: a torn entry
            raise OSError(errno.ENOSPC, f"wrote {written} of {len(encoded)} bytes to {self.path}")

    def overlapping(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        """Entries of transactions that have records in [start_offset, end_offset)."""
        return [
            e for e in self.entries if e.last_offset >= start_offset and e.first_offset < end_offset
        ]

    def truncate_to(self, offset: int) -> None:
        """Forget transactions whose marker is at or after `offset` (the log was cut)."""
        kept = len(self.entries)
        while kept and self.entries[kept - 1].last_offset >= offset:
            kept -= 1
        if kept != len(self.entries):
            del self.entries[kept:]
            self._cut_file()

    def _cut_file(self) -> None:
        """Cut the file to the entries kept, in place; the next flush fsyncs it."""
        with self._file_cache.using(self._opened(), write=True) as fd:
            os.ftruncate(fd, len(self.entries) * _ENTRY.size)
        self.unsynced = True

    def _opened(self) -> CachedFile:
        """The file's handle, made at the first write (a flush fsyncs only open files)."""
        if self.file is None:
            self.file = self._file_cache.file(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        return self.file

    def close(self) -> None:
        if self.file is not None:
            self._file_cache.retire(self.file)
            self.file = None

    def rename(self, path: Path) -> None:
        """Move the index file to `path` (a segment swap of the cleaner)."""
        if self.file is not None:
            self._file_cache.rename(self.file, path)
        else:
            self.path.rename(path)
        self.path = path

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


def _encode(entry: AbortedTxn) -> bytes:
    return _ENTRY.pack(
        _VERSION, entry.producer_id, entry.first_offset, entry.last_offset, entry.last_stable_offset
    )
