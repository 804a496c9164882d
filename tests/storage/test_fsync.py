"""fsync_together: every descriptor fsynced, an error raised only once all are done."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oncelog.storage.fsync import fsync_together


def test_fsyncs_every_descriptor_and_reports_a_failure_from_any_of_them(tmp_path: Path) -> None:
    fds = [os.open(tmp_path / f"f{i}", os.O_CREAT | os.O_WRONLY) for i in range(3)]
    invalid = 1 << 30  # above any open-file limit: never an open descriptor
    try:
        fsync_together([])
        fsync_together(fds[:1])
        fsync_together(fds)
        for bad_at in range(3):  # on the calling thread or on the pool's
            with pytest.raises(OSError):
                fsync_together([*fds[:bad_at], invalid, *fds[bad_at:]])
    finally:
        for fd in fds:
            os.close(fd)
