"""A broker at a low file-descriptor limit: partitions far beyond it keep working.

The broker runs in a subprocess whose limit is set with `resource.setrlimit` (soft and
hard, so it cannot raise it). Before the segment file cache, every partition held two
descriptors for life: 4,000 partitions created near the limit failed after 2,938 with
"too many open files", the request was never answered, new connections were closed at
once and 2,938 orphan directories stayed behind. Now creating, writing, reading and
reopening eight times more partitions than the limit works, the process never holds more
descriptors than its limit, and connections beyond their share are refused cleanly.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from oncelog.broker.descriptors import plan
from oncelog.client.connection import KafkaConnection
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import Record, build_batch, iter_stored_batches
from oncelog.testing import BrokerProcess

from ..patched_python import python_with
from .raw_requests import FETCH_BY_NAME, create_topics, fetch_body

LIMIT = 256
PARTITIONS = 1_000  # 2,000 files: eight times the limit
TIMEOUT_S = 120.0


LIMITED = f"import resource; resource.setrlimit(resource.RLIMIT_NOFILE, ({LIMIT}, {LIMIT}))"
# Kafka's way, as oncelog had it before the cache: every segment file kept open.
EVERY_FILE_OPEN = """
import dataclasses
from oncelog.broker import descriptors
shared = descriptors.plan
descriptors.plan = lambda limit: dataclasses.replace(shared(limit), segment_files=10**6)
"""


def limited_python(tmp_path: Path, prelude: str = "") -> str:
    """An interpreter whose descriptor limit is LIMIT (soft and hard), `prelude` run too."""
    return python_with(tmp_path, f"{LIMITED}\n{prelude}")


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def produce_everywhere(conn: KafkaConnection, topic: str, round_: int) -> set[int]:
    """One record in every partition, in one request; the error codes answered."""
    now = int(time.time() * 1000)
    response = conn.request(
        ApiKey.PRODUCE,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout": 60_000,
            "topic_data": [
                {
                    "name": topic,
                    "partition_data": [
                        {
                            "index": index,
                            "records": build_batch(
                                [Record(None, b"%d/%d" % (index, round_))], timestamp_ms=now
                            ),
                        }
                        for index in range(PARTITIONS)
                    ],
                }
            ],
        },
    )
    return {p.error_code for t in response.responses for p in t.partition_responses}


def read_partition(conn: KafkaConnection, topic: str, index: int) -> list[int]:
    body = fetch_body(topic)
    body["topics"][0]["partitions"][0]["partition"] = index
    response = conn.request(ApiKey.FETCH, body, version=FETCH_BY_NAME)
    (records,) = [p.records for t in response.responses for p in t.partitions]
    return [h.base_offset for _, h in iter_stored_batches(records)]


@pytest.mark.slow
def test_partitions_far_beyond_the_descriptor_limit(tmp_path: Path) -> None:
    budget = plan(LIMIT)
    broker = BrokerProcess(
        tmp_path / "data", python=limited_python(tmp_path), start_timeout_s=TIMEOUT_S
    )
    with broker:
        with KafkaConnection(broker.bootstrap_servers, timeout_s=TIMEOUT_S) as conn:
            result = create_topics(conn, {"wide": PARTITIONS})["wide"]
            assert result.error_code == ErrorCode.none
            assert produce_everywhere(conn, "wide", 0) == {ErrorCode.none}
            assert produce_everywhere(conn, "wide", 1) == {ErrorCode.none}
            assert open_descriptors(broker.pid) <= LIMIT
            for index in (0, 1, PARTITIONS // 2, PARTITIONS - 1):
                assert read_partition(conn, "wide", index) == [0, 1]

            # Connections: their share is taken, one more is refused, the rest still work.
            held = [
                socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT_S)
                for _ in range(budget.connections - 1)  # with `conn`: the whole share
            ]
            with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as extra:
                assert extra.recv(1) == b"", "closed at once"
            assert read_partition(conn, "wide", 7) == [0, 1]
            assert open_descriptors(broker.pid) <= LIMIT
            for sock in held:
                sock.close()

        broker.restart()  # every partition reopened, lazily
        with KafkaConnection(broker.bootstrap_servers, timeout_s=TIMEOUT_S) as conn:
            assert produce_everywhere(conn, "wide", 2) == {ErrorCode.none}
            wrong = {
                index: offsets
                for index in range(PARTITIONS)
                if (offsets := read_partition(conn, "wide", index)) != [0, 1, 2]
            }
            assert wrong == {}
            assert open_descriptors(broker.pid) <= LIMIT
    output = broker.read_log()
    assert "Too many open files" not in output
    assert f"up to {budget.segment_files} segment files open at once" in output


@pytest.mark.slow
def test_without_the_cache_the_same_partitions_exhaust_the_limit(tmp_path: Path) -> None:
    """The control: the same broker keeping every segment file open fails."""
    broker = BrokerProcess(
        tmp_path / "data",
        python=limited_python(tmp_path, EVERY_FILE_OPEN),
        start_timeout_s=TIMEOUT_S,
    )
    with broker:
        with KafkaConnection(broker.bootstrap_servers, timeout_s=TIMEOUT_S) as conn:
            result = create_topics(conn, {"wide": PARTITIONS})["wide"]
            if result.error_code == ErrorCode.none:  # made, then closed: writing them fails
                assert produce_everywhere(conn, "wide", 0) != {ErrorCode.none}
            else:
                assert result.error_code == ErrorCode.kafka_storage_error
    assert "Too many open files" in broker.read_log()


def test_the_limit_is_shared_between_files_and_connections() -> None:
    assert plan(256).segment_files == plan(256).connections == 96
    assert plan(20_000).segment_files == 9_968
    with pytest.raises(ValueError, match="at least"):
        plan(100)
