"""Configuration on a cluster, as Kafka's ZooKeeper mode keeps it: topic overrides in
/config/topics/<t>, dynamic broker layers in /config/brokers/<id> and <default>, a
config change notification every broker applies; driven by confluent-kafka, kafka-python
and aiokafka, checked on every broker, and across a broker restart."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource as AioConfigResource
from aiokafka.admin.config_resource import ConfigResourceType as AioType
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KPConfigResource
from kafka.admin import ConfigResourceType
from kazoo.client import KazooClient

from oncelog.client.connection import KafkaConnection
from oncelog.cluster.zookeeper import encode_topic_config
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.compression import GZIP, NONE
from oncelog.protocol.errors import ErrorCode
from oncelog.testing.cluster import LocalCluster
from oncelog.testing.security import ACL_AUTHORIZER

from ..broker.raw_requests import metadata
from .cluster_admin import (
    BROKER,
    DEFAULT,
    DYNAMIC_BROKER,
    DYNAMIC_DEFAULT,
    TIMEOUT_S,
    TOPIC,
    TOPIC_CONFIG,
    config_changes,
    describe,
    describe_once_known,
    eventually,
    new_topic,
    on_every_broker,
    oncelog_cli,
    znode_json,
)
from .failover import wait_all_caught_up
from .raw import fetch_batches


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("configs"), brokers=3) as running:
        yield running


@pytest.fixture
def admin(cluster: LocalCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers})


def set_entries(**configs: str) -> list[ConfigEntry]:
    return [
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        for key, value in configs.items()
    ]


def produce_plain(cluster: LocalCluster, topic: str, count: int) -> None:
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 5}
    )
    for i in range(count):
        producer.produce(topic, b"value-%d" % i, partition=0)
    assert producer.flush(TIMEOUT_S) == 0


def segment_files(cluster: LocalCluster, topic: str) -> list[bytes]:
    """Each replica's first segment of partition 0, as its broker wrote it."""
    return [
        (broker.data_dir / f"{topic}-0" / "00000000000000000000.log").read_bytes()
        for broker in cluster.brokers.values()
    ]


def stored_codecs(cluster: LocalCluster, topic: str) -> list[int]:
    leader = cluster.wait_for_leader(topic, 0)
    with KafkaConnection(cluster.address(leader)) as conn:
        return [header.compression for header, _ in fetch_batches(conn, topic, 0)]


def test_topic_config_reaches_every_broker_and_its_record_rules(
    cluster: LocalCluster, admin: AdminClient
) -> None:
    topic = new_topic(admin)
    produce_plain(cluster, topic, 5)
    # However many batches the producer made of them (on a loaded machine, linger.ms does not
    # promise one), all are stored as sent.
    before = stored_codecs(cluster, topic)
    assert set(before) == {NONE}

    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=set_entries(**{"compression.type": "gzip", "retention.ms": "3600000"}),
    )
    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT_S)

    assert znode_json(cluster, f"/config/topics/{topic}") == {
        "version": 1,
        "config": {"compression.type": "gzip", "retention.ms": "3600000"},
    }
    assert f"topics/{topic}" in config_changes(cluster)
    on_every_broker(cluster, TOPIC, topic, "compression.type", ("gzip", TOPIC_CONFIG))
    on_every_broker(cluster, TOPIC, topic, "retention.ms", ("3600000", TOPIC_CONFIG))
    # The leader's record rules were rebuilt: the producer's plain batch is stored gzipped,
    # and the followers hold it byte for byte as the leader stored it.
    produce_plain(cluster, topic, 5)
    after = stored_codecs(cluster, topic)
    assert after[: len(before)] == before
    assert set(after[len(before) :]) == {GZIP}
    wait_all_caught_up(cluster, topic)
    eventually(lambda: len(set(segment_files(cluster, topic))) == 1, "identical replicas")

    # DELETE brings the broker default back on every broker.
    back = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("compression.type", None, incremental_operation=AlterConfigOpType.DELETE)
        ],
    )
    admin.incremental_alter_configs([back])[back].result(TIMEOUT_S)
    on_every_broker(cluster, TOPIC, topic, "compression.type", ("producer", DEFAULT))


