"""Raw protocol requests the broker tests make over one KafkaConnection (no client library):
each returns the decoded answer, the caller asserts on it."""

from __future__ import annotations

from typing import Any

from oncelog.client.connection import KafkaConnection
from oncelog.protocol.api_versions import ApiKey

FETCH_BY_NAME = 12  # the last Fetch version naming topics (13+ use topic ids)


def create_topics_body(partitions: dict[str, int]) -> dict[str, Any]:
    return {
        "topics": [
            {
                "name": name,
                "num_partitions": count,
                "replication_factor": 1,
                "assignments": [],
                "configs": [],
            }
            for name, count in partitions.items()
        ],
        "timeout": 30_000,
        "validate_only": False,
    }


def create_topics(conn: KafkaConnection, partitions: dict[str, int]) -> dict[str, Any]:
    """CreateTopics for {name: partition count}; {name: result}."""
    response = conn.request(ApiKey.CREATE_TOPICS, create_topics_body(partitions))
    return {t.name: t for t in response.topics}


def delete_topic(conn: KafkaConnection, name: str) -> Any:
    response = conn.request(
        ApiKey.DELETE_TOPICS,
        {"topics": [{"name": name, "topic_id": None}], "topic_names": [name], "timeout": 30_000},
    )
    (result,) = response.responses
    return result


def metadata(conn: KafkaConnection, name: str) -> Any:
    """Metadata for one topic (auto-creation allowed); the topic's entry."""
    response = conn.request(
        ApiKey.METADATA,
        {
            "topics": [{"name": name, "topic_id": None}],
            "allow_auto_topic_creation": True,
            "include_topic_authorized_operations": False,
            "include_cluster_authorized_operations": False,
        },
    )
    (topic,) = response.topics
    return topic


def produce(conn: KafkaConnection, topic: str, partition: int, records: bytes) -> Any:
    """An acks=all Produce of one batch; the partition's answer."""
    return produce_each(conn, topic, {partition: records})[partition]


def produce_each(conn: KafkaConnection, topic: str, batches: dict[int, bytes]) -> dict[int, Any]:
    """One acks=all Produce of a batch per partition; each partition's answer."""
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
                        {"index": index, "records": records} for index, records in batches.items()
                    ],
                }
            ],
        },
    )
    (answers,) = [t.partition_responses for t in response.responses]
    return {answer.index: answer for answer in answers}


def fetch_body(
    topic: str, max_wait_ms: int = 0, max_bytes: int = 1 << 20, offset: int = 0
) -> dict[str, Any]:
    """A Fetch (v12 layout) of partition 0 of `topic` from `offset`."""
    return {
        "replica_id": -1,
        "max_wait": max_wait_ms,
        "min_bytes": 1,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "topic_id": None,
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": max_bytes,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
