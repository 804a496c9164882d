"""A cluster broker serves its listener a moment before its replicas open (the address it
registers in ZooKeeper must be bound first). A Produce that came in that moment met an
assertion, and its connection was closed with a traceback in the broker's log (seen in a
CTP cluster test's restarted broker); Kafka answers NOT_LEADER_OR_FOLLOWER for a partition
whose leadership it has not been told yet, and clients retry that."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from oncelog.broker.broker import Broker
from oncelog.broker.config import BrokerConfig
from oncelog.broker.handlers.metadata import _ClusterCatalog
from oncelog.client.connection import KafkaConnection, ProtocolClientError
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.testing.cluster import LocalCluster


def test_a_partition_asked_of_a_broker_still_joining_is_not_led_here(tmp_path: Path) -> None:
    # Never started: no ZooKeeper session, no replica manager yet (as between the listener's
    # start and ClusterNode.start opening the replicas).
    config = BrokerConfig.load(None, {"zookeeper.connect": "127.0.0.1:1", "broker.id": "1"})
    broker = Broker(config, tmp_path, "127.0.0.1", 0)
    assert broker.cluster is not None and broker.cluster.replicas is None
    with pytest.raises(KafkaError) as refused:
        broker.partition_for_clients("orders", 0)
    assert refused.value.code == ErrorCode.not_leader_or_follower


def test_a_topic_asked_of_a_broker_still_joining_is_not_auto_created(tmp_path: Path) -> None:
    """Before its metadata cache knows any broker, a Metadata request that may auto-create
    an existing topic was answered INVALID_REPLICATION_FACTOR ("0 live brokers"), which
    clients take as final (in the cluster CTP test, the feeder's input stopped growing right
    after a restarted broker gave that answer). The answer is LEADER_NOT_AVAILABLE."""
    config = BrokerConfig.load(None, {"zookeeper.connect": "127.0.0.1:1", "broker.id": "1"})
    broker = Broker(config, tmp_path, "127.0.0.1", 0)
    assert broker.cluster is not None and not broker.cluster.cache.brokers
    answer = asyncio.run(_ClusterCatalog(broker.cluster).auto_create("orders"))
    assert answer["error_code"] == ErrorCode.leader_not_available


def test_a_broker_still_joining_answers_with_the_whole_cluster(tmp_path: Path) -> None:
    """A broker restarted after SIGKILL serves its listener while it waits for ZooKeeper to
    expire its predecessor's registration, knowing no broker yet. It answered Metadata with
    an empty broker list, and librdkafka (2.10 and later) drops every broker a Metadata
    answer leaves out, in-flight requests included, and re-bootstraps: in the cluster CTP
    test the feeder's idempotent producer then delivered nothing for five minutes. Kafka's
    broker serves once it has caught up, so the answer now waits for the whole cluster.
    DescribeCluster (admin clients' bootstrap) waits the same way.

    The session timeout is long (10 s), so the restarted broker's joining lasts long enough
    for this request to reach it inside that window, whatever the machine's load."""
    with LocalCluster(tmp_path, brokers=2, config={SESSION_TIMEOUT: "10000"}) as cluster:
        victim = 2
        port = cluster.brokers[victim].port
        cluster.kill(victim)
        restarting = threading.Thread(target=cluster.restart, args=(victim,))
        restarting.start()
        try:
            address = f"127.0.0.1:{port}"
            with (
                _connect_when_listening(address, within_s=60) as metadata,
                _connect_when_listening(address, within_s=60) as describe,
                ThreadPoolExecutor(2) as pool,
            ):
                joined = "joined cluster" in cluster.brokers[victim].read_log(current_run=True)
                described = pool.submit(describe.request, ApiKey.DESCRIBE_CLUSTER, DESCRIBE)
                listed = pool.submit(metadata.request, ApiKey.METADATA, ALL_TOPICS)
                brokers = [
                    sorted(b.node_id for b in listed.result().brokers),
                    sorted(b.broker_id for b in described.result().brokers),
                ]
            assert not joined, "the requests came too late to meet the broker still joining"
        finally:
            restarting.join(120)
        assert brokers == [[1, 2], [1, 2]]


SESSION_TIMEOUT = "zookeeper.session.timeout.ms"
ALL_TOPICS = {
    "topics": None,
    "allow_auto_topic_creation": False,
    "include_topic_authorized_operations": False,
    "include_cluster_authorized_operations": False,
}

DESCRIBE = {"include_cluster_authorized_operations": False, "endpoint_type": 1}


def _connect_when_listening(address: str, within_s: float) -> KafkaConnection:
    deadline = time.monotonic() + within_s
    while True:
        try:
            return KafkaConnection(address, timeout_s=60)
        except ProtocolClientError:
            assert time.monotonic() < deadline, f"nothing listened on {address}"
            time.sleep(0.02)
