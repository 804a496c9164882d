"""Partitions and records on a cluster: CreatePartitions through the controller (Kafka's
placement, new partition states, brokers that pick them up, acks=all into them on
replication factor 3), DeleteRecords on the leader with the log start offset reaching the
followers and surviving a failover, and the log cleaner on replicated partitions."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewPartitions as AioNewPartitions
from cluster_admin import TIMEOUT_S, eventually, new_topic, oncelog_cli
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from kafka import KafkaAdminClient
from kafka.admin import NewPartitions as KPNewPartitions

from oncelog.client.connection import KafkaConnection
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.testing.cluster import LocalCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("records"), brokers=3) as running:
        yield running


@pytest.fixture
def admin(cluster: LocalCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers})


def replicas_of(cluster: LocalCluster, topic: str) -> dict[int, list[int]]:
    import json

    data = cluster.znode(f"/brokers/topics/{topic}")
    assert data is not None
    return {int(p): r for p, r in json.loads(data)["partitions"].items()}


def produce_to_every_partition(cluster: LocalCluster, topic: str, partitions: int) -> None:
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
        }
    )
    for p in range(partitions):
        for i in range(10):
            producer.produce(topic, b"p%d-%d" % (p, i), partition=p)
    assert producer.flush(TIMEOUT_S) == 0


def read_partition(cluster: LocalCluster, topic: str, partition: int, count: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "unused",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        values: list[bytes] = []
        while len(values) < count:
            messages = consumer.consume(count - len(values), timeout=TIMEOUT_S)
            assert messages, f"{topic}-{partition}: only {len(values)} of {count} read"
            values += [m.value() for m in messages if m.error() is None]
        return values
    finally:
        consumer.close()


# -- CreatePartitions --------------------------------------------------------------------------


def test_create_partitions_with_three_clients_then_acks_all(
    cluster: LocalCluster, admin: AdminClient
) -> None:
    topic = new_topic(admin, partitions=3, **{"min.insync.replicas": "2"})
    before = replicas_of(cluster, topic)

    # confluent-kafka: 3 -> 4
    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(TIMEOUT_S)
    # kafka-python: 4 -> 5
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        client.create_partitions({topic: KPNewPartitions(5)})
    finally:
        client.close()

    # aiokafka: 5 -> 6
    async def grow() -> None:
        aio = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        await aio.start()
        try:
            await aio.create_partitions({topic: AioNewPartitions(6)})
        finally:
            await aio.close()

    asyncio.run(grow())

    after = replicas_of(cluster, topic)
    assert {p: after[p] for p in before} == before  # existing partitions never move
    # Kafka's placement continues the round-robin of partition 0's leader over the brokers.
    brokers = sorted(cluster.broker_ids)
    start = brokers.index(after[0][0])
    for partition, replicas in after.items():
        assert replicas[0] == brokers[(partition + start) % len(brokers)]
        assert sorted(replicas) == brokers
    for partition in range(6):
        cluster.wait_for_isr(topic, partition, brokers)
        assert cluster.partition_state(topic, partition)["leader_epoch"] == 0
    assert all((b.data_dir / f"{topic}-5").is_dir() for b in cluster.brokers.values())

    produce_to_every_partition(cluster, topic, 6)
    for partition in (3, 4, 5):
        assert read_partition(cluster, topic, partition, 10) == [
            b"p%d-%d" % (partition, i) for i in range(10)
        ]


def test_create_partitions_errors(cluster: LocalCluster, admin: AdminClient) -> None:
    topic = new_topic(admin, partitions=2, replication_factor=2)
    with pytest.raises(KafkaException) as refused:
        admin.create_partitions([NewPartitions(topic, 2)])[topic].result(TIMEOUT_S)
    assert refused.value.args[0].name() == "INVALID_PARTITIONS"
    bad = NewPartitions(topic, 3, replica_assignment=[[1, 7]])
    with pytest.raises(KafkaException) as refused:
        admin.create_partitions([bad])[topic].result(TIMEOUT_S)
    assert refused.value.args[0].name() == "BROKER_NOT_AVAILABLE"
    # validate_only writes nothing.
    admin.create_partitions([NewPartitions(topic, 4)], validate_only=True)[topic].result(TIMEOUT_S)
    assert sorted(replicas_of(cluster, topic)) == [0, 1]
    # An explicit assignment is written as given.
    good = NewPartitions(topic, 3, replica_assignment=[[3, 2]])
    admin.create_partitions([good])[topic].result(TIMEOUT_S)
    assert replicas_of(cluster, topic)[2] == [3, 2]
    assert cluster.wait_for_leader(topic, 2) == 3
    # A broker that is not the controller answers NOT_CONTROLLER (clients go to it).
    not_controller = next(b for b in cluster.broker_ids if b != cluster.controller())
    with KafkaConnection(cluster.address(not_controller)) as conn:
        answer = conn.request(
            ApiKey.CREATE_PARTITIONS,
            {
                "topics": [{"name": topic, "count": 4, "assignments": None}],
                "timeout": 30_000,
                "validate_only": False,
            },
        )
    assert answer.results[0].error_code == ErrorCode.not_controller


def test_cli_topics_alter_reaches_the_controller(cluster: LocalCluster, admin: AdminClient) -> None:
    topic = new_topic(admin, partitions=1)
    not_controller = next(b for b in cluster.broker_ids if b != cluster.controller())
    out = oncelog_cli(
        cluster.address(not_controller), "topics", "alter", "--topic", topic, "--partitions", "3"
    )
    assert f"Topic {topic} now has 3 partitions." in out
    eventually(lambda: cluster.leader(topic, 2) is not None, "a leader of the new partition")