def test_describe_answers_what_zookeeper_holds_not_the_brokers_cache(
    cluster: LocalCluster, admin: AdminClient
) -> None:
    """As Kafka's ZkConfigRepository: a client that changed a topic through one broker and
    asks another (Kafka's Java AdminClient sends both to the least loaded broker) sees the
    change, even before that broker applied the change's notification. The overrides are
    written here with no notification at all, so no broker's cache has them."""
    topic = new_topic(admin)
    zk = KazooClient(cluster.zookeeper.connect_string, timeout=TIMEOUT_S)
    zk.start(timeout=TIMEOUT_S)
    try:
        zk.set(f"/config/topics/{topic}", encode_topic_config({"retention.ms": "3600000"}))
    finally:
        zk.stop()
        zk.close()
    for broker_id in cluster.broker_ids:
        described = describe(cluster, broker_id, TOPIC, topic)
        assert described["retention.ms"] == ("3600000", TOPIC_CONFIG), broker_id


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_legacy_alter_configs_replaces_every_override(
    cluster: LocalCluster, admin: AdminClient
) -> None:
    topic = new_topic(admin, **{"segment.ms": "900000"})
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"cleanup.policy": "compact"})
    admin.alter_configs([resource])[resource].result(TIMEOUT_S)  # AlterConfigs (33)
    assert znode_json(cluster, f"/config/topics/{topic}")["config"] == {"cleanup.policy": "compact"}
    on_every_broker(cluster, TOPIC, topic, "cleanup.policy", ("compact", TOPIC_CONFIG))
    on_every_broker(cluster, TOPIC, topic, "segment.ms", ("604800000", DEFAULT))


def test_errors_with_kafka_python(cluster: LocalCluster, admin: AdminClient) -> None:
    topic = new_topic(admin, **{"segment.ms": "900000"})
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)

    def alter(name: str, configs: dict[str, str]) -> str:
        resource = KPConfigResource(ConfigResourceType.TOPIC, name, configs=configs)
        return str(client.alter_configs([resource], raise_on_unknown=False)["topic"][name])

    try:
        assert "UnknownTopicOrPartitionError" in alter("no-such-topic", {"segment.ms": "1"})
        assert "InvalidConfigurationError" in alter(topic, {"retention.ms": "soon"})
        assert "InvalidConfigurationError" in alter(topic, {"no.such.key": "1"})
    finally:
        client.close()
    # The refused changes left ZooKeeper and the brokers as they were.
    assert znode_json(cluster, f"/config/topics/{topic}")["config"] == {"segment.ms": "900000"}
    on_every_broker(cluster, TOPIC, topic, "segment.ms", ("900000", TOPIC_CONFIG))


def test_validate_only_changes_nothing(cluster: LocalCluster, admin: AdminClient) -> None:
    topic = new_topic(admin)
    resource = ConfigResource(
        ResourceType.TOPIC, topic, incremental_configs=set_entries(**{"retention.ms": "1000"})
    )
    admin.incremental_alter_configs([resource], validate_only=True)[resource].result(TIMEOUT_S)
    assert znode_json(cluster, f"/config/topics/{topic}")["config"] == {}
    assert describe(cluster, 2, TOPIC, topic)["retention.ms"][1] != TOPIC_CONFIG


