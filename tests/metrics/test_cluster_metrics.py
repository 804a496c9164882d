"""The replication metrics of a cluster, scraped from each broker's Prometheus endpoint while
followers stop and come back: under-replicated and under-min-ISR partitions, ISR shrinks and
expansions, leader and partition counts, the active controller."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from oncelog.testing.cluster import LocalCluster

from ..cluster.cluster_admin import TIMEOUT_S, eventually, new_topic
from .test_metrics_endpoint import scrape, value

pytestmark = pytest.mark.slow  # two followers stopped until the leader notices

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


# A paused follower stops fetching long before its ZooKeeper session expires, so the leader
# (not the controller, which drops dead brokers from the ISR) shrinks the ISR once records
# arrive that the follower does not fetch (a follower at the log end stays in sync, as in
# Kafka): Kafka's IsrShrinksPerSec counts the leader's own shrinks only.
CONFIG = {"zookeeper.session.timeout.ms": "45000", "replica.lag.time.max.ms": "2000"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    base = tmp_path_factory.mktemp("metrics")
    with LocalCluster(base, brokers=3, config=CONFIG, metrics=True) as running:
        yield running


def scraped(cluster: LocalCluster, broker_id: int) -> Samples:
    port = cluster.brokers[broker_id].metrics_port
    assert port is not None
    return scrape(port)


def until(
    cluster: LocalCluster, broker_id: int, holds: Callable[[Samples], bool], what: str
) -> Samples:
    """The first scrape of ``broker_id`` for which ``holds`` is true."""
    seen: list[Samples] = []

    def scrape_holds() -> bool:
        seen.append(scraped(cluster, broker_id))
        return holds(seen[-1])

    eventually(scrape_holds, what)
    return seen[-1]


def produce(cluster: LocalCluster, topic: str, acks: str) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": acks})
    for i in range(20):
        producer.produce(topic, value=b"%d" % i, partition=0)
    assert producer.flush(TIMEOUT_S) == 0


def test_under_replicated_partitions_follow_the_isr(cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    topic = new_topic(admin, partitions=1, replication_factor=3, **{"min.insync.replicas": "2"})
    produce(cluster, topic, "all")
    leader = cluster.wait_for_leader(topic, 0)
    followers = [b for b in cluster.broker_ids if b != leader]
    partition = {"topic": topic, "partition": "0"}

    def flag(s: Samples) -> float:
        return value(s, "kafka_cluster_partition_underreplicated", **partition)

    healthy = until(cluster, leader, lambda s: flag(s) == 0, "a fully replicated partition")
    assert value(healthy, "kafka_server_replicamanager_leadercount") >= 1
    assert value(healthy, "kafka_server_replicamanager_partitioncount") >= 1
    # Every broker hosts the partition; only its leader could call it under-replicated.
    for follower in followers:
        assert ("kafka_cluster_partition_underreplicated", tuple(sorted(partition.items()))) in (
            scraped(cluster, follower)
        )
    controllers = sum(
        value(scraped(cluster, b), "kafka_controller_kafkacontroller_activecontrollercount")
        for b in cluster.broker_ids
    )
    assert controllers == 1
    shrinks_before = value(healthy, "kafka_server_replicamanager_isrshrinks_total")
    expands_before = value(healthy, "kafka_server_replicamanager_isrexpands_total")

    # One follower stops (SIGSTOP): the leader drops it from the ISR, the partition is
    # under-replicated but still has min.insync.replicas (2) in sync.
    cluster.pause(followers[0])
    try:
        produce(cluster, topic, "1")
        cluster.wait_for_isr(topic, 0, [leader, followers[1]])
        one_down = until(cluster, leader, lambda s: flag(s) == 1, "an under-replicated partition")
        assert value(one_down, "kafka_server_replicamanager_underreplicatedpartitions") >= 1
        assert value(one_down, "kafka_server_replicamanager_isrshrinks_total") > shrinks_before

        # The second one too: the ISR is the leader alone, under min.insync.replicas.
        cluster.pause(followers[1])
        try:
            produce(cluster, topic, "1")
            cluster.wait_for_isr(topic, 0, [leader])
            until(
                cluster,
                leader,
                lambda s: value(s, "kafka_server_replicamanager_underminisrpartitioncount") >= 1,
                "a partition under its min.insync.replicas",
            )
        finally:
            cluster.resume(followers[1])
    finally:
        cluster.resume(followers[0])

    # Both fetch again and catch up: fully replicated again, the ISR grew twice.
    cluster.wait_for_isr(topic, 0, cluster.broker_ids)
    back = until(cluster, leader, lambda s: flag(s) == 0, "the partition fully replicated again")
    assert value(back, "kafka_server_replicamanager_underminisrpartitioncount") == 0
    assert value(back, "kafka_server_replicamanager_isrexpands_total") >= expands_before + 2
