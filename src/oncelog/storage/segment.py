"""One log segment: a ``.log`` file of whole v2 batches plus its ``.index``.

Writes go through ``os.write`` on an ``O_APPEND`` descriptor and reads through
``os.pread``, so the event loop never waits on Python-level buffering; fsync is the
partition log's business (it may run in a worker thread). Descriptors come from the
process's file cache (file_cache.py): opened when used, closed when others need the slot.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

from oncelog.protocol.record_batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    iter_stored_batches,
    parse_header,
    whole_batches_end,
)
from oncelog.storage.file_cache import CachedFile, FileCache, size_or_create
from oncelog.storage.fsync import fsync_together
from oncelog.storage.offset_index import OffsetIndex
from oncelog.storage.txn_index import TransactionIndex

__all__ = ["MAX_RELATIVE_OFFSET", "LogSegment", "batch_runs", "scan_file", "segment_file_name"]

log = logging.getLogger(__name__)

# Kafka keeps offset - base_offset within a signed int32 so index entries always fit.
MAX_RELATIVE_OFFSET = (1 << 31) - 1
_SCAN_CHUNK = 1 << 20
_SEEK_CHUNK = 1 << 16
_LENGTH_AT = 8


def segment_file_name(base_offset: int, suffix: str) -> str:
    """Kafka's name: the base offset zero-padded to 20 digits."""
    return f"{base_offset:020d}{suffix}"


def scan_file(
    fd: int, size: int, start: int = 0, *, with_data: bool = False, chunk: int = _SCAN_CHUNK
) -> Iterator[tuple[int, BatchHeader, memoryview | None]]:
    """``(position, header, bytes if with_data)`` of the whole batches in the first
    ``size`` bytes of ``fd`` from ``start`` on, read in chunks; stops at a torn tail.

    Lazy within a chunk: a caller that stops early (``find_position``, on every Fetch)
    parses only the headers it looked at. Reads with ``os.pread`` only, so a cleaner thread
    can scan a duplicated descriptor while the event loop appends to and reads the same
    file.
    """
    at: tuple[int, int] | None = (start, chunk)
    while at is not None and at[0] < size:
        pos, need = at
        buf = memoryview(os.pread(fd, min(max(chunk, need), size - pos), pos))
        consumed = 0
        for off, header in iter_stored_batches(buf):
            yield pos + off, header, (buf[off : off + header.size] if with_data else None)
            consumed = off + header.size
        at = _next_read(buf, pos, consumed, size, chunk)


def batch_runs(
    fd: int, size: int, start: int = 0, *, chunk: int = _SCAN_CHUNK
) -> Iterator[tuple[int, memoryview]]:
    """``(position, run)``: the whole batches in the first ``size`` bytes of ``fd`` from
    ``start`` on, as consecutive runs of about ``chunk`` bytes (one batch larger than
    that comes whole); stops at a torn tail. For loops that read a few fields of every
    batch (recovery, the producer-state rebuild): each run's end is found first, so unlike
    :func:`scan_file` it is no way to look at only the first batches of a chunk."""
    at: tuple[int, int] | None = (start, chunk)
    while at is not None and at[0] < size:
        pos, need = at
        buf = memoryview(os.pread(fd, min(max(chunk, need), size - pos), pos))
        whole = whole_batches_end(buf)
        if whole:
            yield pos, buf[:whole]
        at = _next_read(buf, pos, whole, size, chunk)


def _next_read(
    buf: memoryview, pos: int, consumed: int, size: int, chunk: int
) -> tuple[int, int] | None:
    """Where to read next and how much, after ``consumed`` bytes of whole batches of
    ``buf`` (read at ``pos``). None whole: the first batch is larger than ``buf``, so read
    it whole; None at a nonsense header or a torn tail."""
    if consumed:
        return pos + consumed, chunk
    if len(buf) < LOG_OVERHEAD:
        return None
    batch = LOG_OVERHEAD + int.from_bytes(buf[_LENGTH_AT:LOG_OVERHEAD], "big", signed=True)
    if batch <= len(buf) or pos + batch > size:
        return None
    return pos, batch


