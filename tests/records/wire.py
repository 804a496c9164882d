"""Raw protocol requests the record tests make (one KafkaConnection, no client library)."""

from __future__ import annotations

import itertools
import time

from oncelog.client.connection import KafkaConnection
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import iter_stored_batches

_topic_numbers = itertools.count()


def now_ms() -> int:
    return int(time.time() * 1000)


def create_topic(conn: KafkaConnection, configs: dict[str, str] | None = None) -> str:
    name = f"validation-{next(_topic_numbers)}"
    response = conn.request(
        ApiKey.CREATE_TOPICS,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": 2,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
                }
            ],
            "timeout": 5000,
            "validate_only": False,
        },
    )
    assert response.topics[0].error_code == ErrorCode.none, response
    return name


def produce(conn: KafkaConnection, topic: str, partitions: dict[int, bytes]) -> dict[int, object]:
    response = conn.request(
        ApiKey.PRODUCE,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout": 5000,
            "topic_data": [
                {
                    "name": topic,
                    "partition_data": [
                        {"index": index, "records": records}
                        for index, records in partitions.items()
                    ],
                }
            ],
        },
    )
    return {p.index: p for p in response.responses[0].partition_responses}


def offset_for_time(conn: KafkaConnection, topic: str, partition: int, ts: int) -> tuple[int, int]:
    """ListOffsets by timestamp: (offset, timestamp) as the broker answers."""
    response = conn.request(
        ApiKey.LIST_OFFSETS,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "timeout": 10_000,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": partition, "current_leader_epoch": -1, "timestamp": ts}
                    ],
                }
            ],
        },
    )
    answer = response.topics[0].partitions[0]
    assert answer.error_code == ErrorCode.none, answer
    return answer.offset, answer.timestamp


def fetch_batches(conn: KafkaConnection, topic: str, partition: int = 0) -> list[bytes]:
    """Every stored batch of the partition (up to 4 MiB), as the broker serves them."""
    response = conn.request(
        ApiKey.FETCH,
        {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 22,
            "isolation_level": 0,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {"partition": partition, "fetch_offset": 0, "partition_max_bytes": 1 << 22}
                    ],
                }
            ],
        },
        version=4,
    )
    records = response.responses[0].partitions[0].records or b""
    return [records[pos : pos + h.size] for pos, h in iter_stored_batches(records)]
