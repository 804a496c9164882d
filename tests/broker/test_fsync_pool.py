"""The GIL-free fsync threads (broker/_fsync_pool.c): every job's outcome comes back once,
through the eventfd, with fsync's errno; stop finishes what was queued, then refuses; given
a priority they run SCHED_FIFO where the process may, and fsync all the same where not."""

from __future__ import annotations

import ctypes
import os
import platform
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from oncelog.broker._fsync_pool import FsyncPool

from ..fsync_pools import fsync_threads, may_run_real_time, policies_of_new_threads


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


@pytest.mark.parametrize("priority", [-1, 100])
def test_a_priority_out_of_sched_fifo_range_is_refused(priority: int) -> None:
    with pytest.raises(ValueError, match="priority"):
        FsyncPool(1, priority=priority)


def test_a_negative_descriptor_is_refused() -> None:
    pool = FsyncPool(1)
    try:
        with pytest.raises(ValueError):
            pool.submit(1, -1)
    finally:
        pool.stop()


def test_threads_given_a_priority_run_sched_fifo_where_the_process_may() -> None:
    before = fsync_threads()
    pool = FsyncPool(3, priority=1)
    try:
        assert pool.realtime == may_run_real_time()
        started = [tid for tid in fsync_threads() if tid not in before]
        assert len(started) == 3
        expected = os.SCHED_FIFO if pool.realtime else os.SCHED_OTHER
        assert policies_of_new_threads(before) == {expected}
        priorities = {os.sched_getparam(tid).sched_priority for tid in started}
        assert priorities == {1 if pool.realtime else 0}
    finally:
        pool.stop()
    before = fsync_threads()
    plain = FsyncPool(3)  # no priority: the normal policy
    try:
        assert not plain.realtime
        assert policies_of_new_threads(before) == {os.SCHED_OTHER}
    finally:
        plain.stop()


def test_threads_without_a_priority_take_the_normal_policy_not_their_creators() -> None:
    if not may_run_real_time():
        pytest.skip("this process has no right to SCHED_FIFO: no real-time creator to test")
    policies: list[set[int]] = []

    def create_at_sched_fifo() -> None:  # a real-time embedder's thread makes the pool
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        before = fsync_threads()
        pool = FsyncPool(2)
        policies.append(policies_of_new_threads(before))
        pool.stop()

    creator = threading.Thread(target=create_at_sched_fifo)
    creator.start()
    creator.join()
    assert policies == [{os.SCHED_OTHER}]


# ioprio_get's system call number: Python has no wrapper for it
_IOPRIO_GET = {"x86_64": 252, "aarch64": 31}.get(platform.machine())


def _io_priority(tid: int) -> int:
    """ioprio_get(IOPRIO_WHO_PROCESS, tid): class << 13 | level; 0 when none was set."""
    assert _IOPRIO_GET is not None
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.syscall(_IOPRIO_GET, 1, tid))


_BEST_EFFORT_4 = 2 << 13 | 4  # IOPRIO_CLASS_BE, level 4: a nice-0 task's


@pytest.mark.skipif(_IOPRIO_GET is None, reason="ioprio_get's number known for x86-64, arm64")
@pytest.mark.parametrize("priority", [1, 0])
def test_a_pool_thread_keeps_its_io_in_the_best_effort_class(tmp_path: Path, priority: int) -> None:
    """Whatever its CPU policy (SCHED_FIFO where the process may, else the normal one),
    the thread's I/O is best-effort at a nice-0 task's level, not derived from SCHED_FIFO
    (real-time I/O)."""
    before = fsync_threads()
    pool = FsyncPool(1, priority=priority)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        os.write(fd, b"x")
        pool.submit(1, fd)
        assert _collect(pool, 1) == [(1, 0)]  # the thread has run: its I/O class is set
        [tid] = [t for t in fsync_threads() if t not in before]
        assert _io_priority(tid) == _BEST_EFFORT_4
    finally:
        pool.stop()
        os.close(fd)


_IDLE_CLASS_CHILD = """
import ctypes, os, platform, select, sys
from oncelog.broker._fsync_pool import FsyncPool
libc = ctypes.CDLL(None)
number = {"x86_64": (251, 252), "aarch64": (30, 31)}[platform.machine()]
libc.syscall(number[0], 1, 0, 3 << 13)  # ioprio_set: this process idle (ionice -c3)
before = set(os.listdir("/proc/self/task"))
pool = FsyncPool(1, priority=1)
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
os.write(fd, b"x")
pool.submit(1, fd)
select.select([pool.fileno()], [], [], 10)
pool.collect()
[tid] = set(os.listdir("/proc/self/task")) - before
print(libc.syscall(number[1], 1, int(tid)) >> 13)
pool.stop()
"""


@pytest.mark.skipif(_IOPRIO_GET is None, reason="ioprio_get's number known for x86-64, arm64")
def test_an_io_class_the_operator_set_is_kept(tmp_path: Path) -> None:
    child = subprocess.run(
        [sys.executable, "-c", _IDLE_CLASS_CHILD, str(tmp_path / "f")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "3"  # IOPRIO_CLASS_IDLE, as the process was given


_CHECK_AND_FSYNC = """
import os, resource, select, sys
from oncelog.broker._fsync_pool import FsyncPool
status = open("/proc/self/status").read()
cap_eff = int(status.split("CapEff:")[1].split()[0], 16)
may = bool(cap_eff & 1 << 23) or resource.getrlimit(resource.RLIMIT_RTPRIO)[0] > 0
pool = FsyncPool(2, priority=1)
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
os.write(fd, b"x")
pool.submit(7, fd)
select.select([pool.fileno()], [], [], 10)
print(may, pool.realtime, pool.collect())
pool.stop()
"""

# Drops the right, then runs _CHECK_AND_FSYNC in a fresh program: RLIMIT_RTPRIO 0, and
# CAP_SYS_NICE out of the bounding set (prctl PR_CAPBSET_DROP; refused, and not needed,
# without CAP_SETPCAP), so that even root's exec'd program lacks it.
_WITHOUT_THE_RIGHT = """
import ctypes, os, resource, sys
resource.setrlimit(resource.RLIMIT_RTPRIO, (0, 0))
ctypes.CDLL(None).prctl(24, 23, 0, 0, 0)
os.execv(sys.executable, [sys.executable, "-c", sys.argv[1], sys.argv[2]])
"""


def test_without_the_right_to_a_priority_the_threads_still_fsync(tmp_path: Path) -> None:
    child = subprocess.run(
        [sys.executable, "-c", _WITHOUT_THE_RIGHT, _CHECK_AND_FSYNC, str(tmp_path / "f")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == 0, child.stderr
    # the premise (no right), then: not real-time, and the fsync answered
    assert child.stdout.split(maxsplit=2) == ["False", "False", "[(7, 0)]\n"]