def test_dynamic_broker_configs_live_in_zookeeper_and_survive_a_restart(
    cluster: LocalCluster, admin: AdminClient
) -> None:
    topic = new_topic(admin)
    # The cluster-wide default, through any broker: the Python clients cannot name the
    # default broker resource (""), oncelog's command line can.
    oncelog_cli(
        cluster.address(2),
        "configs",
        "alter",
        "--entity-type",
        "brokers",
        "--entity-name",
        "",
        "--add-config",
        "log.retention.ms=7200000",
    )
    assert znode_json(cluster, "/config/brokers/<default>")["config"] == {
        "log.retention.ms": "7200000"
    }
    assert "brokers/<default>" in config_changes(cluster)
    on_every_broker(cluster, TOPIC, topic, "retention.ms", ("7200000", DYNAMIC_DEFAULT))

    # Broker 3's own layer, sent to broker 3 (aiokafka routes a broker resource there).
    async def alter_broker_3() -> None:
        client = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        await client.start()
        try:
            await client.alter_configs(
                [AioConfigResource(AioType.BROKER, "3", configs={"log.retention.ms": "5400000"})]
            )
        finally:
            await client.close()

    asyncio.run(alter_broker_3())
    assert znode_json(cluster, "/config/brokers/3")["config"] == {"log.retention.ms": "5400000"}
    eventually(
        lambda: (
            describe(cluster, 3, BROKER, "3")["log.retention.ms"] == ("5400000", DYNAMIC_BROKER)
        ),
        "broker 3's own layer",
    )
    eventually(
        lambda: describe(cluster, 3, TOPIC, topic)["retention.ms"] == ("5400000", DYNAMIC_BROKER),
        "broker 3's topics to follow its layer",
    )
    assert describe(cluster, 1, TOPIC, topic)["retention.ms"] == ("7200000", DYNAMIC_DEFAULT)

    # While broker 3 is down, the topic changes; restarted, it reads both from ZooKeeper.
    cluster.terminate(3)
    resource = ConfigResource(
        ResourceType.TOPIC, topic, incremental_configs=set_entries(**{"segment.ms": "1200000"})
    )
    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT_S)
    cluster.restart(3)
    cluster.wait_for_brokers([3])
    after = eventually(
        lambda: describe_once_known(cluster, 3, TOPIC, topic), "broker 3 to know the topic"
    )
    assert after["segment.ms"] == ("1200000", TOPIC_CONFIG)
    assert after["retention.ms"] == ("5400000", DYNAMIC_BROKER)
    assert not (cluster.brokers[3].data_dir / "dynamic-broker-configs.json").exists()

    # A broker key that cannot change at run time is refused, and ZooKeeper keeps its value.
    static = ConfigResource(
        ResourceType.BROKER, "3", incremental_configs=set_entries(**{"broker.id": "9"})
    )
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([static])[static].result(TIMEOUT_S)
    assert refused.value.args[0].name() == "INVALID_REQUEST"
    assert znode_json(cluster, "/config/brokers/3")["config"] == {"log.retention.ms": "5400000"}
    for name in ("", "3"):  # leave the brokers' defaults as they were for the other tests
        oncelog_cli(
            cluster.bootstrap_servers,
            "configs",
            "alter",
            "--entity-type",
            "brokers",
            "--entity-name",
            name,
            "--delete-config",
            "log.retention.ms",
        )
    on_every_broker(cluster, TOPIC, topic, "retention.ms", ("604800000", DEFAULT))


