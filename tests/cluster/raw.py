"""Raw Produce, Fetch and ListOffsets against one broker, for tests that must see each
error code a broker answers (real clients retry them away)."""

from __future__ import annotations

import time
from typing import Any

from oncelog.client.connection import KafkaConnection
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import BatchHeader, Record, build_batch, iter_stored_batches
from oncelog.testing.cluster import LocalCluster

from ..broker.raw_requests import metadata


def produce(
    conn: KafkaConnection, topic: str, values: list[bytes], *, acks: int = -1, partition: int = 0
) -> tuple[ErrorCode, int]:
    """(error code, base offset) of one batch of ``values``."""
    batch = build_batch([Record(None, v) for v in values], timestamp_ms=int(time.time() * 1000))
    answer = conn.request(
        ApiKey.PRODUCE,
        {
            "transactional_id": None,
            "acks": acks,
            "timeout": 10_000,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": batch}]}
            ],
        },
    )
    (result,) = answer.responses[0].partition_responses
    return result.error_code, result.base_offset


def fetch(
    conn: KafkaConnection, topic: str, offset: int, *, partition: int = 0, leader_epoch: int = -1
) -> tuple[ErrorCode, int, int]:
    """(error code, high watermark, records returned) reading as a consumer."""
    result = _fetch_partition(conn, topic, offset, partition, leader_epoch)
    records = result.records or b""
    count = sum(h.record_count for _, h in iter_stored_batches(records))
    return result.error_code, result.high_watermark, count


def fetch_batches(
    conn: KafkaConnection, topic: str, offset: int, *, partition: int = 0
) -> list[tuple[BatchHeader, bytes]]:
    """The batches a consumer fetch from ``offset`` returns, headers and bytes as stored."""
    result = _fetch_partition(conn, topic, offset, partition, -1)
    assert result.error_code == ErrorCode.none, result.error_code
    records = bytes(result.records or b"")
    return [
        (header, records[position : position + header.size])
        for position, header in iter_stored_batches(records)
    ]


def _fetch_partition(
    conn: KafkaConnection, topic: str, offset: int, partition: int, leader_epoch: int
) -> Any:
    """One partition's answer to a consumer Fetch (v12) from ``offset``."""
    answer = conn.request(
        ApiKey.FETCH,
        {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": partition,
                            "current_leader_epoch": leader_epoch,
                            "fetch_offset": offset,
                            "log_start_offset": -1,
                            "partition_max_bytes": 1 << 20,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
        version=12,
    )
    return answer.responses[0].partitions[0]


def wait_for_leaders_isr(
    cluster: LocalCluster, leader: int, topic: str, isr: list[int], timeout_s: float = 15
) -> None:
    """Until the leader's own Metadata answer shows ``isr`` for partition 0 of ``topic``.

    ZooKeeper shows a controller's ISR change a moment before the leader's watch delivers
    it: until then the leader acts on the ISR it had (min.insync.replicas, what may commit).
    Its Metadata answer comes from the same copy of ZooKeeper its replicas act on."""
    deadline = time.monotonic() + timeout_s
    with KafkaConnection(cluster.address(leader), security=cluster.security) as conn:
        while True:
            if sorted(metadata(conn, topic).partitions[0].isr_nodes) == sorted(isr):
                return
            assert time.monotonic() < deadline, f"broker {leader} never saw ISR {isr}"
            time.sleep(0.05)
