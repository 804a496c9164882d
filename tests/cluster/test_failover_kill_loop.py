"""The partition leader SIGKILLed again and again during production, with real clients.

Three brokers, replication factor 3, min.insync.replicas 2. With acks=all (and the
idempotent producer) every acknowledged record is in the log exactly once, at the offset it
was acknowledged with, and once the replicas have caught up their logs are identical byte
for byte below the high watermark. The same scenario with acks=1 loses acknowledged
records: the killed leader had acknowledged records its followers never fetched, and it
truncates them when it comes back as a follower. That is what the test can catch.

The followers are made to lag (replica.fetch.min.bytes makes the leader hold each follower
fetch up to replica.fetch.wait.max.ms), so that every kill finds records only the leader
has: acks=1 then loses some at every kill, and acks=all must still lose none.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from failover import (
    TOPIC,
    NumberedProducer,
    read_numbered,
    replica_bytes,
    wait_all_caught_up,
)

from oncelog.testing.cluster import LocalCluster

KILLS = 10
BROKER_CONFIG = {
    "zookeeper.session.timeout.ms": "3000",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "150",
    "replica.fetch.min.bytes": "1000000",
}


def kill_leader_repeatedly(
    tmp_path: Path, client: str, acks: str, idempotent: bool
) -> tuple[NumberedProducer, list[int], list[bytes]]:
    with LocalCluster(tmp_path, brokers=3, config=BROKER_CONFIG) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        topic = NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})
        admin.create_topics([topic])[TOPIC].result(60)
        producer = NumberedProducer(client, cluster.bootstrap_servers, acks, idempotent).start()
        try:
            for _ in range(KILLS):
                wait_all_caught_up(cluster, 0)
                producer.wait_for_progress(100)
                leader = cluster.wait_for_leader(TOPIC, 0)
                cluster.kill(leader)
                cluster.wait_for_leader(TOPIC, 0, not_in={leader})
                cluster.restart(leader)
            producer.wait_for_progress(100)
        finally:
            producer.stop()
        wait_all_caught_up(cluster, 0)
        numbers = read_numbered(cluster.bootstrap_servers)
    replicas = [replica_bytes(b.data_dir, 0, len(numbers)) for b in cluster.brokers.values()]
    return producer, numbers, replicas


@pytest.mark.slow
@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_acks_all_loses_nothing_across_leader_kills(tmp_path: Path, client: str) -> None:
    producer, numbers, replicas = kill_leader_repeatedly(tmp_path, client, "all", True)
    assert producer.acked, producer.errors[-5:]
    duplicates = [n for n, count in Counter(numbers).items() if count > 1]
    assert not duplicates, f"{len(duplicates)} numbers stored twice: {duplicates[:10]}"
    offsets = {number: offset for offset, number in enumerate(numbers)}
    missing = sorted(set(producer.acked) - set(offsets))
    assert not missing, f"{len(missing)} acknowledged records lost: {missing[:10]}"
    misplaced = {n: (o, offsets[n]) for n, o in producer.acked.items() if offsets[n] != o}
    assert not misplaced, f"acknowledged at another offset: {list(misplaced.items())[:10]}"
    assert replicas[0], "nothing replicated"
    assert all(r == replicas[0] for r in replicas), "replicas differ below the high watermark"


@pytest.mark.slow
def test_acks_1_loses_acknowledged_records_across_leader_kills(tmp_path: Path) -> None:
    producer, numbers, replicas = kill_leader_repeatedly(tmp_path, "confluent", "1", False)
    lost = set(producer.acked) - set(numbers)
    assert lost, "acks=1 should lose the records only the killed leader had"
    assert all(r == replicas[0] for r in replicas)  # what is left still agrees
