"""A produce whose log write fails answers that partition KAFKA_STORAGE_ERROR.

The fault is a real system-call failure inside an in-process broker: ``os.write`` is
wrapped so that, once armed, a write to partition 0's segment file fails with ENOSPC
(the wrapper finds the file through /proc/self/fd). Kafka answers such a partition
KAFKA_STORAGE_ERROR (``ReplicaManager.appendToLocalLog``) and the request's other
partitions normally. Before, the OSError escaped the handler and, Produce having no
top-level error field, the server closed the client's connection: every partition of the
request, and every request pipelined behind it, went unanswered.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest

from oncelog.client.connection import KafkaConnection
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import Record, build_batch
from oncelog.testing import EmbeddedBroker

from ..storage.failures import file_of
from .raw_requests import create_topics, produce, produce_each

TOPIC = "storage-failure"
TIMEOUT_S = 10.0


def _batch(value: bytes) -> bytes:
    return build_batch([Record(None, value)], timestamp_ms=1_700_000_000_000)


def _is_partition_0_segment(fd: int) -> bool:
    target = file_of(fd)
    return f"/{TOPIC}-0/" in target and target.endswith(".log")


class WriteFaults:
    """``armed = n``: the n-th write to partition 0's segment from now fails (ENOSPC)."""

    def __init__(self) -> None:
        self.armed = 0
        self.fired = 0

    def fails(self, fd: int) -> bool:
        if not self.armed or not _is_partition_0_segment(fd):
            return False
        self.armed -= 1
        if self.armed:
            return False
        self.fired += 1
        return True


@pytest.fixture
def faults(monkeypatch: pytest.MonkeyPatch) -> WriteFaults:
    armed = WriteFaults()
    real_write = os.write

    def write(fd: int, data: Any) -> int:
        if armed.fails(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    return armed


@pytest.fixture
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as embedded:
        yield embedded


def test_a_failed_write_answers_its_partition_and_keeps_the_connection(
    broker: EmbeddedBroker, faults: WriteFaults
) -> None:
    with KafkaConnection(broker.bootstrap_servers, timeout_s=TIMEOUT_S) as conn:
        assert create_topics(conn, {TOPIC: 2})[TOPIC].error_code == ErrorCode.none
        assert produce(conn, TOPIC, 0, _batch(b"before")).error_code == ErrorCode.none
        faults.armed = 1
        answers = produce_each(conn, TOPIC, {0: _batch(b"during"), 1: _batch(b"during")})
        assert faults.fired == 1
        assert answers[0].error_code == ErrorCode.kafka_storage_error
        assert answers[1].error_code == ErrorCode.none
        # The same connection goes on, and partition 0 takes the retry at the offset the
        # failed batch would have had (the torn write was cut off).
        retry = produce(conn, TOPIC, 0, _batch(b"retry"))
        assert (retry.error_code, retry.base_offset) == (ErrorCode.none, 1)
        assert produce(conn, TOPIC, 1, _batch(b"after")).base_offset == 1


def _init_producer_id(conn: KafkaConnection) -> Any:
    answer = conn.request(
        ApiKey.INIT_PRODUCER_ID,
        {"transactional_id": None, "transaction_timeout": 60_000},
        version=2,
    )
    assert answer.error_code == ErrorCode.none
    return answer


def _idempotent_batch(pid: Any, sequence: int) -> bytes:
    return build_batch(
        [Record(None, b"seq-%d" % sequence)],
        producer_id=pid.producer_id,
        producer_epoch=pid.producer_epoch,
        base_sequence=sequence,
        timestamp_ms=1_700_000_000_000,
    )


def test_an_idempotent_batch_whose_write_failed_is_appended_by_its_retry(
    broker: EmbeddedBroker, faults: WriteFaults, caplog: pytest.LogCaptureFixture
) -> None:
    """The batch the producer retries with the same sequence after KAFKA_STORAGE_ERROR is
    appended where the failed one would have been: neither a duplicate nor out of order
    (the producer state is committed only after a successful write). While the write keeps
    failing it is logged once, then again after an append has succeeded in between."""
    with KafkaConnection(broker.bootstrap_servers, timeout_s=TIMEOUT_S) as conn:
        assert create_topics(conn, {TOPIC: 1})[TOPIC].error_code == ErrorCode.none
        pid = _init_producer_id(conn)

        def batch(sequence: int) -> bytes:
            return _idempotent_batch(pid, sequence)

        assert produce(conn, TOPIC, 0, batch(0)).base_offset == 0
        caplog.set_level(logging.DEBUG, logger="oncelog.broker")
        for _ in range(2):  # the disk stays full: the retry fails too
            faults.armed = 1
            failed = produce(conn, TOPIC, 0, batch(1))
            assert failed.error_code == ErrorCode.kafka_storage_error
        retry = produce(conn, TOPIC, 0, batch(1))
        assert (retry.error_code, retry.base_offset) == (ErrorCode.none, 1)
        faults.armed = 1
        assert produce(conn, TOPIC, 0, batch(2)).error_code == ErrorCode.kafka_storage_error
        assert produce(conn, TOPIC, 0, batch(2)).base_offset == 2
    failures = [r.levelno for r in caplog.records if "the log write failed" in r.getMessage()]
    assert failures == [logging.WARNING, logging.DEBUG, logging.WARNING]


def test_a_failed_fsync_is_logged_once_not_at_each_retry(
    fsyncs_in_python: None,
    broker: EmbeddedBroker,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An idempotent batch appended but not made durable (EIO from its fsync: the log goes
    offline until a restart) is a duplicate when the producer retries it; each retry waits
    for a durability the offline log refuses at once. The failed fsync is logged at ERROR,
    the refusals of the retries at DEBUG (before: an ERROR per retry)."""
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if _is_partition_0_segment(fd):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real_fsync(fd)

    with KafkaConnection(broker.bootstrap_servers, timeout_s=TIMEOUT_S) as conn:
        assert create_topics(conn, {TOPIC: 1})[TOPIC].error_code == ErrorCode.none
        pid = _init_producer_id(conn)
        assert produce(conn, TOPIC, 0, _idempotent_batch(pid, 0)).base_offset == 0
        caplog.set_level(logging.DEBUG, logger="oncelog.broker.durability")
        monkeypatch.setattr(os, "fsync", fsync)
        for _ in range(4):  # the first attempt and three retries
            answer = produce(conn, TOPIC, 0, _idempotent_batch(pid, 1))
            assert answer.error_code == ErrorCode.kafka_storage_error
    failures = [r.levelno for r in caplog.records if r.getMessage().startswith("fsync of")]
    assert failures == [logging.ERROR, logging.DEBUG, logging.DEBUG, logging.DEBUG]
