"""The partition leader SIGKILLed again and again during production, with real clients.

Three brokers, replication factor 3, min.insync.replicas 2. confluent-kafka, kafka-python
and aiokafka each produce numbered records (acks=all, idempotent) into their own topic, at
the same time; the three topics have the same replica assignment, so the controller gives
them the same leader and every kill hits all three. Every acknowledged record must then be
in the log exactly once, at the offset it was acknowledged with, and once the replicas have
caught up their logs must be identical byte for byte below the high watermark.

The same scenario with acks=1 loses acknowledged records: the killed leader had
acknowledged records its followers never fetched, and it truncates them when it comes back
as a follower. That is what the test can catch. The followers are made to lag
(replica.fetch.min.bytes makes the leader hold each follower fetch up to
replica.fetch.wait.max.ms), so that every kill finds records only the leader has.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.testing.cluster import LocalCluster

from .failover import NumberedProducer, read_numbered, replica_bytes, wait_all_caught_up

BROKER_CONFIG = {
    "zookeeper.session.timeout.ms": "3000",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "150",
    "replica.fetch.min.bytes": "1000000",
}
CLIENTS = ("confluent", "kafka-python", "aiokafka")


def kill_leader_repeatedly(
    tmp_path: Path, clients: tuple[str, ...], acks: str, idempotent: bool, kills: int
) -> list[tuple[NumberedProducer, list[int], list[bytes]]]:
    """Run one producer per client into its own topic while the common leader is killed
    ``kills`` times; each producer with the log it left and every replica's bytes."""
    with LocalCluster(tmp_path, brokers=3, config=BROKER_CONFIG) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        topics = [f"events-{client}" for client in clients]
        new = [
            NewTopic(t, 1, replica_assignment=[[1, 2, 3]], config={"min.insync.replicas": "2"})
            for t in topics
        ]
        for future in admin.create_topics(new).values():
            future.result(60)
        producers = [
            NumberedProducer(client, cluster.bootstrap_servers, topic, acks, idempotent).start()
            for client, topic in zip(clients, topics, strict=True)
        ]
        try:
            for _ in range(kills):
                for topic, producer in zip(topics, producers, strict=True):
                    wait_all_caught_up(cluster, topic)
                    producer.wait_for_progress(100)
                leader = cluster.wait_for_leader(topics[0], 0)
                assert all(cluster.leader(t, 0) == leader for t in topics)
                cluster.kill(leader)
                for topic in topics:
                    cluster.wait_for_leader(topic, 0, not_in={leader})
                cluster.restart(leader)
            for producer in producers:
                producer.wait_for_progress(100)
        finally:
            for producer in producers:
                producer.stop()
        for topic in topics:
            wait_all_caught_up(cluster, topic)
        logs = [read_numbered(cluster.bootstrap_servers, topic) for topic in topics]
    return [
        (
            producer,
            numbers,
            [replica_bytes(b.data_dir, t, len(numbers)) for b in cluster.brokers.values()],
        )
        for producer, numbers, t in zip(producers, logs, topics, strict=True)
    ]


@pytest.mark.slow
def test_acks_all_loses_nothing_across_ten_leader_kills(tmp_path: Path) -> None:
    for producer, numbers, replicas in kill_leader_repeatedly(tmp_path, CLIENTS, "all", True, 10):
        client = producer.client
        assert producer.acked, f"{client}: {producer.errors[-5:]}"
        duplicates = [n for n, count in Counter(numbers).items() if count > 1]
        assert not duplicates, f"{client}: {len(duplicates)} stored twice: {duplicates[:10]}"
        offsets = {number: offset for offset, number in enumerate(numbers)}
        missing = sorted(set(producer.acked) - set(offsets))
        assert not missing, f"{client}: {len(missing)} acknowledged records lost: {missing[:10]}"
        misplaced = {n: (o, offsets[n]) for n, o in producer.acked.items() if offsets[n] != o}
        assert not misplaced, f"{client}: acknowledged elsewhere: {list(misplaced.items())[:10]}"
        assert replicas[0], f"{client}: nothing replicated"
        assert all(r == replicas[0] for r in replicas), f"{client}: replicas differ below the HW"


@pytest.mark.slow
def test_acks_1_loses_acknowledged_records_across_leader_kills(tmp_path: Path) -> None:
    ((producer, numbers, replicas),) = kill_leader_repeatedly(
        tmp_path, ("confluent",), "1", False, 3
    )
    lost = set(producer.acked) - set(numbers)
    assert lost, "acks=1 should lose the records only the killed leader had"
    assert all(r == replicas[0] for r in replicas)  # what is left still agrees
