"""More segment files than the file cache holds open (issue 12): an offset index is
fsynced at the recovery-point checkpoint rather than with its data, so it would stay
written (not fsynced) for a checkpoint interval, and the cache, closing it for another
file, would fsync it under its lock in whichever thread opens a file: the event loop. So
the cache closes clean files first, a flush fsyncs the index with its data while the
cache is crowded, and the checkpoint skips an index an fsync already covered."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

import oncelog.storage.log as log_module
from oncelog.broker.durability import GroupCommitFlusher
from oncelog.storage import LogConfig, PartitionLog
from oncelog.storage.checkpoint import read_checkpoint
from oncelog.storage.file_cache import CachedFile, FileCache
from oncelog.storage.log import RECOVERY_POINT_FILE

from .failures import file_of
from .isolation import fresh_file_cache
from .test_index_durability import CONFIG, append_batches, batch_offsets, recording


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch) -> FileCache:
    return fresh_file_cache(monkeypatch)


@contextmanager
def held_open_until_closed(cache: FileCache, file: CachedFile, directory: Path) -> Iterator[None]:
    """Fill the cache with other files held open (pinned) until it closes ``file`` to make
    room; they are let go at the end of the block."""
    cache.capacity = cache.open_count
    others: list[CachedFile] = []
    try:
        while file.fd is not None:
            assert len(others) < 8, "the cache never closed the file"
            others.append(cache.file(directory / f"other-{len(others)}", os.O_RDWR | os.O_CREAT))
            cache.pin(others[-1])
        yield
    finally:
        for other in others:
            cache.unpin(other)
            cache.retire(other)


def test_a_crowded_cache_has_the_flush_fsync_the_index_with_its_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: FileCache
) -> None:
    events, _ = recording(monkeypatch, tmp_path)
    log = PartitionLog.open(tmp_path / "t-0", CONFIG, clean_shutdown=False)
    append_batches(log, 0, 10)
    cache.capacity = cache.open_count  # the next file opened closes another
    log.flush()
    assert events == ["fsync .index .log"], "a crowded cache's flush left the index written"
    log.write_recovery_checkpoint()
    assert events == ["fsync .index .log", "checkpoint 20"], "the index was fsynced twice"
    log.close()


def test_an_index_the_cache_fsynced_when_closing_it_is_not_fsynced_again_at_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: FileCache
) -> None:
    """Before, the checkpoint reopened the closed index (closing yet another file) and
    fsynced it a second time."""
    events, _ = recording(monkeypatch, tmp_path)
    log = PartitionLog.open(tmp_path / "t-0", CONFIG, clean_shutdown=False)
    append_batches(log, 0, 10)
    log.flush()  # the cache has room: the index stays written until the checkpoint
    index = log._segments[0].index.file
    assert events == ["fsync .log"]
    with held_open_until_closed(cache, index, tmp_path):
        log.write_recovery_checkpoint()
        assert events == ["fsync .log", "checkpoint 20"], "an index fsynced at its close again"
        assert index.fd is None, "the checkpoint reopened the index"
    log.close()


def test_an_index_whose_fsync_at_closing_failed_is_never_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: FileCache
) -> None:
    """The guard on the skip above (passes before it too): a failed fsync when the cache
    closed the index fails the checkpoint and takes the log offline."""
    events, _ = recording(monkeypatch, tmp_path)
    log = PartitionLog.open(tmp_path / "t-0", CONFIG, clean_shutdown=False)
    append_batches(log, 0, 10)
    log.flush()
    real_fsync = os.fsync

    def failing(fd: int) -> None:
        if file_of(fd).endswith(".index"):
            raise OSError(errno.EIO, "Input/output error (injected)")
        real_fsync(fd)

    index = log._segments[0].index.file
    with monkeypatch.context() as disk:
        disk.setattr(os, "fsync", failing)
        with held_open_until_closed(cache, index, tmp_path):
            assert index.error is not None
    with pytest.raises(OSError, match="an earlier fsync failed"):
        log.write_recovery_checkpoint()
    assert log.failed and read_checkpoint(tmp_path / "t-0" / RECOVERY_POINT_FILE) is None
    assert events == ["fsync .log"]
    log.close()


def test_many_partitions_through_a_small_cache_cost_the_appending_thread_no_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: FileCache
) -> None:
    """The broker's pattern: the loop appends to one partition after another, a flusher
    thread fsyncs each, a checkpoint thread checkpoints them all; forty partitions, every
    append writing an index entry, through eight descriptors. Before, nearly every append
    fsynced another partition's index on the appending thread, to close it."""
    loop = threading.current_thread()
    on_loop: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        if threading.current_thread() is loop:
            on_loop.append(file_of(fd))
        real_fsync(fd)

    config = LogConfig(segment_bytes=1 << 20, index_interval_bytes=0)
    cache.capacity = 8
    logs = [PartitionLog.open(tmp_path / f"p-{i}", config, clean_shutdown=True) for i in range(40)]
    monkeypatch.setattr(os, "fsync", recording_fsync)  # the opens' directory fsyncs done
    evictions_before = cache.evictions
    with ThreadPoolExecutor(1) as flusher, ThreadPoolExecutor(1) as checkpointer:
        for round_ in range(5):
            for log in logs:
                append_batches(log, round_, 1)
                flusher.submit(log.flush).result()
            for log in logs:
                checkpointer.submit(log.write_recovery_checkpoint).result()
    assert on_loop == [], f"the appending thread fsynced {len(on_loop)} files to close them"
    assert cache.eviction_fsyncs == 0  # nor did any other thread
    assert cache.evictions - evictions_before >= 5 * 40  # the cache was full
    for log in logs:
        log.close()
    for i in range(40):
        reopened = PartitionLog.open(tmp_path / f"p-{i}", config, clean_shutdown=True)
        assert reopened.log_end_offset == 10 and reopened.recovery_point == 10
        assert [batch_offsets(reopened.read(o, 1))[0] for o in (0, 5, 9)] == [0, 4, 8]
        assert len(reopened._segments[0].index) == 4  # every batch but the one at 0
        reopened.close()


