"""Committed offsets: OffsetCommit/OffsetFetch validation, transactional offsets (pending per
producer, materialised by the marker), KIP-447 fencing, and load == live."""

from __future__ import annotations

from oncelog.groups.offsets import (
    OffsetFetchPartition,
)
from oncelog.protocol.errors import ErrorCode as E

from .group_node import PID, Node, commit, join_with_id, stable_group, txn_commit


def fetched(
    node: Node, group: str = "g", partition: int = 0, stable: bool = False
) -> OffsetFetchPartition:
    (p,) = node.shard.fetch_offsets(group, {"t": [partition]}, stable).partitions
    return p


def test_simple_commit_creates_a_simple_group(node: Node) -> None:
    node.now = 1234
    assert commit(node, "solo", 10, metadata="meta") == E.none
    p = fetched(node, "solo")
    assert (p.offset, p.leader_epoch, p.metadata, p.error_code) == (10, 3, "meta", E.none)
    group = node.shard.groups.group("solo")
    assert group is not None and group.protocol_type is None  # Empty, no protocol: simple
    assert node.shard.offsets.committed("solo")[("t", 0)].commit_timestamp == 1234
    assert fetched(node, "solo", partition=5).offset == -1
    assert node.shard.fetch_offsets("unknown", {"t": [0]}).partitions[0].offset == -1
    assert node.shard.fetch_offsets("unknown", None).partitions == ()


def test_commit_to_missing_group_with_generation(node: Node) -> None:
    assert commit(node, "nope", generation=1, member="m") == E.group_id_not_found
    assert commit(node, "nope", generation=1, member="m", version=8) == E.illegal_generation
    assert node.shard.groups.group("nope") is None and not node.log


def test_member_commit_checks(node: Node) -> None:
    a, b = stable_group(node)
    assert commit(node, generation=1, member=a) == E.none
    assert commit(node, generation=0, member=a) == E.illegal_generation
    assert commit(node, generation=1, member="ghost") == E.unknown_member_id
    assert commit(node) == E.unknown_member_id  # generation -1, no member: Empty groups only
    assert commit(node, generation=1, member=a, metadata="x" * 5000) == E.offset_metadata_too_large
    node.join("g", a, client_id="c0")
    node.join("g", b, client_id="c1")  # generation 2 completes; CompletingRebalance
    assert commit(node, generation=2, member=a) == E.rebalance_in_progress


def test_commit_keeps_session_alive(node: Node) -> None:
    a, b = stable_group(node)
    node.now = 9_000
    assert commit(node, generation=1, member=a) == E.none
    node.heartbeat("g", 1, b)
    node.tick(12_000)  # a's session counts from the commit
    assert a in node.shard.groups.group("g").members


def test_fetch_all_offsets(node: Node) -> None:
    commit(node, "solo", 1, partition=1)
    commit(node, "solo", 0, partition=0)
    parts = node.shard.fetch_offsets("solo", None).partitions
    assert [(p.partition, p.offset) for p in parts] == [(0, 0), (1, 1)]


def test_transactional_offsets_pending_until_commit_marker(node: Node) -> None:
    commit(node, "solo", 5)
    assert txn_commit(node, "solo", 20) == E.none
    assert fetched(node, "solo").offset == 5  # not visible yet
    unstable = fetched(node, "solo", stable=True)
    assert (unstable.error_code, unstable.offset) == (E.unstable_offset_commit, -1)
    assert fetched(node, "solo", partition=1, stable=True).error_code == E.none
    all_parts = node.shard.fetch_offsets("solo", None, require_stable=True).partitions
    assert all_parts[0].error_code == E.unstable_offset_commit
    node.marker(PID, committed=True)
    assert fetched(node, "solo", stable=True).offset == 20
    assert node.shard.offsets.open_transactions("solo") == frozenset()


