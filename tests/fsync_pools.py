"""Stand-ins for the flusher's GIL-free fsync pool (``oncelog.broker._fsync_pool``), with
its interface (``fileno``, ``submit``, ``collect``, ``stop``), for tests that steer the
broker's fsyncs.

``PythonFsyncPool`` fsyncs on Python threads through the log module's ``fsync_together``,
looked up at each call: a fault a test injects there or into ``os.fsync`` reaches the
broker's flushes, which the C threads would not see. ``HeldFsyncPool`` holds every fsync
until the test lets it finish, or fail. ``policies_of_new_threads`` and ``may_run_real_time``
tell what scheduling the real pool's threads got and could get.
"""

from __future__ import annotations

import errno
import functools
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import oncelog.storage.log as log_module


class _Answers:
    """Outcomes waiting to be collected, and the pipe that tells the loop about them."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        self._lock = threading.Lock()
        self._done: list[tuple[int, int]] = []

    def fileno(self) -> int:
        return self._read

    def answer(self, token: int, error: int) -> None:
        with self._lock:
            self._done.append((token, error))
        os.write(self._write, b"x")

    def collect(self) -> list[tuple[int, int]]:
        try:
            os.read(self._read, 4096)
        except BlockingIOError:
            pass
        with self._lock:
            done, self._done = self._done, []
        return done

    def close(self) -> None:
        os.close(self._read)
        os.close(self._write)


class PythonFsyncPool(_Answers):
    realtime = False  # Python threads at the normal priority, whatever was asked

    def __init__(self, threads: int, priority: int = 0) -> None:
        super().__init__()
        self._threads = ThreadPoolExecutor(threads, thread_name_prefix="test-fsync")

    def submit(self, token: int, fd: int) -> None:
        self._threads.submit(self._fsync, token, fd)

    def _fsync(self, token: int, fd: int) -> None:
        try:
            log_module.fsync_together([fd])
        except OSError as exc:
            self.answer(token, exc.errno or errno.EIO)
        else:
            self.answer(token, 0)

    def stop(self) -> None:
        self._threads.shutdown(wait=True)
        self.close()


class HeldFsyncPool(_Answers):
    """Each submitted fsync waits in ``held`` until ``finish`` (which fsyncs it for real,
    or answers ``error``); ``submitted`` is set whenever one arrives."""

    def __init__(self, _threads: int = 1) -> None:  # one queue, whatever the count
        super().__init__()
        self.held: list[tuple[int, int]] = []
        self.submitted = threading.Event()

    def submit(self, token: int, fd: int) -> None:
        self.held.append((token, fd))
        self.submitted.set()

    def finish(self, error: int = 0) -> None:
        """Let the oldest held fsync end (with errno ``error`` instead, if given)."""
        token, fd = self.held.pop(0)
        if not error:
            os.fsync(fd)
        self.answer(token, error)

    def stop(self) -> None:
        while self.held:
            self.finish()
        self.close()


def fsync_threads() -> dict[int, int]:
    """The GIL-free pools' threads in this process (any pool's: a broker another test
    started may have one), by thread id, with their scheduling policy."""
    threads = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            if (task / "comm").read_text().strip() == "fsync_pool":
                threads[int(task.name)] = os.sched_getscheduler(int(task.name))
        except (FileNotFoundError, ProcessLookupError):  # a thread that just ended
            continue
    return threads


def policies_of_new_threads(before: dict[int, int]) -> set[int]:
    """The scheduling policies of the fsync threads started since ``before`` was taken."""
    return {policy for tid, policy in fsync_threads().items() if tid not in before}


@functools.cache
def may_run_real_time() -> bool:
    """Whether a thread of this process may take SCHED_FIFO priority 1, tried in a child
    process (not in this one: a Python thread at a real-time priority would hold the GIL
    at it). Tried, not read from CAP_SYS_NICE or RLIMIT_RTPRIO: a cgroup without a
    real-time budget refuses it even to root."""
    attempt = "import os; os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))"
    return subprocess.run([sys.executable, "-c", attempt], capture_output=True).returncode == 0