def test_a_checkpoint_waits_for_the_crowded_flush_that_claimed_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: FileCache
) -> None:
    """The index entries below the recovery point were written by appends a flush had
    made durable while the cache had room (so their index stayed written); then a crowded
    flush claims the index. A checkpoint written while that flush's fsync runs would make
    recovery trust entries not yet on disk (review MUST-FIX, e30bf71): it must wait."""
    log = PartitionLog.open(tmp_path / "t-0", CONFIG, clean_shutdown=False)
    append_batches(log, 0, 10)
    log.flush()  # the cache has room: the .log alone; the index stays written
    events, _ = recording(monkeypatch, tmp_path)
    fsyncing, release = threading.Event(), threading.Event()
    recorded = log_module.fsync_together

    def held(fds: list[int]) -> None:
        recorded(fds)  # records the round, then fsyncs
        if any(file_of(fd).endswith(".index") for fd in fds):
            fsyncing.set()
            release.wait(5)

    monkeypatch.setattr(log_module, "fsync_together", held)
    cache.capacity = 1  # crowded: the written index alone holds half of it
    append_batches(log, 10, 1)
    flusher = threading.Thread(target=log.flush)
    checkpointer = threading.Thread(target=log.write_recovery_checkpoint)
    flusher.start()
    try:
        assert fsyncing.wait(5), "the crowded flush did not fsync the index"
        checkpointer.start()
        checkpointer.join(1)
        early = list(events)
    finally:
        release.set()
        flusher.join(5)
        checkpointer.join(5)
    assert not any(e.startswith("checkpoint") for e in early), (
        f"a checkpoint was written while the index's fsync ran: {early}"
    )
    assert events == ["fsync .index .log", "checkpoint 22"]
    log.close()


