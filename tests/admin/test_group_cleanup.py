"""DeleteGroups and OffsetDelete from confluent-kafka and kafka-python, and the log cleaner
shrinking ``__consumer_offsets`` once their tombstones are in."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka import TopicPartition as KPTopicPartition

from oncelog.broker.internal_topics import CONSUMER_OFFSETS
from oncelog.protocol.errors import ErrorCode
from oncelog.testing import EmbeddedBroker

TIMEOUT_S = 30.0
CONFIG = {
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "1",
    "log.cleaner.backoff.ms": "100",
}


@pytest.fixture
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(CONFIG) as embedded:
        yield embedded


def created_topic(bootstrap: str) -> str:
    """A new topic of three partitions (offsets for a partition that does not exist are
    refused, as Kafka refuses them)."""
    topic = f"t-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 3)])[topic].result(TIMEOUT_S)
    return topic


def commit_offsets(bootstrap: str, group: str, topic: str, count: int = 3) -> None:
    """Offsets committed without group management (a "simple" group, Empty)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        for i in range(count):
            consumer.commit(offsets=[TopicPartition(topic, i, 10 + i)], asynchronous=False)
    finally:
        consumer.close()


def committed(bootstrap: str, group: str, topic: str, count: int = 3) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, i) for i in range(count)], TIMEOUT_S)
        return [tp.offset for tp in found]
    finally:
        consumer.close()


def test_delete_groups_with_confluent_and_kafka_python(broker: EmbeddedBroker) -> None:
    bootstrap = broker.bootstrap_servers
    topic = created_topic(bootstrap)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    commit_offsets(bootstrap, "first", topic)
    commit_offsets(bootstrap, "second", topic)
    admin.delete_consumer_groups(["first"])["first"].result(TIMEOUT_S)
    assert committed(bootstrap, "first", topic) == [-1001] * 3  # OFFSET_INVALID: none
    with pytest.raises(KafkaException) as refused:
        admin.delete_consumer_groups(["missing"])["missing"].result(TIMEOUT_S)
    assert refused.value.args[0].code() == ErrorCode.group_id_not_found

    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        client.delete_groups(["second"])
    finally:
        client.close()
    assert committed(bootstrap, "second", topic) == [-1001] * 3
    broker.restart()
    assert committed(broker.bootstrap_servers, "second", topic) == [-1001] * 3


def test_offset_delete_with_kafka_python(broker: EmbeddedBroker) -> None:
    bootstrap = broker.bootstrap_servers
    topic = created_topic(bootstrap)
    commit_offsets(bootstrap, "g", topic)
    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        client.delete_group_offsets("g", [KPTopicPartition(topic, 1)])
    finally:
        client.close()
    assert committed(bootstrap, "g", topic) == [10, -1001, 12]


def test_the_cleaner_shrinks_consumer_offsets_after_deletes(broker: EmbeddedBroker) -> None:
    """Many commits, the groups deleted, then __consumer_offsets rolled and cleaned: what
    a restart replays is a few tombstones' worth, not the history."""
    bootstrap = broker.bootstrap_servers
    topic = created_topic(bootstrap)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    groups = [f"g{i}" for i in range(5)]
    for _ in range(4):
        for group in groups:
            commit_offsets(bootstrap, group, topic)
    commit_offsets(bootstrap, "live", topic)
    for future in admin.delete_consumer_groups(groups).values():
        future.result(TIMEOUT_S)
    resource = ConfigResource(
        ResourceType.TOPIC,
        CONSUMER_OFFSETS,
        incremental_configs=[
            ConfigEntry("segment.ms", "200", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("delete.retention.ms", "0", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry(
                "min.cleanable.dirty.ratio", "0.01", incremental_operation=AlterConfigOpType.SET
            ),
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT_S)
    live = broker.broker
    assert live is not None
    partition = live.topics.partition(CONSUMER_OFFSETS, 0)
    before = partition.log.size_bytes()
    deadline = time.monotonic() + TIMEOUT_S
    while partition.log.size_bytes() >= before / 3:
        assert time.monotonic() < deadline, "__consumer_offsets was not compacted"
        time.sleep(0.3)
        commit_offsets(bootstrap, "live", topic, 1)  # new data: the old segment rolls
        live.cleaner.wake()
    broker.restart()
    assert committed(broker.bootstrap_servers, "live", topic, 1) == [10]
    assert committed(broker.bootstrap_servers, "g0", topic) == [-1001] * 3
