"""DescribeLogDirs (key 35), the API behind the byte counts of `oncelog topics describe`."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from oncelog.client.connection import KafkaConnection
from oncelog.protocol.api_versions import ApiKey
from oncelog.testing import EmbeddedBroker


@pytest.fixture(scope="module")
def sized(broker: EmbeddedBroker) -> dict[tuple[str, int], int]:
    """Two topics with data; the expected size of each partition, read from disk."""
    with KafkaConnection(broker.bootstrap_servers) as conn:
        for name in ("dirs-a", "dirs-b"):
            conn.request(
                ApiKey.CREATE_TOPICS,
                {
                    "topics": [
                        {
                            "name": name,
                            "num_partitions": 2,
                            "replication_factor": 1,
                            "assignments": [],
                            "configs": [],
                        }
                    ],
                    "timeout": 5000,
                },
            )
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    producer.produce("dirs-a", b"x" * 100, partition=1)
    producer.produce("dirs-b", b"y", partition=0)
    assert producer.flush(10) == 0
    return {
        (t, p): sum(f.stat().st_size for f in (broker.data_dir / f"{t}-{p}").glob("*.log"))
        for t in ("dirs-a", "dirs-b")
        for p in (0, 1)
    }


def _sizes(response) -> dict[tuple[str, int], int]:
    (result,) = response.results
    return {
        (t.name, p.partition_index): p.partition_size for t in result.topics for p in t.partitions
    }


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_sizes_of_requested_partitions(broker: EmbeddedBroker, sized, version: int) -> None:
    with KafkaConnection(broker.bootstrap_servers) as conn:
        response = conn.request(
            ApiKey.DESCRIBE_LOG_DIRS,
            {
                "topics": [
                    {"topic": "dirs-a", "partitions": [0, 1, 9]},  # 9 does not exist: left out
                    {"topic": "no-such-topic", "partitions": [0]},
                ]
            },
            version=version,
        )
    (result,) = response.results
    assert result.error_code == 0 and result.log_dir == str(broker.data_dir.resolve())
    assert _sizes(response) == {("dirs-a", 0): 0, ("dirs-a", 1): sized[("dirs-a", 1)]}
    assert sized[("dirs-a", 1)] > 100
    assert all(
        not p.is_future_key and p.offset_lag == 0 for t in result.topics for p in t.partitions
    )
    if version >= 4:
        assert result.total_bytes >= result.usable_bytes > 0


def test_null_topics_means_every_partition(broker: EmbeddedBroker, sized) -> None:
    with KafkaConnection(broker.bootstrap_servers) as conn:
        response = conn.request(ApiKey.DESCRIBE_LOG_DIRS, {"topics": None})
    assert {k: v for k, v in _sizes(response).items() if k[0].startswith("dirs-")} == sized


def test_kafka_python_admin_reads_it(broker: EmbeddedBroker, sized) -> None:
    """A real client's DescribeLogDirs parses our answer (the reference, not our own codec)."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        (answer,) = admin.describe_log_dirs()
    finally:
        admin.close()
    (log_dir,) = answer["log_dirs"]
    found = {
        (t["name"], p["partition_index"]): p["partition_size"]
        for t in log_dir["topics"]
        for p in t["partitions"]
    }
    assert {k: v for k, v in found.items() if k[0].startswith("dirs-")} == sized
