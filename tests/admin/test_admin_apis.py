"""The admin APIs Kafka's tools call, driven by the admin clients of confluent-kafka,
kafka-python and aiokafka: IncrementalAlterConfigs and AlterConfigs (topics and the
broker, dynamic and persisted), CreatePartitions, DeleteRecords, DescribeCluster and the
ACL APIs (SECURITY_DISABLED), with Kafka's errors."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewPartitions as AioNewPartitions
from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka import TopicPartition as KPTopicPartition
from kafka.admin import (
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ConfigResourceType,
    ResourcePatternFilter,
)
from kafka.admin import ConfigResource as KPConfigResource
from kafka.admin import NewPartitions as KPNewPartitions
from kafka.admin import ResourceType as KPResourceType
from kafka.errors import (
    InvalidPartitionsError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    SecurityDisabledError,
)

from oncelog.client.connection import KafkaConnection
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.testing import EmbeddedBroker

from ..storage.failures import fail_with_one_fsync

TIMEOUT_S = 30.0
FAST = {"transaction.state.log.num.partitions": "2", "offsets.topic.num.partitions": "2"}


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def broker(data_dir: Path) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(FAST, data_dir=data_dir) as embedded:
        yield embedded


def new_topic(admin: AdminClient, partitions: int = 1, **configs: str) -> str:
    name = f"admin-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, partitions, config=configs)])[name].result(TIMEOUT_S)
    return name


def described(admin: AdminClient, resource: ConfigResource) -> dict[str, ConfigEntry]:
    return admin.describe_configs([resource])[resource].result(TIMEOUT_S)


def kafka_code(exc: BaseException) -> int:
    assert isinstance(exc, KafkaException), exc
    return exc.args[0].code()


def raw_incremental_alter(
    broker: EmbeddedBroker, resource_type: int, name: str, key: str, value: str
) -> int:
    """One SET over the protocol; the resource's error code."""
    with KafkaConnection(broker.bootstrap_servers) as conn:
        answer = conn.request(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            {
                "validate_only": False,
                "resources": [
                    {
                        "resource_type": resource_type,
                        "resource_name": name,
                        "configs": [{"name": key, "config_operation": 0, "value": value}],
                    }
                ],
            },
        )
    return answer.responses[0].error_code


# --- configs ------------------------------------------------------------------------------


def test_incremental_alter_configs_of_a_topic_with_confluent(broker: EmbeddedBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    topic = new_topic(admin, **{"retention.ms": "3600000"})
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(
                "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND
            ),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry("segment.ms", "600000", incremental_operation=AlterConfigOpType.SET),
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT_S)
    configs = described(admin, ConfigResource(ResourceType.TOPIC, topic))
    assert configs["cleanup.policy"].value == "delete,compact"
    assert configs["retention.ms"].value == "604800000" and configs["retention.ms"].is_default
    assert configs["segment.ms"].value == "600000"
    partition = broker.broker.topics.partition(topic, 0)  # type: ignore[union-attr]
    assert partition.log.config.compact and partition.log.config.segment_ms == 600_000

    # Survives a restart: the catalogue holds the overrides.
    broker.restart()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    assert described(admin, ConfigResource(ResourceType.TOPIC, topic))["segment.ms"].value == (
        "600000"
    )


@pytest.mark.parametrize(
    ("entry", "code"),
    [
        (
            ConfigEntry("no.such.key", "1", incremental_operation=AlterConfigOpType.SET),
            ErrorCode.invalid_config,
        ),
        (
            ConfigEntry("segment.ms", "soon", incremental_operation=AlterConfigOpType.SET),
            ErrorCode.invalid_config,
        ),
        (
            ConfigEntry("segment.ms", "5", incremental_operation=AlterConfigOpType.APPEND),
            ErrorCode.invalid_config,
        ),
        (
            ConfigEntry("cleanup.policy", "sometimes", incremental_operation=AlterConfigOpType.SET),
            ErrorCode.invalid_config,
        ),
    ],
)
def test_bad_topic_configs_are_refused_and_change_nothing(
    broker: EmbeddedBroker, entry: ConfigEntry, code: int
) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    topic = new_topic(admin)
    before = {
        k: v.value for k, v in described(admin, ConfigResource(ResourceType.TOPIC, topic)).items()
    }
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([resource])[resource].result(TIMEOUT_S)
    assert kafka_code(refused.value) == code
    after = {
        k: v.value for k, v in described(admin, ConfigResource(ResourceType.TOPIC, topic)).items()
    }
    assert after == before


