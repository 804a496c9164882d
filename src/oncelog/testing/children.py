"""Signals and waits for the child processes the test helpers start (brokers, ZooKeeper).

Every helper signals the one pid it started, never a process group or a name, and is quiet
when that process already ended.
"""

from __future__ import annotations

import os
import signal
import subprocess
import weakref

from oncelog.testing.lifecycle import Lifecycle

__all__ = [
    "ChildStuckError",
    "ManagedChild",
    "kill_process",
    "reap",
    "send_signal",
    "terminate_process",
    "wait_exit",
]


class ChildStuckError(RuntimeError):
    """A child did not stop when told to (a stuck kernel wait)."""


def send_signal(proc: subprocess.Popen[bytes], signum: int) -> None:
    """Signal this pid only; nothing if it already ended."""
    if proc.poll() is not None:
        return
    try:
        os.kill(proc.pid, signum)
    except ProcessLookupError:
        pass


def wait_exit(
    proc: subprocess.Popen[bytes], timeout_s: float, error: type[Exception] = ChildStuckError
) -> int:
    """The exit status after SIGKILL; `error` if even that is not honoured in time."""
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise error(f"process {proc.pid} survived SIGKILL for {timeout_s} s") from exc


def kill_process(
    proc: subprocess.Popen[bytes], timeout_s: float, error: type[Exception] = ChildStuckError
) -> int:
    """SIGKILL (a crash) and reap: the exit status. SIGCONT first: a paused process must be
    able to die."""
    send_signal(proc, signal.SIGCONT)
    send_signal(proc, signal.SIGKILL)
    return wait_exit(proc, timeout_s, error)


def terminate_process(
    proc: subprocess.Popen[bytes], timeout_s: float, error: type[Exception] = ChildStuckError
) -> tuple[int, bool]:
    """SIGTERM (after SIGCONT, so a paused process can act on it) and wait for the clean
    exit, bounded; past the bound, SIGKILL. The exit status, and whether it was clean (True)
    or needed SIGKILL (False)."""
    send_signal(proc, signal.SIGCONT)
    send_signal(proc, signal.SIGTERM)
    try:
        return proc.wait(timeout_s), True
    except subprocess.TimeoutExpired:
        return kill_process(proc, timeout_s, error), False


def reap(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Last resort (interpreter exit): kill a child a test forgot to stop."""
    if proc.poll() is None:
        send_signal(proc, signal.SIGCONT)  # a paused child must be able to die
        send_signal(proc, signal.SIGKILL)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            pass


class ManagedChild(Lifecycle):
    """One child process at a time: its pid, SIGSTOP/SIGCONT, handing it over (detach), and
    a last-resort reaper should the owner forget to stop it; ``with`` starts and stops it
    (:class:`~oncelog.testing.lifecycle.Lifecycle`). Subclasses start the process and give
    it to :meth:`_adopt`; ``error`` and ``what`` shape their messages."""

    error: type[Exception] = RuntimeError
    what = "the process"
    stop_timeout_s: float

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._reaper: weakref.finalize | None = None

    @property
    def pid(self) -> int:
        return self._running_process().pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def pause(self) -> None:
        """SIGSTOP: the process freezes (no I/O, no ZooKeeper heartbeats) until :meth:`resume`."""
        send_signal(self._running_process(), signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        send_signal(self._running_process(), signal.SIGCONT)

    def detach(self) -> int:
        """Stop managing the running process and leave it running (``oncelog cluster
        start`` hands its processes over this way); returns its pid."""
        proc = self._take_process()
        if proc is None:
            raise self.error(f"{self.what} is not running")
        return proc.pid

    def _adopt(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc
        self._reaper = weakref.finalize(self, reap, proc, self.stop_timeout_s)

    def _running_process(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            raise self.error(f"{self.what} is not running")
        return self._proc

    def _take_process(self) -> subprocess.Popen[bytes] | None:
        proc, self._proc = self._proc, None
        if self._reaper is not None:
            self._reaper.detach()
            self._reaper = None
        return proc
