"""Topics on a cluster, through a real client: created by the controller with Kafka's
placement, described with leader/replicas/ISR, bad replication factors refused, deleted."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

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
    # A new partition's ISR is all its replicas at once (as in Kafka); each follower makes
    # its log when its own ZooKeeper watch fires, which may be after the leader answers.
    replica_dirs = [b.data_dir / "placed-0" for b in cluster.brokers.values()]
    cluster._wait(lambda: all(d.is_dir() for d in replica_dirs), "replicas created", 30)
    admin.delete_topics(["placed"], operation_timeout=30)["placed"].result(timeout=60)
    cluster._wait(lambda: cluster.partition_state("placed", 0) is None, "deletion", 30)
    # Every broker deletes its replica when the topic's znodes go.
    cluster._wait(lambda: not any(d.exists() for d in replica_dirs), "replicas deleted", 30)


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


def test_topic_configs_come_from_zookeeper(admin: AdminClient) -> None:
    create(admin, NewTopic("configured", 1, 2, config={"min.insync.replicas": "2"}))
    resource = ConfigResource(ConfigResource.Type.TOPIC, "configured")
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    assert configs["min.insync.replicas"].value == "2"
    assert configs["retention.ms"].is_default


def test_cli_create_and_describe_replicas_isr_under_replication(cluster: LocalCluster) -> None:
    def oncelog(*args: str, via: int) -> str:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "oncelog",
                "topics",
                args[0],
                "--bootstrap-server",
                cluster.address(via),
                *args[1:],
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def described(expected: str, via: int) -> str:
        """The describe report of broker ``via`` once it holds ``expected`` (or the last one
        after 30 s): a broker's copy of ZooKeeper follows its watches a moment after the
        ISR changed there, later still on a loaded machine."""
        deadline = time.monotonic() + 30
        while True:
            report = oncelog("describe", "--topic", "described", via=via)
            if expected in report or time.monotonic() > deadline:
                return report
            time.sleep(0.2)

    # Created through a broker that is not the controller: the CLI finds the controller.
    not_controller = next(b for b in cluster.broker_ids if b != cluster.controller())
    oncelog(
        "create",
        "--topic",
        "described",
        "--partitions",
        "2",
        "--replication-factor",
        "3",
        via=not_controller,
    )
    leaders = {cluster.wait_for_leader("described", p) for p in (0, 1)}
    victim = next(b for b in cluster.broker_ids if b not in leaders)
    healthy = described("Under-replicated partitions: 0", via=victim)
    assert "Replicas" in healthy and "ISR" in healthy
    assert "Under-replicated partitions: 0" in healthy
    cluster.kill(victim)
    try:
        survivors = [b for b in cluster.broker_ids if b != victim]
        cluster.wait_for_isr("described", 0, survivors)
        cluster.wait_for_isr("described", 1, survivors)
        report = described("Under-replicated partitions: 2 (0, 1)", via=min(leaders))
        assert "Under-replicated partitions: 2 (0, 1)" in report
    finally:
        cluster.restart(victim)
    cluster.wait_for_isr("described", 0, cluster.broker_ids)
    cluster.wait_for_isr("described", 1, cluster.broker_ids)
    back = described("Under-replicated partitions: 0", via=victim)
    assert "Under-replicated partitions: 0" in back


def test_internal_topics_are_not_for_clients(cluster: LocalCluster, admin: AdminClient) -> None:
    with pytest.raises(KafkaException) as refused:
        create(admin, NewTopic("__consumer_offsets", 1, 1))
    assert refused.value.args[0].name() == "INVALID_REQUEST"
    metadata = admin.list_topics("__transaction_state", timeout=30)
    assert metadata.topics["__transaction_state"].error.name() == "UNKNOWN_TOPIC_OR_PART"
    assert cluster.partition_state("__transaction_state", 0) is None