def test_abort_marker_drops_transactional_offsets(node: Node) -> None:
    commit(node, "solo", 5)
    txn_commit(node, "solo", 20)
    node.marker(PID, committed=False)
    p = fetched(node, "solo", stable=True)
    assert (p.offset, p.error_code) == (5, E.none)
    node.marker(PID, committed=True)  # a marker with nothing pending changes nothing
    assert fetched(node, "solo").offset == 5


def test_transactional_offsets_of_two_producers_are_separate(node: Node) -> None:
    txn_commit(node, "solo", 7, pid=1)
    txn_commit(node, "solo", 8, pid=2, partition=1)
    node.marker(1, committed=False)
    assert fetched(node, "solo", partition=1, stable=True).error_code == E.unstable_offset_commit
    node.marker(2, committed=True)
    assert fetched(node, "solo", partition=1, stable=True).offset == 8
    assert fetched(node, "solo").offset == -1


def test_later_plain_commit_wins_over_earlier_transactional_one(node: Node) -> None:
    txn_commit(node, "solo", 20)  # written first
    commit(node, "solo", 30)  # written later
    node.marker(PID, committed=True)
    assert fetched(node, "solo").offset == 30


def test_kip447_generation_and_member_fencing(node: Node) -> None:
    a, b = stable_group(node)
    assert txn_commit(node, generation=1, member=a) == E.none
    assert txn_commit(node, generation=0, member=a) == E.illegal_generation
    assert txn_commit(node, generation=1, member="zombie") == E.unknown_member_id
    assert txn_commit(node) == E.none  # old clients (TxnOffsetCommit < v3) carry no member
    assert txn_commit(node, "nope", generation=1, member=a) == E.illegal_generation
    node.join("g", a, client_id="c0")
    node.join("g", b, client_id="c1")  # CompletingRebalance: not enforced for transactions
    assert txn_commit(node, generation=2, member=a) == E.none


def test_kip447_fenced_instance_id(node: Node) -> None:
    rid = node.join(instance="i-1")
    node.tick(0)
    member = node.answers[rid].member_id
    node.sync("g", 1, member, {member: b""})
    assert txn_commit(node, generation=1, member=member, instance="i-1") == E.none
    assert txn_commit(node, generation=1, member="old-id", instance="i-1") == E.fenced_instance_id
    assert txn_commit(node, generation=1, member=member, instance="i-2") == E.unknown_member_id


def test_tombstones_delete_committed_and_pending(node: Node) -> None:
    commit(node, "solo", 5)
    txn_commit(node, "solo", 9)
    join_with_id(node, "other")  # a member joining: PreparingRebalance
    result = node.shard.delete_group("solo")
    assert result.response == E.none
    node.apply(result)
    assert node.shard.groups.group("solo") is None
    node.marker(PID, committed=True)
    assert node.shard.fetch_offsets("solo", None).partitions == ()
    assert node.shard.delete_group("other").response == E.non_empty_group
    assert node.shard.delete_group("missing").response == E.group_id_not_found


def test_load_equals_live(node: Node) -> None:
    a, _b = stable_group(node)
    commit(node, generation=1, member=a, offset=3)
    commit(node, "solo", 5, partition=2)
    txn_commit(node, "solo", 50, pid=1, partition=2)
    txn_commit(node, "solo", 60, pid=2, partition=3)
    node.marker(1, committed=True)
    txn_commit(node, "g", 70, pid=3)
    loaded = node.reload()
    for group in ("g", "solo"):
        assert loaded.offsets.committed(group) == node.shard.offsets.committed(group)
        assert loaded.offsets.open_transactions(group) == node.shard.offsets.open_transactions(
            group
        )
    for pid in (1, 2, 3):
        assert loaded.offsets.pending(pid) == node.shard.offsets.pending(pid)
    assert loaded.fetch_offsets("g", {"t": [0]}, True) == node.shard.fetch_offsets(
        "g", {"t": [0]}, True
    )
