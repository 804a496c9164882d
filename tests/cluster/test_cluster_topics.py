"""Topics on a cluster, through a real client: created by the controller with Kafka's
placement, described with leader/replicas/ISR, bad replication factors refused, deleted."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.testing.cluster import LocalCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    with LocalCluster(tmp_path_factory.mktemp("topics"), brokers=3) as running:
        yield running


@pytest.fixture
def admin(cluster: LocalCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers})


def create(admin: AdminClient, topic: NewTopic) -> None:
    admin.create_topics([topic], operation_timeout=30)[topic.topic].result(timeout=60)


def test_create_describe_delete(cluster: LocalCluster, admin: AdminClient) -> None:
    create(admin, NewTopic("placed", num_partitions=6, replication_factor=3))
    metadata = admin.list_topics("placed", timeout=30)
    assert sorted(metadata.brokers) == [1, 2, 3]
    partitions = metadata.topics["placed"].partitions
    assert sorted(partitions) == list(range(6))
    leaders = [p.leader for p in partitions.values()]
    assert sorted(leaders) == [1, 1, 2, 2, 3, 3]  # round-robin: two partitions each
    for p in partitions.values():
        assert sorted(p.replicas) == [1, 2, 3] and sorted(p.isrs) == [1, 2, 3]
        assert p.leader == p.replicas[0]  # the preferred replica leads a new partition
        state = cluster.partition_state("placed", p.id)
        assert state is not None and state["leader_epoch"] == 0
    admin.delete_topics(["placed"], operation_timeout=30)["placed"].result(timeout=60)
    cluster._wait(lambda: cluster.partition_state("placed", 0) is None, "deletion", 30)


def test_replication_factor_above_live_brokers(admin: AdminClient) -> None:
    with pytest.raises(KafkaException) as refused:
        create(admin, NewTopic("too-wide", num_partitions=1, replication_factor=4))
    error = refused.value.args[0]
    assert error.name() == "INVALID_REPLICATION_FACTOR"
    assert "larger than the 3 live broker(s) [1, 2, 3]" in error.str()


def test_explicit_assignment(admin: AdminClient) -> None:
    create(admin, NewTopic("assigned", num_partitions=2, replica_assignment=[[2, 3], [3, 1]]))
    partitions = admin.list_topics("assigned", timeout=30).topics["assigned"].partitions
    assert [partitions[0].replicas, partitions[1].replicas] == [[2, 3], [3, 1]]
    assert [partitions[0].leader, partitions[1].leader] == [2, 3]
