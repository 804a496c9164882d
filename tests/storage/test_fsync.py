"""fsync_together: every descriptor fsynced, an error raised only once all are done."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest

from oncelog.storage.fsync import fsync_together

FAKE_FD = 1 << 30


def test_fsyncs_every_descriptor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fds = [os.open(tmp_path / f"f{i}", os.O_CREAT | os.O_WRONLY) for i in range(3)]
    real_fsync = os.fsync
    synced: list[int] = []

    def recording(fd: int) -> None:
        real_fsync(fd)
        if fd in fds:  # not another thread's (a broker left running in this process)
            synced.append(fd)

    monkeypatch.setattr(os, "fsync", recording)
    try:
        for count in range(4):  # none, one on the calling thread, several on the pool's
            synced.clear()
            fsync_together(fds[:count])
            assert sorted(synced) == fds[:count]
    finally:
        for fd in fds:
            os.close(fd)


def test_a_real_failure_is_raised(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "f", os.O_CREAT | os.O_WRONLY)
    invalid = FAKE_FD  # above any open-file limit: never an open descriptor
    try:
        for fds in ([invalid, fd], [fd, invalid]):
            with pytest.raises(OSError):
                fsync_together(fds)
    finally:
        os.close(fd)


def test_a_failure_is_raised_only_once_every_fsync_has_ended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The caller may close the descriptors when it returns: none may still be in use."""
    # Numbers above any open-file limit: never a real descriptor of another thread (a broker
    # left running in this process fsyncs its own files meanwhile, really).
    good, bad = [FAKE_FD, FAKE_FD + 1], FAKE_FD + 2
    real_fsync = os.fsync
    ended: list[int] = []

    def slow_or_failing(fd: int) -> None:
        if fd not in (*good, bad):
            real_fsync(fd)
            return
        if fd == bad:
            raise OSError(errno.EIO, "injected")
        time.sleep(0.05)
        ended.append(fd)

    monkeypatch.setattr(os, "fsync", slow_or_failing)
    for bad_at in range(3):  # on the calling thread or on the pool's
        ended.clear()
        fds = list(good)
        fds.insert(bad_at, bad)
        with pytest.raises(OSError, match="injected"):
            fsync_together(fds)
        assert sorted(ended) == good
