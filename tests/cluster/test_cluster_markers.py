"""Which marker outcomes the coordinator takes as final in a cluster: a partition gone from
this broker's metadata was deleted (no marker needed, as Kafka skips it); a leader that
does not know a partition our metadata holds only lags behind, and is retried."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable
from typing import Any, cast

from oncelog.broker.txn_markers import LocalMarkerWriter, TopicPartition
from oncelog.cluster.markers import ClusterMarkerWriter
from oncelog.cluster.metadata import MetadataCache
from oncelog.cluster.zookeeper import NO_LEADER, PartitionState, TopicAssignment
from oncelog.protocol.errors import ErrorCode

ME = 1


class LaggingLocalWriter:
    """This broker's own marker writer, answering what its replica manager knows."""

    def __init__(self, answers: dict[TopicPartition, ErrorCode]) -> None:
        self.answers = answers
        self.asked: list[TopicPartition] = []

    async def write(
        self,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        coordinator_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        asked = list(partitions)
        self.asked += asked
        return {tp: self.answers[tp] for tp in asked}


class Node:
    def __init__(self, cache: MetadataCache) -> None:
        self.broker_id = ME
        self.cache = cache


def cache_with(topic: str, leaders: dict[int, int]) -> MetadataCache:
    cache = MetadataCache()
    replicas = {index: (leader,) for index, leader in leaders.items()}
    cache.topics[topic] = TopicAssignment(topic, uuid.uuid4(), replicas)
    for index, leader in leaders.items():
        cache.states[topic, index] = PartitionState(leader, 0, (leader,), 1)
    return cache


def write(
    cache: MetadataCache, local: LaggingLocalWriter, partitions: list[TopicPartition]
) -> dict[TopicPartition, ErrorCode]:
    writer = ClusterMarkerWriter(cast(Any, Node(cache)), cast(LocalMarkerWriter, local))
    return asyncio.run(writer.write(7, 0, True, 3, partitions))


def test_a_partition_missing_from_our_metadata_needs_no_marker() -> None:
    cache = cache_with("orders", {0: ME})
    local = LaggingLocalWriter({("orders", 0): ErrorCode.none})
    outcomes = write(cache, local, [("orders", 0), ("deleted", 0), ("orders", 5)])
    assert outcomes == {
        ("orders", 0): ErrorCode.none,
        ("deleted", 0): ErrorCode.unknown_topic_or_partition,
        ("orders", 5): ErrorCode.unknown_topic_or_partition,
    }
    assert local.asked == [("orders", 0)]


def test_a_leader_that_does_not_know_the_partition_yet_is_retried() -> None:
    cache = cache_with("fresh", {0: ME, 1: NO_LEADER})
    local = LaggingLocalWriter({("fresh", 0): ErrorCode.unknown_topic_or_partition})
    outcomes = write(cache, local, [("fresh", 0), ("fresh", 1)])
    assert outcomes == {
        ("fresh", 0): ErrorCode.not_leader_or_follower,
        ("fresh", 1): ErrorCode.not_leader_or_follower,
    }


def test_stale_marker_refusals_stay_final() -> None:
    cache = cache_with("orders", {0: ME, 1: ME})
    local = LaggingLocalWriter(
        {
            ("orders", 0): ErrorCode.invalid_producer_epoch,
            ("orders", 1): ErrorCode.transaction_coordinator_fenced,
        }
    )
    outcomes = write(cache, local, [("orders", 0), ("orders", 1)])
    assert outcomes == {
        ("orders", 0): ErrorCode.invalid_producer_epoch,
        ("orders", 1): ErrorCode.transaction_coordinator_fenced,
    }
