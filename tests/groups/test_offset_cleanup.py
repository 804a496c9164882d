"""Offset expiry, OffsetDelete and DeleteGroups in the group shard (Kafka 4.x's rules):
which offsets age out and from when, which partitions OffsetDelete refuses, and that
every removal is a tombstone the reloaded shard agrees with."""

from __future__ import annotations

import struct

import pytest

from oncelog.groups.messages import Protocol
from oncelog.groups.offsets import OffsetCommitPartition, OffsetCommitRequest
from oncelog.protocol.errors import ErrorCode as E

from .group_node import PID, Node, commit, join_with_id, txn_commit

RETENTION = 1_000


@pytest.fixture
def node() -> Node:
    return Node()


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, user data."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


def consumer_group(node: Node, group: str, *topics: str) -> str:
    """One member subscribed to ``topics``, Stable; its member id."""
    protocols = (Protocol("range", subscription(*topics)),)
    member = join_with_id(node, group, protocols=protocols)
    node.tick(node.now)
    generation = node.shard.groups.group(group).generation_id
    assert node.answers[node.sync(group, generation, member, {member: b""})].error_code == E.none
    return member


def expire(node: Node) -> int:
    return node.apply(node.shard.expire_offsets(node.now, RETENTION))


def committed(node: Node, group: str) -> set[tuple[str, int]]:
    return {(p.topic, p.partition) for p in node.shard.fetch_offsets(group, None).partitions}


def test_simple_group_offsets_expire_by_commit_time_and_the_group_goes(node: Node) -> None:
    commit(node, "simple", 5, partition=0)
    node.now = 500
    commit(node, "simple", 6, partition=1)
    node.now = RETENTION  # partition 0 is RETENTION old, partition 1 half of it
    assert expire(node) == 1
    assert committed(node, "simple") == {("t", 1)}
    node.now = 500 + RETENTION
    assert expire(node) == 1
    assert committed(node, "simple") == set()
    assert node.shard.groups.group("simple") is None, "an Empty group without offsets goes"
    reloaded = node.reload()
    assert reloaded.groups.group("simple") is None
    assert reloaded.fetch_offsets("simple", None).partitions == ()


def test_an_empty_group_ages_from_when_it_became_empty(node: Node) -> None:
    member = consumer_group(node, "g", "t")
    commit(node, "g", 5, generation=1, member=member)
    node.now = 5 * RETENTION  # the commit is old, but the group is Stable on topic t
    assert expire(node) == 0
    node.leave("g", member)  # Empty from now on
    node.now += RETENTION - 1
    assert expire(node) == 0
    node.now += 1
    assert expire(node) == 1
    assert node.shard.groups.group("g") is None


def commit_topic(node: Node, group: str, topic: str, member: str) -> None:
    request = OffsetCommitRequest(group, (OffsetCommitPartition(topic, 0, 5),), 1, member)
    (answer,) = node.apply(node.shard.commit_offsets(request, node.now)).partitions
    assert answer.error_code == E.none


def test_a_stable_consumer_group_loses_only_offsets_of_topics_it_left(node: Node) -> None:
    member = consumer_group(node, "g", "kept")
    for topic in ("kept", "left"):
        commit_topic(node, "g", topic, member)
    node.now = RETENTION
    assert expire(node) == 1
    assert committed(node, "g") == {("kept", 0)}
    assert node.shard.groups.group("g") is not None, "a Stable group stays"


def test_pending_transactional_offsets_never_expire(node: Node) -> None:
    commit(node, "simple", 5)
    txn_commit(node, "simple", 9)
    node.now = 10 * RETENTION
    assert expire(node) == 0
    node.marker(PID, committed=True)
    node.now += RETENTION
    assert expire(node) == 1


def test_offset_delete_rules(node: Node) -> None:
    member = consumer_group(node, "g", "t")
    commit(node, "g", 5, generation=1, member=member)
    answer = node.apply(node.shard.delete_offsets("g", {"t": [0], "other": [0, 1]}))
    assert answer.error_code == E.none
    assert {(p.topic, p.partition): p.error_code for p in answer.partitions} == {
        ("t", 0): E.group_subscribed_to_topic,
        ("other", 0): E.none,
        ("other", 1): E.none,
    }
    assert committed(node, "g") == {("t", 0)}
    node.leave("g", member)
    answer = node.apply(node.shard.delete_offsets("g", {"t": [0]}))
    assert [p.error_code for p in answer.partitions] == [E.none]
    assert committed(node, "g") == set()
    assert node.reload().fetch_offsets("g", None).partitions == ()
    assert node.shard.delete_offsets("missing", {"t": [0]}).response.error_code == (
        E.group_id_not_found
    )
    assert node.shard.delete_offsets("", {"t": [0]}).response.error_code == E.invalid_group_id


def test_offset_delete_of_a_busy_non_consumer_group_is_refused(node: Node) -> None:
    join_with_id(node, "connect", protocol_type="connect")
    answer = node.shard.delete_offsets("connect", {"t": [0]}).response
    assert answer.error_code == E.non_empty_group and answer.partitions == ()


def test_delete_group_also_tombstones_pending_offsets(node: Node) -> None:
    txn_commit(node, "solo", 9, partition=3)
    commit(node, "solo", 5)
    result = node.shard.delete_group("solo")
    assert {(r.key.topic, r.key.partition) for r in result.records[:-1]} == {("t", 0), ("t", 3)}
