"""A broker cut off by the fault proxies (LocalCluster(proxied=True)): clients, followers
and ZooKeeper all lose it; its leadership moves; healed, it rejoins as a follower."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.testing.cluster import LocalCluster

pytestmark = pytest.mark.slow  # real processes, session timeouts to wait out


def test_partitioned_leader_is_replaced_and_rejoins(tmp_path: Path) -> None:
    config = {"zookeeper.session.timeout.ms": "3000", "replica.lag.time.max.ms": "10000"}
    with LocalCluster(tmp_path, brokers=3, config=config, proxied=True) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        admin.create_topics([NewTopic("cut", 1, 3)])["cut"].result(60)
        cluster.wait_for_isr("cut", 0, cluster.broker_ids)
        leader = cluster.wait_for_leader("cut", 0)
        cluster.partition(leader)
        try:
            successor = cluster.wait_for_leader("cut", 0, not_in={leader}, timeout_s=30)
            cluster.wait_for_isr("cut", 0, [b for b in cluster.broker_ids if b != leader])
            assert leader not in cluster.registered_brokers()
        finally:
            cluster.heal(leader)
        cluster.wait_for_brokers(cluster.broker_ids)
        cluster.wait_for_isr("cut", 0, cluster.broker_ids)
        assert cluster.leader("cut", 0) == successor
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
        producer.produce("cut", b"after the partition")
        assert producer.flush(30) == 0