def test_a_crowded_flush_that_fails_leaves_the_index_to_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: FileCache
) -> None:
    """A crowded flush claims the index with the data; when the flush fails before any
    fsync (here the reopen of the closed .log: EMFILE, which does not take the log
    offline), the index must be unclaimed too, or the next checkpoint would skip it and
    cover its written entries (review SHOULD-FIX 2 on e30bf71)."""
    log = PartitionLog.open(tmp_path / "t-0", CONFIG, clean_shutdown=False)
    append_batches(log, 0, 10)
    log.flush()  # the cache has room: the .log alone; the index stays written
    append_batches(log, 10, 1)
    data = log._segments[0]._file
    [fd] = cache.pin_for_sync([data])
    os.fsync(fd)
    cache.unpin(data)
    with cache._lock:  # the cache closes the (clean) .log to make room for another file
        cache._close_now(data)
    cache.capacity = 2  # the written index holds half of it: crowded
    assert cache.crowded and log._segments[0].index.file.fd is not None
    real_open = os.open

    def no_descriptor(path: str | Path, *args: int) -> int:
        if str(path).endswith(".log"):
            raise OSError(errno.EMFILE, "Too many open files (injected)")
        return real_open(path, *args)

    with monkeypatch.context() as process:
        process.setattr(os, "open", no_descriptor)
        with pytest.raises(OSError, match="injected"):
            log.flush()
    assert not log.failed
    events, _ = recording(monkeypatch, tmp_path)
    log.write_recovery_checkpoint()
    assert events == ["fsync .index", "checkpoint 20"], "the checkpoint skipped the index"
    log.close()


def test_a_log_opened_before_the_tests_cache_keeps_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session broker of an xdist worker (started by an earlier client or Spark test
    file) flushes and checkpoints its logs in its own threads while a storage test runs.
    Its logs used the cache through the module global a test's isolation swaps, so their
    fsyncs counted their written files out of the test's cache: ``crowded`` turned False
    under ``test_a_crowded_flush_that_fails_leaves_the_index_to_the_checkpoint`` (1 whole
    suite run in 3). A log now keeps the cache it was opened with."""
    brokers_log = PartitionLog.open(tmp_path / "broker-0", CONFIG, clean_shutdown=False)
    append_batches(brokers_log, 0, 10)  # written, not fsynced yet
    cache = fresh_file_cache(monkeypatch)
    log = PartitionLog.open(tmp_path / "t-0", CONFIG, clean_shutdown=False)
    append_batches(log, 0, 10)  # its .log and .index written
    cache.capacity = 4
    brokers_log.flush()  # the broker's flusher and checkpoint, meanwhile
    brokers_log.write_recovery_checkpoint()
    assert (cache.open_count, cache.crowded) == (2, True), "another log's files in the cache"
    brokers_log.close()
    log.close()


def test_a_crowded_cache_has_the_group_commit_flusher_fsync_the_index_with_its_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: FileCache
) -> None:
    """The broker's flusher: while the cache is crowded its flush runs whole on a Python
    thread (``PartitionLog.flush``, the index with its data), not split around the
    GIL-free threads, which fsync only the log file."""
    events, _ = recording(monkeypatch, tmp_path)
    log = PartitionLog.open(tmp_path / "t-0", CONFIG, clean_shutdown=False)
    append_batches(log, 0, 10)
    cache.capacity = cache.open_count  # the next file opened closes another

    class Partition:
        def __init__(self) -> None:
            self.log = log

        def check_offline(self) -> None:
            """Not a cluster."""

    async def flushed() -> None:
        flusher = GroupCommitFlusher()
        flusher.start()
        try:
            await asyncio.wait_for(flusher.wait_durable(Partition(), 20), 10)  # type: ignore[arg-type]
        finally:
            await flusher.stop()

    asyncio.run(flushed())
    assert events == ["fsync .index .log"], "the crowded flush left the index written"
    log.close()