def test_unknown_topic_and_duplicate_keys(broker: EmbeddedBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    missing = ConfigResource(
        ResourceType.TOPIC,
        "no-such-topic",
        incremental_configs=[
            ConfigEntry("segment.ms", "1000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([missing])[missing].result(TIMEOUT_S)
    assert kafka_code(refused.value) == ErrorCode.unknown_topic_or_partition


def test_dynamic_broker_config_applies_now_and_persists(broker: EmbeddedBroker) -> None:
    """log.retention.ms as the cluster default: topics without an override follow it at
    once; a per-broker value wins over it; a static-only key is refused."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    topic = new_topic(admin)
    # confluent-kafka will not name the cluster default (""): ask over the protocol.
    assert raw_incremental_alter(broker, 4, "", "log.retention.ms", "7200000") == ErrorCode.none
    partition = broker.broker.topics.partition(topic, 0)  # type: ignore[union-attr]
    assert partition.log.config.retention_ms == 7_200_000
    this = ConfigResource(
        ResourceType.BROKER,
        "0",
        incremental_configs=[
            ConfigEntry("log.retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([this])[this].result(TIMEOUT_S)
    entry = described(admin, ConfigResource(ResourceType.BROKER, "0"))["log.retention.ms"]
    assert entry.value == "3600000" and not entry.is_read_only
    assert entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert described(admin, ConfigResource(ResourceType.TOPIC, topic))["retention.ms"].value == (
        "3600000"
    )

    static = ConfigResource(
        ResourceType.BROKER,
        "0",
        incremental_configs=[
            ConfigEntry("num.partitions", "3", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([static])[static].result(TIMEOUT_S)
    assert kafka_code(refused.value) == ErrorCode.invalid_request
    # librdkafka sends a broker resource to that broker: ask this one about broker 7.
    assert raw_incremental_alter(broker, 4, "7", "log.retention.ms", "1") == (
        ErrorCode.invalid_request
    )

    broker.restart()
    partition = broker.broker.topics.partition(topic, 0)  # type: ignore[union-attr]
    assert partition.log.config.retention_ms == 3_600_000


def test_legacy_alter_configs_replaces_all_overrides(broker: EmbeddedBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    topic = new_topic(admin, **{"retention.ms": "3600000", "segment.ms": "600000"})
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"segment.ms": "900000"})
    with pytest.warns(DeprecationWarning):  # confluent-kafka's name for AlterConfigs (33)
        admin.alter_configs([resource])[resource].result(TIMEOUT_S)
    configs = described(admin, ConfigResource(ResourceType.TOPIC, topic))
    assert configs["segment.ms"].value == "900000"
    assert configs["retention.ms"].is_default, "AlterConfigs replaces the whole set"


def test_incremental_alter_configs_with_kafka_python(broker: EmbeddedBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    topic = new_topic(admin, **{"retention.ms": "3600000"})
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        client.alter_configs(
            [KPConfigResource(ConfigResourceType.TOPIC, topic, configs={"segment.ms": "900000"})]
        )
        described_kp = client.describe_configs([KPConfigResource(ConfigResourceType.TOPIC, topic)])
        assert described_kp  # kafka-python reads our DescribeConfigs answer
    finally:
        client.close()
    configs = described(admin, ConfigResource(ResourceType.TOPIC, topic))
    assert configs["segment.ms"].value == "900000"
    assert configs["retention.ms"].value == "3600000", "the incremental API keeps the others"


def test_alter_configs_with_aiokafka(broker: EmbeddedBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    topic = new_topic(admin)

    async def alter() -> None:
        from aiokafka.admin.config_resource import ConfigResource as AioConfigResource
        from aiokafka.admin.config_resource import ConfigResourceType as AioType

        client = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
        await client.start()
        try:
            await client.alter_configs(
                [AioConfigResource(AioType.TOPIC, topic, configs={"max.message.bytes": "2000000"})]
            )
        finally:
            await client.close()

    asyncio.run(alter())
    assert described(admin, ConfigResource(ResourceType.TOPIC, topic))[
        "max.message.bytes"
    ].value == ("2000000")


# --- partitions ---------------------------------------------------------------------------


def test_create_partitions_with_three_clients(broker: EmbeddedBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    topic = new_topic(admin, partitions=1)
    admin.create_partitions([NewPartitions(topic, 2)])[topic].result(TIMEOUT_S)

    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        client.create_partitions({topic: KPNewPartitions(3)})
        with pytest.raises(InvalidPartitionsError):
            client.create_partitions({topic: KPNewPartitions(2)})  # a decrease
    finally:
        client.close()

    async def grow() -> None:
        aio = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
        await aio.start()
        try:
            await aio.create_partitions({topic: AioNewPartitions(4)})
        finally:
            await aio.close()

    asyncio.run(grow())
    metadata = admin.list_topics(topic, timeout=TIMEOUT_S)
    assert sorted(metadata.topics[topic].partitions) == [0, 1, 2, 3]

    # The new partitions take records, and survive a restart.
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    producer.produce(topic, b"to-three", partition=3)
    assert producer.flush(TIMEOUT_S) == 0
    broker.restart()
    assert broker.broker.topics.partition(topic, 3).log.log_end_offset == 1  # type: ignore[union-attr]

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    with pytest.raises(KafkaException) as refused:
        admin.create_partitions([NewPartitions(topic, 4)])[topic].result(TIMEOUT_S)
    assert kafka_code(refused.value) == ErrorCode.invalid_partitions
    with pytest.raises(KafkaException) as refused:
        admin.create_partitions([NewPartitions(topic, 6, replica_assignment=[[0]])])[topic].result(
            TIMEOUT_S
        )
    assert kafka_code(refused.value) == ErrorCode.invalid_replica_assignment
    with pytest.raises(KafkaException) as refused:
        admin.create_partitions([NewPartitions("no-such-topic", 2)])["no-such-topic"].result(
            TIMEOUT_S
        )
    assert kafka_code(refused.value) == ErrorCode.unknown_topic_or_partition


# --- records ------------------------------------------------------------------------------


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(count):
        producer.produce(topic, b"%d" % i, partition=0)
    assert producer.flush(TIMEOUT_S) == 0


def test_delete_records_moves_the_log_start_and_survives_a_crash(
    broker: EmbeddedBroker, data_dir: Path
) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    topic = new_topic(admin, **{"segment.bytes": "1024"})
    produce(broker.bootstrap_servers, topic, 100)
    results = admin.delete_records([TopicPartition(topic, 0, 40)])
    assert results[TopicPartition(topic, 0, 40)].result(TIMEOUT_S).low_watermark == 40
    partition = broker.broker.topics.partition(topic, 0)  # type: ignore[union-attr]
    assert partition.log_start_offset == 40
    assert len(partition.log.segments()) < 100 / 8, "segments wholly below were deleted"

    # kafka-python: up to the high watermark (offset -1).
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        answer = client.delete_records({KPTopicPartition(topic, 0): 60})
        assert answer
        with pytest.raises(OffsetOutOfRangeError):  # past the high watermark
            client.delete_records({KPTopicPartition(topic, 0): 1000})
    finally:
        client.close()
    assert partition.log_start_offset == 60

    # A restart without a clean stop keeps the log start (written before the answer).
    broker.restart()
    assert broker.broker.topics.partition(topic, 0).log_start_offset == 60  # type: ignore[union-attr]


def test_delete_records_refusals(broker: EmbeddedBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    compacted = new_topic(admin, **{"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    producer.produce(compacted, key=b"k", value=b"v", partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    tp = TopicPartition(compacted, 0, 1)
    with pytest.raises(KafkaException) as refused:
        admin.delete_records([tp])[tp].result(TIMEOUT_S)
    assert kafka_code(refused.value) == ErrorCode.policy_violation
    plain = new_topic(admin)
    beyond = TopicPartition(plain, 0, 5)
    with pytest.raises(KafkaException) as refused:
        admin.delete_records([beyond])[beyond].result(TIMEOUT_S)
    assert kafka_code(refused.value) == ErrorCode.offset_out_of_range


def test_delete_records_is_refused_on_a_failed_log(
    broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log whose fsync failed is offline until the restart: DeleteRecords answers
    KAFKA_STORAGE_ERROR (as Kafka for an offline log directory) and deletes nothing from
    the failing disk. Before, it deleted the segments and moved the log start."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    topic = new_topic(admin, **{"segment.bytes": "1024"})
    produce(broker.bootstrap_servers, topic, 100)
    partition = broker.broker.topics.partition(topic, 0)  # type: ignore[union-attr]
    segments = partition.log.segments()
    fail_with_one_fsync(partition.log)
    tp = TopicPartition(topic, 0, 40)
    with pytest.raises(KafkaException) as refused:
        admin.delete_records([tp])[tp].result(TIMEOUT_S)
    assert kafka_code(refused.value) == ErrorCode.kafka_storage_error
    assert partition.log.segments() == segments and partition.log_start_offset == 0


def test_an_idempotent_producer_continues_after_its_records_are_deleted(
    broker: EmbeddedBroker,
) -> None:
    """KIP-360: DeleteRecords removes a producer's batches, not its state."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    topic = new_topic(admin)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "enable.idempotence": True})
    for i in range(10):
        producer.produce(topic, b"%d" % i, partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    tp = TopicPartition(topic, 0, -1)  # everything
    assert admin.delete_records([tp])[tp].result(TIMEOUT_S).low_watermark == 10
    errors = []
    for i in range(10, 20):
        producer.produce(topic, b"%d" % i, partition=0, on_delivery=lambda e, m: errors.append(e))
    assert producer.flush(TIMEOUT_S) == 0
    assert errors == [None] * 10
    partition = broker.broker.topics.partition(topic, 0)  # type: ignore[union-attr]
    assert (partition.log_start_offset, partition.log.log_end_offset) == (10, 20)


# --- cluster and ACLs ---------------------------------------------------------------------


def test_describe_cluster_and_acls_without_an_authorizer(broker: EmbeddedBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    cluster = admin.describe_cluster().result(TIMEOUT_S)
    assert cluster.cluster_id == "oncelog-single-node"
    assert [n.id for n in cluster.nodes] == [0] and cluster.controller.id == 0
    with KafkaConnection(broker.bootstrap_servers) as conn:
        described_cluster = conn.request(
            ApiKey.DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": True}
        )
    assert described_cluster.error_code == ErrorCode.none
    assert [b.broker_id for b in described_cluster.brokers] == [0]
    assert described_cluster.cluster_authorized_operations & (1 << AclOperation.ALTER_CONFIGS.value)

    acl_filter = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    # librdkafka reports no ACLs where the broker answers SECURITY_DISABLED;
    # kafka-python raises it.
    assert admin.describe_acls(acl_filter).result(TIMEOUT_S) == []
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        with pytest.raises(SecurityDisabledError):
            client.describe_acls(
                ACLFilter(
                    principal=None,
                    host="*",
                    operation=ACLOperation.ANY,
                    permission_type=ACLPermissionType.ANY,
                    resource_pattern=ResourcePatternFilter(
                        KPResourceType.ANY, None, ACLResourcePatternType.ANY
                    ),
                )
            )
    finally:
        client.close()
    binding = AclBinding(
        ResourceType.TOPIC,
        "t",
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    with pytest.raises(KafkaException) as refused:
        admin.create_acls([binding])[binding].result(TIMEOUT_S)
    assert kafka_code(refused.value) == ErrorCode.security_disabled
    with pytest.raises(KafkaException) as refused:
        admin.delete_acls([acl_filter])[acl_filter].result(TIMEOUT_S)
    assert kafka_code(refused.value) == ErrorCode.security_disabled

    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        assert client.describe_cluster()["cluster_id"] == "oncelog-single-node"
    finally:
        client.close()


def test_delete_records_is_refused_on_a_compact_topic_with_kafka_python(
    broker: EmbeddedBroker,
) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    topic = new_topic(admin, **{"cleanup.policy": "compact"})
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        with pytest.raises(PolicyViolationError):
            client.delete_records({KPTopicPartition(topic, 0): 0})
    finally:
        client.close()