class LogSegment:
    """Bookkeeping for one segment; callers hold the partition lock when mutating."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        index_interval_bytes: int,
        file_cache: FileCache,
        suffix: str = "",
    ) -> None:
        """Open (or create) the segment's files, their descriptors kept by ``file_cache`` (its
        log's cache); ``suffix`` names a segment being built beside the live ones
        (``.cleaned``), see :meth:`rename`."""
        self.base_offset = base_offset
        self.directory = directory
        self.path = directory / segment_file_name(base_offset, ".log" + suffix)
        self.index = OffsetIndex(
            directory / segment_file_name(base_offset, ".index" + suffix), base_offset, file_cache
        )
        self.txn_index = TransactionIndex(
            directory / segment_file_name(base_offset, ".txnindex" + suffix), file_cache
        )
        self.size = size_or_create(self.path)
        self._file_cache = file_cache
        self._file = file_cache.file(self.path, os.O_RDWR | os.O_APPEND)
        self.next_offset = base_offset
        self.first_batch_ms: int | None = None  # roll timer: when its first batch arrived
        self.dirty = False  # data written since the last fsync
        self.torn: OSError | None = None  # a failed write could not be cut off (see append)
        self._interval = index_interval_bytes
        self._bytes_since_index = 0
        self._max_ts = (-1, -1)  # (timestamp, offset of the first batch carrying it)
        self._max_ts_complete = self.size == 0

    # --- building the in-memory state ---

    def note_batch(self, position: int, header: BatchHeader) -> None:
        """Account for a batch that sits at ``position``: index entry, next offset, max
        timestamp. Shared by append, index rebuild and recovery so the rule is one."""
        self.note_batch_fields(
            position, header.base_offset, header.last_offset, header.size, header.max_timestamp
        )

    def note_batch_fields(
        self, position: int, base_offset: int, last_offset: int, size: int, max_timestamp: int
    ) -> None:
        """``note_batch`` given the header fields it reads (recovery reads only those)."""
        if self._bytes_since_index > self._interval:
            self.index.append(last_offset, position)
            self._bytes_since_index = 0
        self._bytes_since_index += size
        self.next_offset = last_offset + 1
        if max_timestamp > self._max_ts[0]:
            self._max_ts = (max_timestamp, base_offset)
        if self.first_batch_ms is None:
            self.first_batch_ms = max_timestamp

    def reset_state(self) -> None:
        """Forget the index and counters before re-noting every batch from position 0."""
        self.index.reset()
        self._bytes_since_index = 0
        self.next_offset = self.base_offset
        self._max_ts = (-1, -1)
        self._max_ts_complete = True
        self.first_batch_ms = None

    def resume_at(self, position: int) -> None:
        """Before re-noting the batches from ``position`` on (an indexed batch; recovery
        trusts everything before it): index entries after it are dropped."""
        self.index.truncate_to_position(position + 1)
        self._bytes_since_index = 0
        self._max_ts = (-1, -1)
        self._max_ts_complete = False  # computed from the whole file when first asked
        self.first_batch_ms = self._first_batch_timestamp()

    def note_indexed_batch(self, header: BatchHeader) -> None:
        """Account for the batch the last index entry points at (its entry is there)."""
        self.note_indexed_batch_fields(header.last_offset, header.size)

    def note_indexed_batch_fields(self, last_offset: int, size: int) -> None:
        """``note_indexed_batch`` given the header fields it reads."""
        self.next_offset = last_offset + 1
        self._bytes_since_index = size

    def load(self) -> None:
        """Trusting open (clean shutdown): load the index, rebuild it if it fails its
        checks, then scan only the tail after the last index entry to find the next
        offset. A torn tail found there is cut off with a warning."""
        if not self.index.load(self.size):
            log.warning("rebuilding corrupt or stale index %s", self.index.path)
            self.reset_state()
            start = 0
        else:
            start = self.index.last_position()
            self._bytes_since_index = 0
        end = start
        for pos, header, _ in self.scan(start):
            if start == 0 or pos > start:
                self.note_batch(pos, header)
            else:
                self.note_indexed_batch(header)
            end = pos + header.size
        if end:  # Kafka's rule after a restart: age by the first batch's timestamp
            self.first_batch_ms = self._first_batch_timestamp()
        if end < self.size:
            log.warning(
                "%s: %d bytes after position %d are not whole batches; truncating",
                self.path,
                self.size - end,
                end,
            )
            self.truncate(end, self.next_offset)

    # --- I/O ---

    def append(
        self,
        data: bytes | bytearray | memoryview,
        base_offset: int,
        last_offset: int,
        max_timestamp: int,
        now_ms: int,
    ) -> int:
        """Write one offset-assigned batch (its header's fields as the log has them: given,
        not read back from ``data``); returns its position.

        A write that fails part-way (ENOSPC, EIO) is cut off again: the O_APPEND descriptor
        would put the next batch after the torn bytes, at a position this segment does not
        know, and recovery would stop at the tear and drop every batch after it. If even
        the cut fails, the segment is ``torn`` and its log takes no more writes, as Kafka
        takes a log directory offline after an I/O error, until a restart's recovery trims
        the tail."""
        position = self.size
        view = memoryview(data)
        fd = self._file_cache.pin(self._file)  # ``using``, spelled out: the hottest write path
        try:
            while view:
                written = os.write(fd, view)
                view = view[written:]
        except OSError as exc:
            self._cut_to(fd, position, exc)
            raise
        finally:
            self._file_cache.unpin(self._file, wrote=True)
        self.size += len(data)
        self.dirty = True
        if position == 0:
            self.first_batch_ms = now_ms
        try:
            self.note_batch_fields(position, base_offset, last_offset, len(data), max_timestamp)
        except OSError as exc:  # its index entry: the batch is written but not noted
            self._unwrite(position, exc)
            raise
        return position

    def _unwrite(self, position: int, cause: OSError) -> None:
        """Take back a batch written at ``position`` whose index entry failed: left in the
        file, the next batch would get its offsets (``next_offset`` never moved) and
        readers would find two batches with them. The index is cut back first, then the
        data; if either cut fails the segment is ``torn``."""
        self.size = position
        if position == 0:
            self.first_batch_ms = None
        try:
            self.index.truncate_to_position(position)
        except OSError as exc:
            log.error("could not cut the failed index entry off %s: %s", self.path, exc)
            self.torn = cause
            return
        with self._file_cache.using(self._file, write=True) as fd:
            self._cut_to(fd, position, cause)

    def _cut_to(self, fd: int, position: int, cause: OSError) -> None:
        """Remove what a failed write left after ``position``; if that fails too, mark the
        segment torn."""
        try:
            os.ftruncate(fd, position)
        except OSError as exc:
            log.error("could not cut the failed write off %s: %s", self.path, exc)
            self.torn = cause

    def _first_batch_timestamp(self) -> int:
        return parse_header(self.pread(HEADER_SIZE, 0)).max_timestamp

    def scan(
        self, start: int = 0, *, with_data: bool = False, chunk: int = _SCAN_CHUNK
    ) -> Iterator[tuple[int, BatchHeader, memoryview | None]]:
        """Whole batches from ``start`` on, read in chunks; stops at a torn tail."""
        with self._file_cache.using(self._file) as fd:  # kept open while the scan goes on
            yield from scan_file(fd, self.size, start, with_data=with_data, chunk=chunk)

    def batch_runs(self, start: int = 0) -> Iterator[tuple[int, memoryview]]:
        """Runs of whole batches from ``start`` on (see :func:`batch_runs`)."""
        with self._file_cache.using(self._file) as fd:
            yield from batch_runs(fd, self.size, start)

    def find_position(self, offset: int) -> int | None:
        """Position of the batch holding ``offset`` (or the first after it), via the index."""
        for pos, header, _ in self.scan(self.index.lookup(offset), chunk=_SEEK_CHUNK):
            if header.last_offset >= offset:
                return pos
        return None

    def read(self, position: int, max_bytes: int, max_offset: int | None, min_one: bool) -> bytes:
        """Whole batches from ``position``: at most ``max_bytes`` (but one whole batch if
        ``min_one``), none holding an offset at or above ``max_offset``."""
        available = self.size - position
        buf = self.pread(min(max(max_bytes, HEADER_SIZE), available), position)
        end = 0
        for pos, header in iter_stored_batches(buf):
            if max_offset is not None and header.last_offset >= max_offset:
                break
            end = pos + header.size
        if end == 0 and min_one and len(buf) >= HEADER_SIZE:
            header = parse_header(buf)
            if max_offset is None or header.last_offset < max_offset:
                return self.pread(min(header.size, available), position)
        return buf[:end]

    def max_timestamp(self) -> tuple[int, int]:
        """(largest batch max timestamp, base offset of the first batch carrying it)."""
        if not self._max_ts_complete:
            best = (-1, -1)
            for _, header, _ in self.scan():
                if header.max_timestamp > best[0]:
                    best = (header.max_timestamp, header.base_offset)
            self._max_ts, self._max_ts_complete = best, True
        return self._max_ts

    def pread(self, size: int, position: int) -> bytes:
        """`size` bytes of the log file from `position` (fewer at its end)."""
        with self._file_cache.using(self._file) as fd:
            return os.pread(fd, size, position)

    def truncate(self, position: int, next_offset: int) -> None:
        with self._file_cache.using(self._file, write=True) as fd:
            os.ftruncate(fd, position)
        self.size = position
        self.next_offset = next_offset
        self.index.truncate_to_position(position)
        self.txn_index.truncate_to(next_offset)
        self._max_ts_complete = position == 0
        self._max_ts = (-1, -1)
        self.dirty = True

    def close(self) -> None:
        self._file_cache.retire(self._file)
        self.index.close()
        self.txn_index.close()

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
        self.index.path.unlink(missing_ok=True)
        self.txn_index.delete()

    def rename(self, suffix: str) -> None:
        """Give the segment's files ``suffix`` ("" for the live names), replacing files of
        that name. Indexes first, the log last: whoever finds a log file under a suffix
        knows its indexes were renamed before it. Open descriptors stay valid; a closed
        one is reopened under the new name."""
        index = self.directory / segment_file_name(self.base_offset, ".index" + suffix)
        txn_index = self.directory / segment_file_name(self.base_offset, ".txnindex" + suffix)
        log_file = self.directory / segment_file_name(self.base_offset, ".log" + suffix)
        self._file_cache.rename(self.index.file, index)
        self.index.path = index
        if self.txn_index.path.exists():
            self.txn_index.rename(txn_index)
        else:
            txn_index.unlink(missing_ok=True)  # no aborted transaction: none may linger
            self.txn_index.path = txn_index
        self._file_cache.rename(self._file, log_file)
        self.path = log_file

    def duplicate_descriptor(self) -> int:
        """A descriptor of the log file of its own (the caller closes it), for a reader in
        another thread that must not depend on the cache keeping this one open."""
        with self._file_cache.using(self._file) as fd:
            return os.dup(fd)

    def sync_files(self) -> list[CachedFile]:
        """The files an fsync of this segment must cover."""
        files = [self._file, self.index.file]
        if self.txn_index.file is not None:
            files.append(self.txn_index.file)
        return files

    def claim_unsynced_files(self, *, with_index: bool = False) -> list[CachedFile]:
        """What a data flush must fsync, claimed under the log's lock: the log file, and
        the aborted-transaction index if it was written since a flush last claimed it.
        Clears ``dirty``; if the fsync fails, :meth:`unclaim` marks them to be synced again.

        Not the offset index: nothing trusts it before the recovery point that covers its
        entries is checkpointed, so it is fsynced then (:meth:`claim_unsynced_index`); a
        crash before that rebuilds it from the log. ``with_index`` (the file cache is
        crowded; the caller holds the log's ``_checkpoint_lock``) claims it too, unless an
        fsync already covered it: left written, it would be fsynced when the cache closes
        it for another file, under the cache's lock, maybe on the event loop. The
        aborted-transaction index is not rebuilt by recovery (only the producer-state
        replay after the newest snapshot re-indexes abort markers, and a snapshot may lie
        past the checkpoint), so an abort is durable only with its entry; it is written
        once per aborted transaction."""
        files = [self._file]
        if self.txn_index.unsynced and self.txn_index.file is not None:
            files.append(self.txn_index.file)
            self.txn_index.unsynced = False
        if with_index and self.claim_unsynced_index() is not None:
            files.append(self.index.file)
        self.dirty = False
        return files

    def unclaim(self) -> None:
        """After a failed data fsync: the next flush, and the next checkpoint, cover every
        file again."""
        self.dirty = self.txn_index.unsynced = self.index.unsynced = True

    def claim_unsynced_index(self) -> CachedFile | None:
        """The offset index's file if it was written since it was last claimed (clears
        the mark; :meth:`unclaim_index` sets it again after a failed fsync), else None.
        None too, clearing the mark, if the file cache says an fsync since covered every
        write to it (a crowded cache's data flush, or the cache's own fsync when it closed
        the file): claiming it would reopen it, closing another file, to fsync it again.
        Under the log's lock, so no append writes it meanwhile."""
        if not self.index.unsynced:
            return None
        self.index.unsynced = False
        if self._file_cache.synced(self.index.file):
            return None
        return self.index.file

    def unclaim_index(self) -> None:
        """After a failed index fsync: the index is unsynced again (its log is offline)."""
        self.index.unsynced = True

    def fsync(self) -> None:
        """fsync every file of the segment now (in the calling thread): recovery and the
        cleaner make a segment wholly durable before anything trusts it."""
        files = self.sync_files()
        fds = self._file_cache.pin_for_sync(files)
        unsynced = self.index.unsynced, self.txn_index.unsynced
        self.index.unsynced = self.txn_index.unsynced = False
        try:
            fsync_together(fds)
        except BaseException:
            self.index.unsynced, self.txn_index.unsynced = unsynced
            self._file_cache.sync_failed(files)
            raise
        finally:
            for file in files:
                self._file_cache.unpin(file)
        self.dirty = False
