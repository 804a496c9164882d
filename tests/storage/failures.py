"""Storage faults injected into the log module, for tests of what a failed log does."""

from __future__ import annotations

import errno
import os

import pytest

import oncelog.storage.log as log_module
from oncelog.storage import PartitionLog


def fail_with_one_fsync(partition_log: PartitionLog) -> None:
    """Take the log offline with one failed fsync (EIO); the disk then answers again, so
    whatever the log does next would succeed were it not offline."""

    def eio(fds: list[int]) -> None:
        raise OSError(errno.EIO, "Input/output error (injected)")

    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(log_module, "fsync_together", eio)
        with pytest.raises(OSError):
            partition_log.flush()
    assert partition_log.failed


def file_of(fd: int) -> str:
    """The path a descriptor is open on, for a fault injected into the files it names
    (through /proc/self/fd); "" if it is not open."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""
