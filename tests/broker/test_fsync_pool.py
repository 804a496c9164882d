"""The GIL-free fsync threads (broker/_fsync_pool.c): every job's outcome comes back once,
through the eventfd, with fsync's errno; stop finishes what was queued, then refuses."""

from __future__ import annotations

import os
import select
import signal
from pathlib import Path

import pytest

from oncelog.broker._fsync_pool import FsyncPool


def _collect(pool: FsyncPool, count: int, timeout_s: float = 10.0) -> list[tuple[int, int]]:
    done: list[tuple[int, int]] = []
    while len(done) < count:
        readable, _, _ = select.select([pool.fileno()], [], [], timeout_s)
        assert readable, f"only {len(done)} of {count} jobs reported"
        done += pool.collect()
    return done


def test_every_job_is_reported_once_with_its_outcome(tmp_path: Path) -> None:
    pool = FsyncPool(3)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    read_end, write_end = os.pipe()
    try:
        os.write(fd, b"x")
        for token in range(20):
            pool.submit(token, fd)
        pool.submit(20, read_end)  # fsync of a pipe: EINVAL
        done = _collect(pool, 21)
        assert sorted(done) == [*[(t, 0) for t in range(20)], (20, 22)]
        assert pool.collect() == []
    finally:
        pool.stop()
        for each in (fd, read_end, write_end):
            os.close(each)


def test_stop_finishes_the_queued_jobs_then_refuses(tmp_path: Path) -> None:
    pool = FsyncPool(1)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        for token in range(50):
            pool.submit(token, fd)
        pool.stop()
        assert sorted(pool.collect()) == [(t, 0) for t in range(50)]
        with pytest.raises(RuntimeError):
            pool.submit(51, fd)
        pool.stop()  # again: nothing to do
    finally:
        os.close(fd)


def _pool_threads() -> list[str]:
    """The /proc/self/task entries of the pool's threads (named fsync_pool)."""
    tasks = Path("/proc/self/task")
    return [t.name for t in tasks.iterdir() if (t / "comm").read_text().strip() == "fsync_pool"]


def test_the_threads_block_every_signal() -> None:
    """SIGINT and SIGTERM go to the loop thread, never to an fsync thread (a signal there
    would interrupt its fsync, and Python's handlers run on the main thread anyway)."""
    before = set(_pool_threads())
    pool = FsyncPool(2)
    try:
        threads = [t for t in _pool_threads() if t not in before]
        assert len(threads) == 2, "the pool's threads are not named fsync_pool"
        for tid in threads:
            status = Path(f"/proc/self/task/{tid}/status").read_text()
            blocked = int(status.split("SigBlk:")[1].split()[0], 16)
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
                assert blocked & (1 << (sig - 1)), f"{sig.name} not blocked in thread {tid}"
    finally:
        pool.stop()


def test_a_negative_descriptor_is_refused() -> None:
    pool = FsyncPool(1)
    try:
        with pytest.raises(ValueError):
            pool.submit(1, -1)
    finally:
        pool.stop()
