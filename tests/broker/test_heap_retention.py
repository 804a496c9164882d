"""The broker process keeps freed heap memory for the next request (broker/heap.py).

Counted in page faults, which the machine's load does not blur: a 1 MiB produce faulted
in about 500 fresh pages on a broker without it (issue 12, 2026-11-25), a handful with it.
Each test has its control, the same thing without the retention.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from oncelog.client.connection import KafkaConnection
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import Record, build_batch
from oncelog.testing import BrokerProcess
from tests.broker.raw_requests import create_topics
from tests.patched_python import python_with

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="glibc and /proc are Linux's"
)

# What a request does to its bytes: a read buffer grown chunk by chunk, the frame copied
# out of it, the batch copied again (as assign_offsets does); every buffer freed after.
REQUEST_COPIES = textwrap.dedent(
    """
    import os, resource, sys
    from oncelog.broker.heap import retain_freed_heap
    if sys.argv[1] == "retain":
        assert retain_freed_heap()
    chunk = os.urandom(64 * 1024)
    def one_request():
        buffer = bytearray()
        for _ in range(16):
            buffer.extend(chunk)
        frame = bytes(buffer)
        del buffer
        return len(bytearray(frame))
    for _ in range(5):
        one_request()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(50):
        one_request()
    print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 50)
    """
)

# Fewer than a sixteenth of a MiB's 256 pages: without the retention every copy of every
# request faults its pages in again (about 480 per request here, 500 in a broker).
MOST_FAULTS_PER_MIB_REQUEST = 64

NO_RETENTION = """
from oncelog.broker import runner
runner.retain_freed_heap = lambda *args, **kwargs: False
"""


def faults_per_request(mode: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", REQUEST_COPIES, mode],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    return float(out.split()[-1])


def test_freed_request_buffers_are_reused_without_page_faults() -> None:
    assert faults_per_request("retain") < MOST_FAULTS_PER_MIB_REQUEST


def test_without_the_retention_every_request_faults_its_pages_in() -> None:
    """The control: glibc's defaults give the memory back after each request."""
    assert faults_per_request("default") > 256


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


def test_the_broker_process_reuses_its_request_buffers(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    assert broker_faults_per_produce(broker) < MOST_FAULTS_PER_MIB_REQUEST


def test_a_broker_without_the_retention_faults_in_every_request(tmp_path: Path) -> None:
    """The control: the same broker with ``retain_freed_heap`` doing nothing."""
    broker = BrokerProcess(tmp_path / "data", python=python_with(tmp_path, NO_RETENTION))
    assert broker_faults_per_produce(broker) > 256
