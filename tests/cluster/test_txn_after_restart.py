"""A transactional producer idle across a clean restart of a partition's leader, its
coordinator on another broker: after the restart the leader reads the producer's entry
from the snapshot, decoded anew on each look. The leader verifies the producer's next
batch with the coordinator, then checks that no marker ended the transaction meanwhile by
comparing the producer's entry with the one it held: an entry looked at twice from the
snapshot was never the same object, and the batch was refused INVALID_TXN_STATE, which
librdkafka raises as an error the producer cannot go on from."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.testing.cluster import LocalCluster

from .coordination import COORDINATOR_CONFIG, TRANSACTION, wait_for_coordinator

TIMEOUT_S = 60
TID = "idle-across-restart"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    config = {
        **COORDINATOR_CONFIG,  # two brokers: internal topics of two replicas
        "transaction.state.log.replication.factor": "2",
        "transaction.state.log.min.isr": "1",
        "offsets.topic.replication.factor": "2",
    }
    with LocalCluster(tmp_path, brokers=2, config=config) as running:
        yield running


def commit_one(producer: Producer, value: bytes) -> None:
    producer.begin_transaction()
    producer.produce("idle", value, partition=0)
    producer.commit_transaction(TIMEOUT_S)


def committed_values(cluster: LocalCluster) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "reader",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition("idle", 0, 0)])
        values: list[bytes] = []
        for message in iter(lambda: consumer.poll(5), None):
            if message.error() is None:
                values.append(message.value())
        return values
    finally:
        consumer.close()


def test_an_idle_producer_goes_on_after_its_partitions_leader_restarted(
    cluster: LocalCluster,
) -> None:
    coordinator = wait_for_coordinator(cluster, TID, TRANSACTION)
    leader = next(b for b in cluster.broker_ids if b != coordinator)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    # one replica, on the other broker: the leader comes back as the leader, from its files
    topic = NewTopic("idle", 1, replica_assignment=[[leader]])
    admin.create_topics([topic])["idle"].result(TIMEOUT_S)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": TID})
    producer.init_transactions(TIMEOUT_S)
    commit_one(producer, b"before")
    # the commit's marker written (not still in flight, to be written after the restart)
    assert committed_values(cluster) == [b"before"]
    cluster.restart(leader)  # a clean stop first: the producer's entry goes to the snapshot
    cluster.wait_for_brokers([leader])
    assert cluster.wait_for_leader("idle", 0) == leader
    commit_one(producer, b"after")
    assert committed_values(cluster) == [b"before", b"after"]
