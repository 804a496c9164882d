"""Segment file descriptors, opened when used and at most `capacity` open at once.

Kafka keeps every segment's files open for the life of the log and asks operators for a
file-descriptor limit in the hundreds of thousands. oncelog did the same, two descriptors
per segment, and 4,000 partitions created near the process limit failed half-way with
"too many open files". Here a segment's files are opened the first time they are read or
written, and beyond `capacity` the least recently used descriptor is closed, so the
number of partitions is bounded by disk and memory, not by the descriptor limit. The
cache is process-wide, as the limit it protects is.

Closing a descriptor must never lose a write or hide a failed one:
- a descriptor in use (`using`, or pinned for an fsync) is never closed under its user,
  whichever thread wants the slot;
- a file written since its last fsync is fsynced before its descriptor is closed; if
  that fsync fails, the failure is kept and every later fsync of the file reports it, so
  no write is acknowledged as durable that is not. Such an fsync runs under the lock, in
  whichever thread wants the slot (often the event loop), so clean files are closed
  first and a written one only when no clean one is left: more files written and not
  yet fsynced than the capacity holds (the fsync then runs under this lock, under the
  lock of the log whose append or flush opens a file, and for a crowded flush under that
  log's checkpoint lock). An offset index is fsynced
  at the recovery-point checkpoint, not with its data (storage/log.py), so it would stay
  written for a whole checkpoint interval; while written files hold half the cache or
  more (`crowded`) a data flush therefore fsyncs the segment's index with its data, off
  the loop, and the index closes clean. A file that is `synced` needs no further fsync
  (the checkpoint and a crowded flush skip it);
- a file is reopened without O_CREAT: a segment file that vanished is an error, not an
  empty file.
Thread safety: one lock guards the bookkeeping; opening, closing and the fsync of an
evicted file happen under it, reads, writes and flushes outside it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from itertools import chain, islice
from pathlib import Path

__all__ = ["CachedFile", "FileCache", "open_files", "size_or_create"]

log = logging.getLogger(__name__)

# Until the broker sizes the cache from the process's limit (broker/descriptors.py):
# what tools and tests that open logs directly get.
DEFAULT_CAPACITY = 512


class CachedFile:
    """One segment file: its path, how to open it, and its descriptor while open."""

    __slots__ = ("dirty", "error", "fd", "flags", "path", "pins", "retired")

    def __init__(self, path: Path, flags: int) -> None:
        self.path = path
        self.flags = flags  # O_CREAT is dropped after the first open
        self.fd: int | None = None
        self.pins = 0
        self.dirty = False  # written since its last fsync
        self.error: OSError | None = None  # an fsync before eviction failed
        self.retired = False  # closed for good (segment closed or deleted)

    def __repr__(self) -> str:
        return f"CachedFile({self.path.name}, fd={self.fd}, pins={self.pins})"


class FileCache:
    """The open descriptors of every segment file, least recently used closed first."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._open: OrderedDict[CachedFile, None] = OrderedDict()  # least recent first
        self.evictions = 0
        self.eviction_fsyncs = 0  # evictions of a written file, which tried an fsync first
        self._written_open = 0  # open files that are `dirty`

    @property
    def open_count(self) -> int:
        return len(self._open)

    @property
    def crowded(self) -> bool:
        """Written (not fsynced) files hold half the descriptors or more: the clean files
        an eviction closes first are running out, and a written one it would have to
        fsync under the lock, maybe on the event loop. So a writer that may leave a file
        written (an offset index, until the checkpoint) should fsync it itself, off the
        loop. Read without the lock: a hint."""
        return self._written_open * 2 >= self.capacity

    def synced(self, file: CachedFile) -> bool:
        """True if every write to ``file`` is covered by an fsync that succeeded: not
        written since, not in use (a writer may be between its write and its unpin), no
        failed fsync kept. An fsync in progress keeps the file pinned until it is known to
        have succeeded (a failure marks the file written again before the unpin)."""
        with self._lock:
            return not file.dirty and not file.pins and file.error is None

    def file(self, path: Path, flags: int) -> CachedFile:
        """A handle on `path`; nothing is opened until it is used."""
        return CachedFile(path, flags | os.O_CLOEXEC)

    def using(self, file: CachedFile, *, write: bool = False) -> _Using:
        """``with cache.using(file) as fd``: the file's descriptor, kept open until the
        block ends. `write`: the block writes, so the file needs an fsync before its
        descriptor may be closed. (A class, not a generator-based context manager: every
        append goes through one or two of these on the event loop, issue 12.)"""
        return _Using(self, file, write)

    def pin(self, file: CachedFile) -> int:
        """Open if needed and keep open until `unpin`; the descriptor."""
        with self._lock:
            if file.retired:
                raise ValueError(f"{file.path} is closed")
            if file.fd is None:
                self._make_room()
                file.fd = os.open(file.path, file.flags, 0o644)
                file.flags &= ~os.O_CREAT
                self._written_open += file.dirty
            self._open[file] = None
            self._open.move_to_end(file)
            file.pins += 1
            return file.fd

    def unpin(self, file: CachedFile, *, wrote: bool = False) -> None:
        with self._lock:
            file.pins -= 1
            if wrote:
                self._mark(file, dirty=True)
            if file.retired and not file.pins:
                self._close_now(file)

    def pin_for_sync(self, files: list[CachedFile]) -> list[int]:
        """Pin the files for an fsync that starts now: their writes so far are covered by
        it, so they are no longer dirty (`sync_failed` makes them dirty again). A file
        whose earlier fsync failed raises that failure."""
        fds = []
        try:
            for file in files:
                if file.error is not None:
                    raise OSError(file.error.errno, f"an earlier fsync failed: {file.error}")
                fds.append(self.pin(file))
        except BaseException:
            for file in files[: len(fds)]:
                self.unpin(file)
            raise
        with self._lock:
            for file in files:
                self._mark(file, dirty=False)
        return fds

    def sync_failed(self, files: list[CachedFile]) -> None:
        with self._lock:
            for file in files:
                self._mark(file, dirty=True)

    def retire(self, file: CachedFile) -> None:
        """Close the file for good (its segment is closed or deleted): now, or once its
        last user is done."""
        with self._lock:
            file.retired = True
            if not file.pins:
                self._close_now(file)

    def rename(self, file: CachedFile, path: Path) -> None:
        """Rename the file on disk, replacing whatever `path` names; an open descriptor
        stays valid, a later reopen uses the new name."""
        with self._lock:
            file.path.rename(path)
            file.path = path

    def _mark(self, file: CachedFile, *, dirty: bool) -> None:
        """Set ``file.dirty`` (lock held), keeping the count of open written files."""
        if file.dirty != dirty and file.fd is not None:
            self._written_open += 1 if dirty else -1
        file.dirty = dirty

    def _close_now(self, file: CachedFile) -> None:
        if file.fd is not None:
            self._written_open -= file.dirty
            os.close(file.fd)
            file.fd = None
        self._open.pop(file, None)

    def _make_room(self) -> None:
        """Close descriptors until one more fits (lock held): the least recently used
        clean ones first, then, only if too few are left, the least recently used written
        ones (each costs an fsync here). Files in use are skipped; if every open file is
        in use, the capacity is exceeded for now. Each walk starts at the least recently
        used file, past the written and pinned ones that clean-first leaves there, and
        stops at the last victim it needs; the walk for written files runs only when the
        clean ones ran out. Linear under the lock: cheap at hundreds of descriptors."""
        needed = len(self._open) - self.capacity + 1
        if needed <= 0:
            return
        clean = (f for f in self._open if not f.pins and not f.dirty)
        written = (f for f in self._open if not f.pins and f.dirty)
        for file in list(islice(chain(clean, written), needed)):  # chosen before closing
            self._evict(file)

    def _evict(self, file: CachedFile) -> None:
        assert file.fd is not None
        if file.dirty:
            self.eviction_fsyncs += 1
            try:
                os.fsync(file.fd)
                self._mark(file, dirty=False)
            except OSError as exc:
                log.error("fsync of %s before closing its descriptor failed: %s", file.path, exc)
                file.error = exc
        self._close_now(file)
        self.evictions += 1

    def configure(self, capacity: int) -> None:
        with self._lock:
            self.capacity = capacity


class _Using:
    """``FileCache.using``: pinned on entry, unpinned on exit, whatever the block raised."""

    __slots__ = ("cache", "file", "write")

    def __init__(self, cache: FileCache, file: CachedFile, write: bool) -> None:
        self.cache = cache
        self.file = file
        self.write = write

    def __enter__(self) -> int:
        return self.cache.pin(self.file)

    def __exit__(self, *_: object) -> None:
        self.cache.unpin(self.file, wrote=self.write)


def size_or_create(path: Path) -> int:
    """The size of the file at `path`, created empty if missing (a new segment's files
    exist from the start, so a directory fsync covers their names)."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
        return 0


# The process's cache: the descriptor limit it protects is the process's too. The broker
# sets its capacity from that limit at start (broker/descriptors.py).
open_files = FileCache()
