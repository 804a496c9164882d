"""The broker process keeps freed heap memory for the next request (broker/heap.py).

Counted in page faults, which the machine's load does not blur: a 1 MiB produce faulted
in 500-700 fresh pages on a broker without it (main 79e8fef, and this broker with it
patched out), 0-14 with it (issue 12, 2026-11-25). Each test has its control, the same
thing without the retention; the controls assume transparent huge pages off or
``madvise`` (with ``always`` a grown heap may be huge-page backed and fault less).
"""

from __future__ import annotations

import logging
import os
import platform
import sys
import time
from pathlib import Path

import pytest

from oncelog.broker.heap import BROKER_HEAP, HeapRetention, retain_freed_heap, retention_for
from oncelog.client.connection import KafkaConnection
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import Record, build_batch
from oncelog.testing import BrokerProcess
from tests.broker.raw_requests import create_topics
from tests.patched_python import python_with

glibc_linux = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="mallopt is glibc's, /proc Linux's",
)

# Fewer than a sixteenth of a MiB's 256 pages: without the retention every copy of every
# request faults its pages in again (500-700 per 1 MiB produce).
MOST_FAULTS_PER_MIB_REQUEST = 64

# The broker command imports heap's names when it runs: patched here, it finds none.
NO_RETENTION = """
from oncelog.broker import heap
heap.retain_freed_heap = lambda *args, **kwargs: False
"""


def minor_faults(pid: int) -> int:
    """The process's minor page faults so far (field 10 of /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[7])


def broker_faults_per_produce(broker: BrokerProcess) -> float:
    """Minor page faults of the broker per 1 MiB produce request (acks=1), after warm-up."""
    with broker, KafkaConnection(broker.bootstrap_servers) as conn:
        assert create_topics(conn, {"big": 1})["big"].error_code == ErrorCode.none
        batch = build_batch(
            [Record(None, os.urandom(1000)) for _ in range(1000)],
            timestamp_ms=int(time.time() * 1000),
        )
        body = {
            "transactional_id": None,
            "acks": 1,
            "timeout": 10_000,
            "topic_data": [{"name": "big", "partition_data": [{"index": 0, "records": batch}]}],
        }

        def produce() -> None:
            answer = conn.request(ApiKey.PRODUCE, body)
            assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none

        for _ in range(5):
            produce()
        pid = broker.pid
        assert pid is not None
        before = minor_faults(pid)
        for _ in range(20):
            produce()
        return (minor_faults(pid) - before) / 20


@glibc_linux
def test_the_broker_process_reuses_its_request_buffers(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    assert broker_faults_per_produce(broker) < MOST_FAULTS_PER_MIB_REQUEST


@glibc_linux
def test_a_broker_without_the_retention_faults_in_every_request(tmp_path: Path) -> None:
    """The control: the same broker with ``retain_freed_heap`` doing nothing."""
    broker = BrokerProcess(tmp_path / "data", python=python_with(tmp_path, NO_RETENTION))
    assert broker_faults_per_produce(broker) > 256


# -- the decisions, in this process (nothing applied to it) ----------------------------


@pytest.mark.parametrize(
    "environ",
    [
        {"MALLOC_TRIM_THRESHOLD_": "1000000"},
        {"MALLOC_MMAP_THRESHOLD_": "1000000"},
        {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1000000"},
    ],
)
def test_an_operators_malloc_settings_are_kept(environ: dict[str, str]) -> None:
    assert retention_for(environ) is None
    assert retain_freed_heap(None, mallopt=lambda option, value: 1) is False


def test_other_environments_get_the_brokers_retention() -> None:
    assert retention_for({"GLIBC_TUNABLES": "glibc.rtld.nns=2", "PATH": "/bin"}) == BROKER_HEAP


def test_both_thresholds_are_set() -> None:
    calls: list[tuple[int, int]] = []

    def mallopt(option: int, value: int) -> int:
        calls.append((option, value))
        return 1

    assert retain_freed_heap(HeapRetention(4, 32), mallopt=mallopt) is True
    assert sorted(calls) == [(-3, 4), (-1, 32)]  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD


def test_a_refused_threshold_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="oncelog.broker.heap"):
        assert retain_freed_heap(BROKER_HEAP, mallopt=lambda option, value: 0) is False
    assert "refused the heap's mmap threshold" in caplog.text


def test_without_glibc_nothing_is_applied(monkeypatch: pytest.MonkeyPatch) -> None:
    from oncelog.broker import heap

    monkeypatch.setattr(heap, "_glibc_mallopt", lambda: None)
    assert retain_freed_heap(BROKER_HEAP) is False
