"""Long recoveries say how far they got: the start, progress lines, and the end."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import oncelog.storage.log as log_module
from oncelog.protocol.record_batch import Record, build_batch, split_batches
from oncelog.storage import LogConfig, PartitionLog


def test_recovery_logs_its_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config = LogConfig(segment_bytes=1024)
    partition_log = PartitionLog.open(tmp_path / "t-0", config, clean_shutdown=True)
    for i in range(40):
        [(header, view)] = split_batches(build_batch([Record(b"k", b"x" * 100)], timestamp_ms=i))
        partition_log.append(view, header, i)
    partition_log.close()
    (tmp_path / "t-0" / log_module.RECOVERY_POINT_FILE).unlink()  # recover every segment
    monkeypatch.setattr(log_module, "RECOVERY_PROGRESS_INTERVAL_S", 0.0)
    with caplog.at_level(logging.INFO, logger="oncelog.storage.log"):
        PartitionLog.open(tmp_path / "t-0", config, clean_shutdown=False).close()
    lines = [r.getMessage() for r in caplog.records]
    assert any("recovering" in line and "segment(s)" in line for line in lines)
    assert sum("recovered" in line and "bytes" in line for line in lines) >= 3
    assert any("recovered 40 batches" in line for line in lines)


def test_a_new_log_has_nothing_to_recover(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A broker that did not stop cleanly still creates new logs without a recovery and
    its checkpoint's fsyncs (a cluster broker creates a topic's replicas on its event loop).
    An existing log after the same unclean stop is recovered (the control)."""
    written: list[str] = []
    real_write = log_module.write_checkpoint
    monkeypatch.setattr(
        log_module,
        "write_checkpoint",
        lambda path, offset: (written.append(path.name), real_write(path, offset)),
    )
    config = LogConfig(segment_bytes=1024)
    with caplog.at_level(logging.INFO, logger="oncelog.storage.log"):
        created = PartitionLog.open(tmp_path / "new-0", config, clean_shutdown=False)
    assert created.log_end_offset == 0 and created.recovery_point == 0
    created.close()
    assert not any("recovering" in r.getMessage() for r in caplog.records)
    assert written == []

    reopened = PartitionLog.open(tmp_path / "new-0", config, clean_shutdown=False)
    reopened.close()
    assert written == [log_module.RECOVERY_POINT_FILE]
