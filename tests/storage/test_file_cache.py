"""The segment file cache: a bounded number of descriptors, and no write lost or misplaced
when one is closed to make room."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from oncelog.protocol.record_batch import Record, build_batch, iter_stored_batches, parse_header
from oncelog.storage import LogConfig, PartitionLog
from oncelog.storage.file_cache import CachedFile, FileCache

from .isolation import fresh_file_cache

WRITE = os.O_RDWR | os.O_APPEND | os.O_CREAT


def read(path: Path) -> bytes:
    return path.read_bytes()


def fsyncs_of_this_thread(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The descriptors ``os.fsync`` is called on from now on, in this thread only (a
    broker another test left running in this process fsyncs too)."""
    synced: list[int] = []
    real_fsync = os.fsync
    this_thread = threading.current_thread()

    def recording(fd: int) -> None:
        if threading.current_thread() is this_thread:
            synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    return synced


def test_no_more_descriptors_than_the_capacity(tmp_path: Path) -> None:
    cache = FileCache(capacity=4)
    files = [cache.file(tmp_path / f"f{i}", WRITE) for i in range(20)]
    for round_ in range(3):
        for i, file in enumerate(files):
            with cache.using(file, write=True) as fd:
                os.write(fd, b"%d:%d;" % (round_, i))
            assert cache.open_count <= 4
    for i in range(20):
        assert read(tmp_path / f"f{i}") == b"0:%d;1:%d;2:%d;" % (i, i, i)
    assert cache.evictions >= 56


def test_a_descriptor_in_use_is_never_closed(tmp_path: Path) -> None:
    cache = FileCache(capacity=2)
    held = cache.file(tmp_path / "held", WRITE)
    fd = cache.pin(held)
    for i in range(10):
        with cache.using(cache.file(tmp_path / f"other{i}", WRITE)):
            pass
    os.write(fd, b"still mine")
    cache.unpin(held, wrote=True)
    assert read(tmp_path / "held") == b"still mine"


def test_a_written_file_is_fsynced_before_its_descriptor_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced = fsyncs_of_this_thread(monkeypatch)
    cache = FileCache(capacity=1)
    written, other = cache.file(tmp_path / "w", WRITE), cache.file(tmp_path / "o", WRITE)
    with cache.using(written, write=True) as fd:
        os.write(fd, b"data")
        written_fd = fd
    with cache.using(other):  # needs the slot: `written` is fsynced, then closed
        pass
    assert synced == [written_fd]
    with cache.using(written):  # clean now: evicted without another fsync
        pass
    with cache.using(other):
        pass
    assert synced == [written_fd]


def test_a_failed_fsync_before_closing_is_reported_by_every_later_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_fsync = os.fsync
    cache = FileCache(capacity=1)
    doomed, other = cache.file(tmp_path / "d", WRITE), cache.file(tmp_path / "o", WRITE)
    with cache.using(doomed, write=True) as fd:
        os.write(fd, b"lost?")
        doomed_fd = fd

    def failing(fd: int) -> None:
        if fd != doomed_fd:  # another thread's file (a broker left running in the process)
            real_fsync(fd)
            return
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing)
    with cache.using(other):
        pass
    monkeypatch.undo()
    for _ in range(2):
        with pytest.raises(OSError, match="an earlier fsync failed"):
            cache.pin_for_sync([doomed])


def test_a_file_is_not_recreated_if_it_vanished(tmp_path: Path) -> None:
    cache = FileCache(capacity=1)
    segment, other = cache.file(tmp_path / "s", WRITE), cache.file(tmp_path / "o", WRITE)
    with cache.using(segment):
        pass
    with cache.using(other):
        pass
    (tmp_path / "s").unlink()
    with pytest.raises(FileNotFoundError), cache.using(segment):
        pass


