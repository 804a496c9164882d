"""A failed fsync takes its log offline until a restart recovers it ("fsyncgate").

After a failed fsync the kernel may have dropped the dirty pages and marked them clean, so
the next fsync can succeed without them ever reaching the disk. A log that retried would
call those records durable, and acknowledge an idempotent producer's retry of the very
batch whose fsync failed: an acknowledged write a crash loses. Kafka takes the log
directory offline; oncelog takes the log offline (KAFKA_STORAGE_ERROR) until a restart.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pytest

import oncelog.storage.log as log_module
from oncelog.broker.broker import CLEAN_SHUTDOWN_MARKER
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.record_batch import Record, build_batch, split_batches
from oncelog.storage import LogConfig, PartitionLog
from oncelog.testing.embedded import EmbeddedBroker

from .failures import file_of
from .isolation import fresh_file_cache


class FailingFsync:
    """``fsync_together`` of the log module, failing while ``failing`` is set."""

    def __init__(self) -> None:
        self.failing = False
        self.calls = 0
        self._real = log_module.fsync_together

    def __call__(self, fds: list[int]) -> None:
        self.calls += 1
        if self.failing:
            raise OSError(errno.EIO, "Input/output error (injected)")
        self._real(fds)


@pytest.fixture
def fsync(monkeypatch: pytest.MonkeyPatch, fsyncs_in_python: None) -> Iterator[FailingFsync]:
    """Failing while the test says so, for a log and for a broker's flushes alike."""
    failing = FailingFsync()
    monkeypatch.setattr(log_module, "fsync_together", failing)
    yield failing


def _append(log: PartitionLog, value: bytes) -> int:
    [(header, view)] = split_batches(build_batch([Record(b"k", value)], timestamp_ms=1))
    return log.append(view, header, 0).last_offset


def test_after_a_failed_fsync_nothing_more_is_durable_or_appended(
    tmp_path: Path, fsync: FailingFsync
) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), clean_shutdown=True)
    _append(log, b"durable")
    assert log.flush() == 1
    _append(log, b"maybe lost")
    fsync.failing = True
    with pytest.raises(OSError):
        log.flush()
    fsync.failing = False  # the disk answers again: a retried fsync would now succeed
    calls = fsync.calls
    with pytest.raises(OSError, match="offline until the broker restarts"):
        log.flush()
    assert fsync.calls == calls, "the failed log fsynced again"
    assert log.failed and log.recovery_point == 1
    with pytest.raises(KafkaError) as refused:
        _append(log, b"after")
    assert refused.value.code == ErrorCode.kafka_storage_error
    log.close()  # no flush, no checkpoint: the next start recovers from the last one
    reopened = PartitionLog.open(tmp_path / "t-0", LogConfig(), clean_shutdown=False)
    assert not reopened.failed and reopened.log_end_offset == 2  # recovered from the log start
    reopened.close()


def test_an_acks_all_retry_after_a_failed_fsync_is_not_acknowledged(
    tmp_path: Path, fsync: FailingFsync
) -> None:
    """An idempotent producer's batch meets a failed fsync; the disk then answers again.
    Its retry must not be acknowledged, and the broker's stop must leave the next start
    to recover the log (no clean-shutdown marker)."""
    with EmbeddedBroker({"num.partitions": "1"}, data_dir=tmp_path) as broker:
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "enable.idempotence": True,
                "acks": "all",
                "message.timeout.ms": 4000,
                "retry.backoff.ms": 100,
            }
        )
        producer.produce("doomed", b"first")
        assert producer.flush(30) == 0  # the topic exists and its first batch is durable
        reports: list[confluent_kafka.KafkaError | None] = []
        fsync.failing, before = True, fsync.calls
        producer.produce("doomed", b"second", on_delivery=lambda err, _msg: reports.append(err))
        deadline = time.monotonic() + 10
        while fsync.calls == before and time.monotonic() < deadline:  # until one has failed
            producer.poll(0.05)
        assert fsync.calls > before, "the batch was never fsynced"
        fsync.failing = False
        assert producer.flush(30) == 0
        assert len(reports) == 1 and reports[0] is not None, f"acknowledged: {reports}"
        assert reports[0].code() in (
            confluent_kafka.KafkaError.KAFKA_STORAGE_ERROR,
            confluent_kafka.KafkaError._MSG_TIMED_OUT,
        ), reports[0]
    assert not (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()


def test_a_failed_fsync_at_an_eviction_takes_the_log_offline_at_its_next_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file cache fsyncs a written file before it closes the descriptor for another;
    when that fsync fails, the log's next flush is refused, and the log goes offline. Left
    online, the flush after it would find the segment claimed clean and call its data
    durable without any fsync having succeeded. The test's own cache, and fsyncs refused
    under its directory only: a worker's session broker keeps flushing its own logs."""
    cache = fresh_file_cache(monkeypatch)
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), clean_shutdown=True)
    _append(log, b"durable")
    assert log.flush() == 1
    _append(log, b"its fsync fails at the eviction")
    real_fsync = os.fsync

    def failing(fd: int) -> None:
        path = Path(file_of(fd))
        if path.suffix == ".log" and tmp_path in path.parents:
            raise OSError(errno.EIO, "Input/output error (injected)")
        real_fsync(fd)

    other = cache.file(tmp_path / "other", os.O_RDWR | os.O_CREAT)
    with monkeypatch.context() as disk:
        disk.setattr(os, "fsync", failing)
        disk.setattr(cache, "capacity", 1)
        with cache.using(other):  # closes the log's descriptors to make room
            pass
    # the disk answers again, the cache holds as many as before
    with pytest.raises(OSError, match="an earlier fsync failed"):
        log.flush()
    assert log.failed
    with pytest.raises(OSError, match="offline"):
        log.flush()
    assert log.recovery_point == 1
    cache.retire(other)
    log.close()
