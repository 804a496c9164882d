"""Random interleavings of every group and offset operation (hypothesis). After each step:

- no transition outside the table (IllegalTransition would raise);
- every JoinGroup/SyncGroup sent is answered exactly once, still parked, or reported
  abandoned: nothing is lost, nothing answered twice;
- structural invariants of each group hold;
- a shard loaded from the log has the same committed and pending offsets, and the same
  Stable/Empty groups, as the live one (the live path and the load path agree).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncelog.groups import GroupConfig
from oncelog.groups.classic_group import GroupState
from oncelog.groups.messages import JoinGroupResponse, Protocol
from oncelog.groups.offsets import (
    OffsetCommitPartition,
    OffsetCommitRequest,
    TxnOffsetCommitRequest,
)

from .group_node import Node

S = GroupState
PROTOCOLS = [
    (Protocol("range", b"r"),),
    (Protocol("roundrobin", b"x"), Protocol("range", b"r")),
    (Protocol("sticky", b"s"),),
]

ops = st.one_of(
    st.tuples(
        st.just("join_new"),
        st.integers(0, 2),
        st.sampled_from([3, 5]),
        st.integers(0, 2),
        st.booleans(),
    ),
    st.tuples(st.just("rejoin"), st.integers(0, 9), st.integers(0, 2)),
    st.tuples(st.just("sync"), st.integers(0, 9), st.integers(-1, 0)),
    st.tuples(st.just("heartbeat"), st.integers(0, 9)),
    st.tuples(st.just("leave"), st.integers(0, 9)),
    st.tuples(st.just("commit"), st.integers(-1, 9), st.integers(0, 100), st.integers(0, 2)),
    st.tuples(
        st.just("txn"),
        st.integers(1, 3),
        st.integers(-1, 9),
        st.integers(0, 100),
        st.integers(0, 2),
    ),
    st.tuples(st.just("marker"), st.integers(1, 3), st.booleans()),
    st.tuples(st.just("advance"), st.sampled_from([0, 1, 1_000, 4_000, 11_000, 40_000])),
    st.tuples(st.just("drive")),  # what well-behaved clients do next: rejoin, wait, sync
)


def group_view(shard: Any, group_id: str) -> Any:
    g = shard.groups.group(group_id)
    if g is None:
        return None
    return (
        g.state,
        g.generation_id,
        g.protocol_type,
        g.protocol_name,
        g.leader_id,
        {
            m: (
                x.group_instance_id,
                x.assignment,
                x.session_timeout_ms,
                x.rebalance_timeout_ms,
                x.metadata(g.protocol_name) if g.protocol_name else b"",
            )
            for m, x in g.members.items()
        },
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, max_size=40))
def test_random_operations_keep_invariants(steps: list[tuple[Any, ...]]) -> None:
    node = Node(GroupConfig(initial_rebalance_delay_ms=1_000, min_session_timeout_ms=1))
    sent: list[Any] = []
    known: list[str] = []  # member ids the coordinator handed out

    def member(i: int) -> str:
        return known[i % len(known)] if known else "nobody"

    def generation() -> int:
        g = node.shard.groups.group("g")
        return g.generation_id if g else 0

    for step in steps:
        kind = step[0]
        if kind == "join_new":
            _, client, version, proto, static = step
            instance = f"inst-{client}" if static else None
            sent.append(
                node.join(
                    "g",
                    client_id=f"c{client}",
                    version=version,
                    protocols=PROTOCOLS[proto],
                    instance=instance,
                    session=10_000,
                    rebalance=15_000,
                )
            )
        elif kind == "rejoin":
            m = member(step[1])
            g = node.shard.groups.group("g")
            x = g.members.get(m) if g else None
            instance = x.group_instance_id if x else None
            sent.append(
                node.join(
                    "g",
                    m,
                    protocols=PROTOCOLS[step[2]],
                    instance=instance,
                    session=10_000,
                    rebalance=15_000,
                )
            )
        elif kind == "sync":
            m = member(step[1])
            g = node.shard.groups.group("g")
            assignment = {x: x.encode() for x in (g.members if g else ())}
            sent.append(node.sync("g", generation() + step[2], m, assignment))
        elif kind == "heartbeat":
            node.heartbeat("g", generation(), member(step[1]))
        elif kind == "leave":
            node.leave("g", member(step[1]))
        elif kind == "commit":
            _, who, offset, partition = step
            group, gen, m = ("solo", -1, "") if who < 0 else ("g", generation(), member(who))
            req = OffsetCommitRequest(
                group, (OffsetCommitPartition("t", partition, offset),), gen, m
            )
            node.apply(node.shard.commit_offsets(req, node.now))
        elif kind == "txn":
            _, pid, who, offset, partition = step
            group, gen, m = ("solo", -1, "") if who < 0 else ("g", generation(), member(who))
            req = TxnOffsetCommitRequest(
                "tx", group, pid, 0, (OffsetCommitPartition("t", partition, offset),), gen, m
            )
            node.apply(node.shard.commit_transactional_offsets(req, node.now))
        elif kind == "marker":
            node.marker(step[1], step[2])
        elif kind == "drive":
            drive(node, sent)
        else:
            node.tick(node.now + step[1])

        for response in node.answers.values():
            if isinstance(response, JoinGroupResponse) and response.member_id:
                if response.member_id not in known:
                    known.append(response.member_id)
        check(node, sent)


def drive(node: Node, sent: list[Any]) -> None:
    g = node.shard.groups.group("g")
    if g is None:
        return
    for m in list(g.pending_members):
        sent.append(node.join("g", m, session=10_000, rebalance=15_000))
    if g.state is S.PREPARING_REBALANCE:
        for m, x in list(g.members.items()):
            if not x.awaiting_join and m in g.members:
                sent.append(
                    node.join(
                        "g",
                        m,
                        protocols=x.protocols,
                        session=10_000,
                        rebalance=15_000,
                        instance=x.group_instance_id,
                    )
                )
    node.tick(node.now + 1_000)
    if g.state is S.COMPLETING_REBALANCE:
        for m in [m for m in g.members if m != g.leader_id] + [g.leader_id]:
            sent.append(node.sync("g", g.generation_id, m, {x: x.encode() for x in g.members}))


def check(node: Node, sent: list[Any]) -> None:
    shard = node.shard
    # nothing lost, nothing answered twice
    assert node.answered_twice == []
    parked = set()
    for g in shard.groups.groups.values():
        for m in g.members.values():
            parked.update(r for r in (m.join_request, m.sync_request) if r is not None)
    for rid in sent:
        assert (rid in node.answers) + (rid in parked) + (rid in node.abandoned) == 1, rid
    # structure
    for g in shard.groups.groups.values():
        if g.members:
            assert g.leader_id in g.members
        assert {
            m.group_instance_id: i for i, m in g.members.items() if m.group_instance_id is not None
        } == g.static_members
        if g.state in (S.STABLE, S.COMPLETING_REBALANCE):
            assert g.members and not any(m.awaiting_join for m in g.members.values())
            assert g.protocol_name in g.candidate_protocols()
        if g.state is S.EMPTY:
            assert not g.members
        if g.state is not S.COMPLETING_REBALANCE:
            assert not any(m.awaiting_sync for m in g.members.values())
    # load == live
    loaded = node.reload()
    for group in ("g", "solo"):
        assert loaded.offsets.committed(group) == shard.offsets.committed(group)
        assert loaded.offsets.open_transactions(group) == shard.offsets.open_transactions(group)
        live = shard.groups.group(group)
        if live is not None and live.state in (S.STABLE, S.EMPTY):
            assert group_view(loaded, group) == group_view(shard, group)
    for pid in (1, 2, 3):
        assert loaded.offsets.pending(pid) == shard.offsets.pending(pid)