def test_admin_requests_during_a_zookeeper_outage_fail_their_resources_alone(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """With ZooKeeper gone for longer than the session timeout, nothing that lives there can
    be read or written: Kafka answers each such resource UNKNOWN_SERVER_ERROR, serves the
    rest of the request and keeps the connection. Before: DescribeConfigs waited for as long
    as the outage lasted (kazoo queues a request until it reconnects), and once bounded, the
    error escaped the handler and the broker closed the connection."""
    acls_enforced = {"authorizer.class.name": ACL_AUTHORIZER, "super.users": "User:ANONYMOUS"}
    with LocalCluster(
        tmp_path_factory.mktemp("zk-outage"), brokers=1, config=acls_enforced
    ) as single:
        admin = AdminClient({"bootstrap.servers": single.bootstrap_servers})
        topic = new_topic(admin, replication_factor=1)
        reader, writer = (topic_acl(topic, user, op) for user, op in READER_AND_WRITER)
        admin.create_acls([reader])[reader].result(TIMEOUT_S)
        single.zookeeper.stop()

        with KafkaConnection(single.address(1), timeout_s=TIMEOUT_S) as conn:
            of_topic, of_broker = describe_resources(conn, [(TOPIC, topic), (BROKER, "1")])
            assert of_topic.error_code == ErrorCode.unknown_server_error
            assert "ZooKeeper" in of_topic.error_message
            assert not of_topic.configs
            assert of_broker.error_code == ErrorCode.none and of_broker.configs
            # The same connection still serves requests.
            (again,) = describe_resources(conn, [(BROKER, "1")])
            assert again.error_code == ErrorCode.none
            # SCRAM credentials live in ZooKeeper too. (confluent-kafka 2.16.1 never completes
            # the future of a user answered UNKNOWN_SERVER_ERROR, so this one is sent raw.)
            (of_user,) = conn.request(
                ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
                {"deletions": [], "upsertions": [NEW_SCRAM_USER]},
            ).results
            assert (of_user.user, of_user.error_code) == ("reader", ErrorCode.unknown_server_error)
            assert "ZooKeeper" in of_user.error_message
            # A Metadata request that would auto-create a topic fails for that topic alone.
            missing = metadata(conn, f"{topic}-auto")
            assert missing.error_code == ErrorCode.unknown_server_error

        retention = ConfigResource(
            ResourceType.TOPIC, topic, incremental_configs=set_entries(**{"retention.ms": "1000"})
        )
        attempts = {
            "CreateTopics": admin.create_topics([NewTopic(f"{topic}-new", 1, 1)]),
            "CreatePartitions": admin.create_partitions([NewPartitions(topic, 2)]),
            "IncrementalAlterConfigs": admin.incremental_alter_configs([retention]),
            "DeleteTopics": admin.delete_topics([topic]),
            "CreateAcls": admin.create_acls([writer]),
            "DeleteAcls": admin.delete_acls([matching(reader)]),
        }
        for api, futures in attempts.items():
            (future,) = futures.values()
            with pytest.raises(KafkaException) as failed:
                future.result(TIMEOUT_S)
            error = failed.value.args[0]
            assert error.code() == KafkaError.UNKNOWN, (api, error)
            # librdkafka sends DeleteTopics in a version without an error message.
            assert api == "DeleteTopics" or "ZooKeeper" in error.str(), (api, error)


# An upsertion of SCRAM-SHA-256 (mechanism 1) credentials for user "reader".
NEW_SCRAM_USER = {
    "name": "reader",
    "mechanism": 1,
    "iterations": 4096,
    "salt": b"s" * 16,
    "salted_password": b"p" * 32,
}
READER_AND_WRITER = (("User:reader", AclOperation.READ), ("User:writer", AclOperation.WRITE))


def topic_acl(topic: str, principal: str, operation: AclOperation) -> AclBinding:
    return AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        principal,
        "*",
        operation,
        AclPermissionType.ALLOW,
    )


def matching(binding: AclBinding) -> AclBindingFilter:
    return AclBindingFilter(
        binding.restype,
        binding.name,
        binding.resource_pattern_type,
        binding.principal,
        binding.host,
        binding.operation,
        binding.permission_type,
    )


def describe_resources(conn: KafkaConnection, resources: list[tuple[int, str]]) -> Any:
    """One DescribeConfigs request for every (type, name) in ``resources``; its results."""
    return conn.request(
        ApiKey.DESCRIBE_CONFIGS,
        {
            "resources": [
                {"resource_type": kind, "resource_name": name, "configuration_keys": None}
                for kind, name in resources
            ],
            "include_synonyms": False,
            "include_documentation": False,
        },
    ).results