def test_retiring_a_file_in_use_closes_it_when_its_user_is_done(tmp_path: Path) -> None:
    cache = FileCache(capacity=4)
    file = cache.file(tmp_path / "r", WRITE)
    fd = cache.pin(file)
    cache.retire(file)
    os.fstat(fd)  # still open for its user
    cache.unpin(file)
    assert file.fd is None and cache.open_count == 0
    with pytest.raises(ValueError, match="closed"):
        cache.pin(file)


def test_threads_never_write_into_each_others_files(tmp_path: Path) -> None:
    """Four threads write their own files through a cache far smaller than the files: an
    eviction closing a descriptor another thread is about to use would fail that write, or
    put its bytes into whichever file reused the descriptor number."""
    cache = FileCache(capacity=3)
    files = [[cache.file(tmp_path / f"t{t}-{i}", WRITE) for i in range(8)] for t in range(4)]
    failures: list[BaseException] = []

    def writer(t: int) -> None:
        try:
            for n in range(400):
                with cache.using(files[t][n % 8], write=True) as fd:
                    time.sleep(0)  # let the others run while this descriptor is in use
                    os.write(fd, b"t%d;" % t)
        except BaseException as exc:
            failures.append(exc)

    workers = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert failures == []
    for t in range(4):
        for i in range(8):
            assert read(tmp_path / f"t{t}-{i}") == b"t%d;" % t * 50


@pytest.fixture
def small_cache(monkeypatch: pytest.MonkeyPatch) -> FileCache:
    """Eight descriptors, for the test's logs alone (a worker's session broker keeps its
    own: tests/storage/isolation.py)."""
    cache = fresh_file_cache(monkeypatch)
    cache.configure(8)
    return cache


def test_many_partition_logs_through_a_small_cache(tmp_path: Path, small_cache: FileCache) -> None:
    """Forty logs, each with a .log and an .index, append, flush, read, close and reopen
    through eight descriptors."""
    config = LogConfig(index_interval_bytes=0)
    logs = [PartitionLog.open(tmp_path / f"p-{i}", config, clean_shutdown=True) for i in range(40)]
    for round_ in range(3):
        for i, log in enumerate(logs):
            batch = build_batch([Record(None, b"%d-%d" % (i, round_))], timestamp_ms=1)
            log.append(batch, parse_header(batch), now_ms=1)
            assert small_cache.open_count <= 8
    for log in logs:
        log.flush()
        log.close()
    reopened = [
        PartitionLog.open(tmp_path / f"p-{i}", config, clean_shutdown=True) for i in range(40)
    ]
    for i, log in enumerate(reopened):
        stored = log.read(0, 1 << 20)
        assert [h.base_offset for _, h in iter_stored_batches(stored)] == [0, 1, 2]
        assert b"%d-2" % i in stored
        log.close()
    assert small_cache.open_count <= 8


def test_clean_files_are_closed_before_written_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing a written file costs an fsync under the cache's lock, in whichever thread
    wants the slot (often the event loop); a clean one costs nothing, so it goes first,
    though the written one was used longer ago."""
    synced = fsyncs_of_this_thread(monkeypatch)
    cache = FileCache(capacity=2)
    written, clean = cache.file(tmp_path / "w", WRITE), cache.file(tmp_path / "c", WRITE)
    with cache.using(written, write=True) as fd:
        os.write(fd, b"data")
    with cache.using(clean):
        pass
    with cache.using(cache.file(tmp_path / "new", WRITE), write=True) as fd:
        os.write(fd, b"data")
    assert synced == [] and written.fd is not None and clean.fd is None
    assert cache.eviction_fsyncs == 0
    with cache.using(cache.file(tmp_path / "newer", WRITE)):  # no clean file left unused
        pass
    assert len(synced) == 1 and written.fd is None and cache.eviction_fsyncs == 1


def test_synced_only_when_every_write_is_covered_by_an_fsync_that_succeeded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What lets a checkpoint skip an index the cache fsynced when it closed it: never
    while a write is uncovered, in progress, or after a failed fsync."""
    cache = FileCache(capacity=1)
    file, other = cache.file(tmp_path / "f", WRITE), cache.file(tmp_path / "o", WRITE)
    assert cache.synced(file)  # never written
    fd = cache.pin(file)
    os.write(fd, b"x")
    assert not cache.synced(file)  # in use: its writer has not said it wrote yet
    cache.unpin(file, wrote=True)
    assert not cache.synced(file)
    with cache.using(other):  # closes `file`, fsyncing it first
        pass
    assert file.fd is None and cache.synced(file)
    with cache.using(file, write=True) as fd:
        os.write(fd, b"y")
    assert not cache.synced(file)  # written again after the reopen
    [fd] = cache.pin_for_sync([file])
    assert not cache.synced(file)  # its fsync is under way
    cache.sync_failed([file])
    cache.unpin(file)
    assert not cache.synced(file)
    real_fsync = os.fsync

    def failing(fd: int) -> None:
        if fd != file.fd:
            real_fsync(fd)
            return
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing)
    with cache.using(other):  # the fsync before closing `file` fails
        pass
    assert file.fd is None and file.error is not None
    assert not cache.synced(file)


