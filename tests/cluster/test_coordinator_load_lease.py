"""A coordinator load on a broker whose ZooKeeper lease has lapsed for a moment.

Seen in the cluster CTP kill loop: a restarted broker was elected leader of both
coordinator partitions of a loop right after registering, while its lease (counted from
before the wait for its previous session to expire, and not renewed while the loop opened
its replicas) had just lapsed. Both loads were refused ("cannot confirm its ZooKeeper
session") and never tried again: the broker led the partitions without coordinating them
until the test ended. The load now waits for the lease (one session timeout at most).
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest

from oncelog.broker.coordinator_runtime import LoadReport
from oncelog.cluster import coordinators
from oncelog.cluster.coordinators import InternalTopicSpec, ReplicatedInternalTopic
from oncelog.cluster.lease import SessionLease
from oncelog.protocol.errors import ErrorCode, KafkaError

SESSION_S = 1.0


class Node:
    """What ReplicatedInternalTopic asks of a ClusterNode: its lease and its replicas,
    which refuse to serve as leader while the lease does not hold (as ReplicaManager
    does)."""

    def __init__(self) -> None:
        self.lease = SessionLease(SESSION_S)
        self.lease.grant(1, time.monotonic() - 2 * SESSION_S)  # lapsed
        self.cache = SimpleNamespace(topics={})
        self.replicas = self

    def holds_lease(self) -> bool:
        return self.lease.holds(time.monotonic())

    def leader_partition(self, topic: str, index: int) -> Any:
        if not self.holds_lease():
            raise KafkaError(ErrorCode.not_leader_or_follower, "cannot confirm its session")
        return SimpleNamespace(log=SimpleNamespace(log_end_offset=0), high_watermark=0)


def test_a_load_waits_for_the_lease_to_be_renewed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(coordinators, "replay_partition", lambda led, shard: LoadReport(0, 0))
    node = Node()
    topic = ReplicatedInternalTopic(node, InternalTopicSpec("__consumer_offsets", 1, 3, {}))  # type: ignore[arg-type]

    async def renewed_while_loading() -> LoadReport:
        loading = asyncio.ensure_future(topic.load(0, shard=None))  # type: ignore[arg-type]
        await asyncio.sleep(SESSION_S / 4)
        node.lease.renew(1, time.monotonic())  # the next round trip to ZooKeeper
        return await asyncio.wait_for(loading, 5 * SESSION_S)

    assert asyncio.run(renewed_while_loading()) == LoadReport(0, 0)


def test_a_load_still_fails_when_the_lease_never_comes_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(coordinators, "replay_partition", lambda led, shard: LoadReport(0, 0))
    topic = ReplicatedInternalTopic(Node(), InternalTopicSpec("__consumer_offsets", 1, 3, {}))  # type: ignore[arg-type]
    started = time.monotonic()
    with pytest.raises(KafkaError, match="cannot confirm"):
        asyncio.run(topic.load(0, shard=None))  # type: ignore[arg-type]
    assert time.monotonic() - started >= SESSION_S  # it waited one session timeout first
