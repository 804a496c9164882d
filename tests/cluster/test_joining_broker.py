"""A cluster broker serves its listener a moment before its replicas open (the address it
registers in ZooKeeper must be bound first). A Produce that came in that moment met an
assertion, and its connection was closed with a traceback in the broker's log (seen in a
CTP cluster test's restarted broker); Kafka answers NOT_LEADER_OR_FOLLOWER for a partition
whose leadership it has not been told yet, and clients retry that."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from oncelog.broker.broker import Broker
from oncelog.broker.config import BrokerConfig
from oncelog.broker.handlers.metadata import _ClusterCatalog
from oncelog.protocol.errors import ErrorCode, KafkaError


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