def test_crowded_counts_written_files_not_open_ones(tmp_path: Path) -> None:
    """A cache full of clean files (old segments a consumer read) is not crowded: clean-first
    eviction closes those at no cost, so a flush need not fsync indexes early. Written
    files holding half the descriptors are."""
    cache = FileCache(capacity=4)
    files = [cache.file(tmp_path / f"f{i}", WRITE) for i in range(6)]
    for file in files:
        with cache.using(file):
            pass
    assert cache.open_count == 4 and not cache.crowded
    for file in files[4:]:
        with cache.using(file, write=True) as fd:
            os.write(fd, b"x")
    assert cache.crowded  # two written of four
    cache.pin_for_sync(files[4:])
    assert not cache.crowded  # their fsync covers them
    for file in files[4:]:
        cache.unpin(file)
    with cache.using(files[4], write=True) as fd:
        os.write(fd, b"y")
    for file in files[:4]:  # the clean ones are closed to make room, never the written one
        with cache.using(file):
            pass
    assert files[4].fd is not None and cache.eviction_fsyncs == 0 and not cache.crowded


def test_the_count_of_written_open_files_survives_every_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`crowded` rests on the count of open written files; a path that forgot it (an
    eviction whose fsync failed, a retired file in use, a written file reopened) would
    make it drift, and a cache crowded for ever fsyncs every index with its data again.
    Random operations on a small cache, a tenth of the eviction fsyncs failing; the count
    checked against the files after every step."""
    import random

    chance = random.Random(12)
    real_fsync = os.fsync

    def sometimes_failing(fd: int) -> None:
        if chance.random() < 0.1:
            raise OSError(5, "Input/output error (injected)")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", sometimes_failing)
    cache = FileCache(capacity=4)
    files = [cache.file(tmp_path / f"f{i}", WRITE) for i in range(20)]
    pinned: list[CachedFile] = []
    for _ in range(3_000):
        file = chance.choice(files)
        action = chance.randrange(6)
        if file.retired or file.error is not None:
            continue
        if action == 0:
            with cache.using(file, write=True) as fd:
                os.write(fd, b"x")
        elif action == 1:
            with cache.using(file):
                pass
        elif action == 2 and file not in pinned:
            cache.pin_for_sync([file])
            pinned.append(file)
        elif action == 3 and pinned:
            done = pinned.pop(chance.randrange(len(pinned)))
            if chance.random() < 0.3:
                cache.sync_failed([done])
            cache.unpin(done)
        elif action == 4 and chance.random() < 0.01:
            cache.retire(file)
        open_written = sum(1 for f in cache._open if f.dirty and f.fd is not None)
        assert cache._written_open == open_written
    assert cache.evictions > 100 and cache.eviction_fsyncs > 10, "the paths were not taken"
