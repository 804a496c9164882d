"""kafka-python (pure Python client) against oncelog."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.errors import TopicAlreadyExistsError

from oncelog.testing import EmbeddedBroker

TIMEOUT_S = 20
BASE_TIMESTAMP = 1_700_000_000_000


def produce(
    bootstrap: str, topic: str, count: int, partitions: int, acks: int | str
) -> list[tuple[int, int]]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=acks, linger_ms=5)
    try:
        futures = [
            producer.send(
                topic,
                key=b"k%d" % i,
                value=b"value-%d" % i,
                partition=i % partitions,
                timestamp_ms=BASE_TIMESTAMP + i,
            )
            for i in range(count)
        ]
        producer.flush(TIMEOUT_S)
        metadata = [f.get(TIMEOUT_S) for f in futures]
    finally:
        producer.close(TIMEOUT_S)
    return [(m.partition, m.offset) for m in metadata]


def consume_all(
    bootstrap: str, topic: str, partitions: int, expected: int
) -> list[tuple[int, int, bytes]]:
    """Read from the beginning until `expected` records came, then check nothing more comes."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    got: list[tuple[int, int, bytes]] = []
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend((r.partition, r.offset, r.value) for r in records)
        assert consumer.poll(timeout_ms=300) == {}
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_produce_with_each_acks_then_consume_from_beginning(
    oncelog_session_broker: EmbeddedBroker, topic_name: str, acks: int | str
) -> None:
    bootstrap = oncelog_session_broker.bootstrap_servers
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic_name, 2, 1)])
    admin.close()
    acked = produce(bootstrap, topic_name, 1000, 2, acks)
    got = consume_all(bootstrap, topic_name, 2, 1000)
    assert sorted(v for _, _, v in got) == sorted(b"value-%d" % i for i in range(1000))
    for partition in range(2):
        assert [o for p, o, _ in got if p == partition] == list(range(500))
    if acks != 0:
        assert sorted(acked) == sorted((p, o) for p, o, _ in got)


def test_list_offsets_by_timestamp(oncelog_session_broker: EmbeddedBroker, topic_name: str) -> None:
    bootstrap = oncelog_session_broker.bootstrap_servers
    produce(bootstrap, topic_name, 300, 1, "all")  # auto-created
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tp = TopicPartition(topic_name, 0)
        found = consumer.offsets_for_times({tp: BASE_TIMESTAMP + 42})
        assert found[tp].offset == 42 and found[tp].timestamp == BASE_TIMESTAMP + 42
        assert consumer.offsets_for_times({tp: BASE_TIMESTAMP + 10_000})[tp] is None
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 300}
    finally:
        consumer.close()


def test_topic_create_describe_delete(
    oncelog_session_broker: EmbeddedBroker, topic_name: str
) -> None:
    admin = KafkaAdminClient(bootstrap_servers=oncelog_session_broker.bootstrap_servers)
    try:
        admin.create_topics(
            [NewTopic(topic_name, 3, 1, topic_configs={"segment.bytes": "1048576"})]
        )
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic(topic_name, 3, 1)])
        described = admin.describe_topics([topic_name])
        assert sorted(p["partition_index"] for p in described[0]["partitions"]) == [0, 1, 2]
        configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic_name)])
        segment_bytes = configs["topic"][topic_name]["segment.bytes"]
        assert segment_bytes["value"] == "1048576"
        assert segment_bytes["config_source"] == "DYNAMIC_TOPIC_CONFIG"  # kafka-python's name for 1
        assert topic_name in admin.list_topics()
        admin.delete_topics([topic_name])
        assert topic_name not in admin.list_topics()
    finally:
        admin.close()
