"""Classic group protocol: one test per rule (Kafka 4.x GroupMetadataManager classicGroup*)."""

from __future__ import annotations

import pytest

from oncelog.groups import GroupConfig
from oncelog.groups.classic_group import VALID_PREVIOUS_STATES, ClassicGroup, GroupState
from oncelog.groups.messages import (
    JoinGroupResponse,
    Protocol,
    SyncGroupRequest,
    SyncGroupResponse,
)
from oncelog.protocol.errors import ErrorCode as E
from oncelog.state_machines import IllegalTransition

from .group_node import Node, join_with_id, stable_group

S = GroupState


def state(node: Node, group: str = "g") -> GroupState:
    return node.shard.groups.group(group).state


def test_member_id_required_round_then_join_completes(node: Node) -> None:
    first = node.answers[node.join(client_id="app")]
    assert first == JoinGroupResponse(E.member_id_required, member_id="app-uuid1")
    assert state(node) is S.EMPTY  # the pending member is not a member yet
    # a new group is written at once (Kafka's empty group metadata record)
    assert len(node.log) == 1
    rid = node.join(member_id="app-uuid1", client_id="app")
    assert rid not in node.answers and state(node) is S.PREPARING_REBALANCE
    node.tick(0)  # the initial rebalance delay (0 here) passes
    resp = node.answers[rid]
    assert resp.error_code == E.none and resp.generation_id == 1
    assert resp.leader == "app-uuid1" and resp.protocol_name == "range"
    assert [m.member_id for m in resp.members] == ["app-uuid1"]
    assert state(node) is S.COMPLETING_REBALANCE


def test_join_v3_adds_member_without_the_extra_round(node: Node) -> None:
    rid = node.join(version=3)
    node.tick(0)
    assert node.answers[rid].error_code == E.none and node.answers[rid].member_id == "c-uuid1"


def test_two_members_leader_assignment_via_sync(node: Node) -> None:
    a = join_with_id(node, client_id="a")
    b = join_with_id(node, client_id="b")
    node.tick(0)
    ja = [
        r for r in node.answers.values() if isinstance(r, JoinGroupResponse) and r.member_id == a
    ][-1]
    jb = [
        r for r in node.answers.values() if isinstance(r, JoinGroupResponse) and r.member_id == b
    ][-1]
    assert ja.leader == jb.leader == a
    assert len(ja.members) == 2 and jb.members == ()
    sb = node.sync("g", 1, b)
    assert sb not in node.answers  # the follower waits for the leader
    log_before = len(node.log)
    sa = node.sync("g", 1, a, {a: b"pa", b: b"pb"})
    assert node.answers[sa] == SyncGroupResponse(E.none, b"pa", "consumer", "range")
    assert node.answers[sb] == SyncGroupResponse(E.none, b"pb", "consumer", "range")
    assert state(node) is S.STABLE
    assert len(node.log) == log_before + 1  # the group metadata record with the assignment
    # a late sync in Stable gets the stored assignment at once
    again = node.sync("g", 1, b)
    assert node.answers[again].assignment == b"pb"


def test_missing_assignment_is_empty(node: Node) -> None:
    a, b = stable_group(node)
    shard_group = node.shard.groups.group("g")
    shard_group.members[b].assignment = b"x"
    # a new generation where the leader assigns nothing to b
    ja = node.join("g", a, client_id="c0")
    jb = node.join("g", b, client_id="c1")
    assert node.answers[ja].generation_id == 2 and node.answers[jb].generation_id == 2
    sb = node.sync("g", 2, b)
    node.sync("g", 2, a, {a: b"only-a"})
    assert node.answers[sb].assignment == b""


def test_initial_rebalance_delay_extends_while_members_arrive() -> None:
    node = Node(GroupConfig(initial_rebalance_delay_ms=3_000))
    a = join_with_id(node, client_id="a", rebalance=10_000)
    g = node.shard.groups.group("g")
    assert g.join_deadline_ms == 3_000
    node.now = 1_000
    join_with_id(node, client_id="b", rebalance=10_000)
    node.tick(3_000)  # a new member arrived: wait another delay
    assert state(node) is S.PREPARING_REBALANCE and g.join_deadline_ms == 6_000
    node.tick(6_000)
    assert state(node) is S.COMPLETING_REBALANCE and len(g.members) == 2
    assert g.leader_id == a


def test_heartbeat_rules(node: Node) -> None:
    a, b = stable_group(node)
    assert node.heartbeat("g", 1, a) == E.none
    assert node.heartbeat("g", 2, a) == E.illegal_generation
    assert node.heartbeat("g", 1, "nobody") == E.unknown_member_id
    assert node.heartbeat("other", 1, a) == E.unknown_member_id
    node.join("g", a, client_id="c0")  # the leader rejoins: rebalance
    assert state(node) is S.PREPARING_REBALANCE
    assert node.heartbeat("g", 1, b) == E.rebalance_in_progress


def test_session_expiry_removes_member_and_rebalances(node: Node) -> None:
    a, b = stable_group(node)  # sessions of 10 s from t=0
    node.now = 8_000
    assert node.heartbeat("g", 1, a) == E.none
    node.tick(10_000)  # b never heartbeat
    g = node.shard.groups.group("g")
    assert b not in g.members and state(node) is S.PREPARING_REBALANCE
    assert node.heartbeat("g", 1, a) == E.rebalance_in_progress
    rid = node.join("g", a, client_id="c0")  # all (one) members rejoined: completes now
    resp = node.answers[rid]
    assert resp.generation_id == 2 and [m.member_id for m in resp.members] == [a]


def test_membership_changes_are_told_for_the_log(node: Node) -> None:
    """What Kafka's coordinator logs at INFO comes back as values, for the broker to log
    (a stalled rebalance is then readable in the broker's log)."""
    a, b = stable_group(node)
    assert node.events == [
        "group g generation 0: new member c0-uuid1 is pending until it rejoins with its id",
        "group g generation 0: preparing to rebalance in state Empty: 1 of 1 member(s) "
        "joined, 0 pending",
        "group g generation 0: new member c1-uuid2 is pending until it rejoins with its id",
        f"group g generation 1: stabilized with leader {a} and 2 member(s): {a}, {b}",
        f"group g generation 1: assignment received from leader {a}",
    ]
    node.events.clear()
    node.now = 8_000
    node.heartbeat("g", 1, a)
    node.tick(10_000)  # b never heartbeat
    node.join("g", "nobody", client_id="c9")
    assert node.events == [
        f"group g generation 1: member {b} failed its session timeout: removed",
        "group g generation 1: preparing to rebalance in state Stable: 0 of 1 member(s) "
        "joined, 0 pending",
        "group g generation 1: JoinGroup of nobody answered UNKNOWN_MEMBER_ID",
    ]


def test_rebalance_timeout_drops_members_that_did_not_rejoin(node: Node) -> None:
    a, b = stable_group(node)
    node.now = 5_000
    node.heartbeat("g", 1, b)
    rid = node.join("g", a, client_id="c0", rebalance=20_000)
    assert rid not in node.answers
    node.tick(9_000)
    node.heartbeat("g", 1, b)  # b heartbeats (REBALANCE_IN_PROGRESS) but never rejoins
    node.tick(25_000)
    resp = node.answers[rid]
    assert resp.generation_id == 2 and [m.member_id for m in resp.members] == [a]
    assert node.heartbeat("g", 2, b) == E.unknown_member_id


def test_leave_removes_members_and_rebalances(node: Node) -> None:
    a, b, c = stable_group(node, 3)
    resp = node.leave("g", b, "ghost")
    assert [(m.member_id, m.error_code) for m in resp.members] == [
        (b, E.none),
        ("ghost", E.unknown_member_id),
    ]
    assert state(node) is S.PREPARING_REBALANCE
    ra = node.join("g", a, client_id="c0")
    rc = node.join("g", c, client_id="c2")
    assert node.answers[ra].generation_id == node.answers[rc].generation_id == 2
    # everybody leaves: the group becomes Empty and that is written
    node.leave("g", a, c)
    assert state(node) is S.EMPTY
    assert node.shard.groups.group("g").generation_id == 3
    assert node.log[-1].key is not None


def test_leave_of_parked_joiner_answers_its_join(node: Node) -> None:
    a, _b = stable_group(node)
    rid = node.join("g", a, client_id="c0")
    node.leave("g", a)
    assert node.answers[rid].error_code == E.unknown_member_id


def test_sync_generation_and_state_checks(node: Node) -> None:
    a, b = stable_group(node)
    assert node.answers[node.sync("g", 7, a)].error_code == E.illegal_generation
    assert node.answers[node.sync("g", 1, "ghost")].error_code == E.unknown_member_id
    assert node.answers[node.sync("nope", 1, a)].error_code == E.unknown_member_id
    node.join("g", a, client_id="c0")
    assert node.answers[node.sync("g", 1, b)].error_code == E.rebalance_in_progress


def test_followers_parked_sync_fails_when_rebalance_starts(node: Node) -> None:
    a = join_with_id(node, client_id="a")
    b = join_with_id(node, client_id="b")
    node.tick(0)
    sb = node.sync("g", 1, b)
    node.join("g", b, client_id="b", protocols=(Protocol("range", b"new"),))  # metadata changed
    assert node.answers[sb].error_code == E.rebalance_in_progress
    assert state(node) is S.PREPARING_REBALANCE
    assert a


def test_pending_sync_expiry_removes_silent_members(node: Node) -> None:
    a = join_with_id(node, client_id="a", rebalance=20_000)
    b = join_with_id(node, client_id="b", rebalance=20_000)
    node.tick(0)
    node.sync("g", 1, a, {a: b"x"})  # the leader syncs; b never does
    assert state(node) is S.STABLE
    node.now = 15_000
    node.heartbeat("g", 1, a)
    node.tick(20_000)
    g = node.shard.groups.group("g")
    assert b not in g.members and state(node) is S.PREPARING_REBALANCE


def test_pending_member_expires(node: Node) -> None:
    first = node.answers[node.join(session=6_000)]
    assert first.member_id in node.shard.groups.group("g").pending_members
    node.tick(6_000)
    assert not node.shard.groups.group("g").pending_members
    assert node.heartbeat("g", 0, first.member_id) == E.unknown_member_id


def test_session_timeout_bounds_and_group_id() -> None:
    node = Node(GroupConfig(min_session_timeout_ms=6_000, max_session_timeout_ms=60_000))
    assert node.answers[node.join(session=5_999)].error_code == E.invalid_session_timeout
    assert node.answers[node.join(session=60_001)].error_code == E.invalid_session_timeout
    assert node.answers[node.join(group="")].error_code == E.invalid_group_id
    assert node.shard.groups.group("g") is None


def test_inconsistent_protocols(node: Node) -> None:
    stable_group(node, 1)
    r1 = node.join(protocols=(Protocol("roundrobin", b""),))
    assert node.answers[r1].error_code == E.inconsistent_group_protocol
    r2 = node.join(protocol_type="connect")
    assert node.answers[r2].error_code == E.inconsistent_group_protocol
    assert node.answers[node.join(protocols=())].error_code == E.inconsistent_group_protocol


def test_protocol_election_takes_common_protocol_by_votes(node: Node) -> None:
    rr, rg, st = Protocol("roundrobin", b"1"), Protocol("range", b"2"), Protocol("sticky", b"3")
    join_with_id(node, client_id="a", protocols=(rr, rg, st))
    join_with_id(node, client_id="b", protocols=(rg, rr))
    join_with_id(node, client_id="c", protocols=(rg, st, rr))
    node.tick(0)
    assert node.shard.groups.group("g").protocol_name == "range"  # 2 votes to 1


def test_join_to_unknown_group_with_member_id(node: Node) -> None:
    resp = node.answers[node.join("fresh", "someone")]
    assert resp.error_code == E.unknown_member_id
    assert node.shard.groups.group("fresh") is None


def test_group_max_size() -> None:
    node = Node(GroupConfig(initial_rebalance_delay_ms=0, max_size=1))
    stable_group(node, 1)
    resp = node.answers[node.join(version=3, client_id="x")]
    assert resp.error_code == E.group_max_size_reached


def test_static_member_rejoin_replaces_member_without_rebalance(node: Node) -> None:
    rid = node.join(instance="i-1", client_id="a")  # no MEMBER_ID_REQUIRED for static members
    node.tick(0)
    old = node.answers[rid].member_id
    assert old == "i-1-uuid1"
    node.sync("g", 1, old, {old: b"asg"})
    assert state(node) is S.STABLE
    rid2 = node.join(instance="i-1", client_id="a", version=9)  # restarted, same instance
    resp = node.answers[rid2]
    assert resp.error_code == E.none and resp.generation_id == 1 and resp.member_id != old
    assert resp.skip_assignment and state(node) is S.STABLE
    g = node.shard.groups.group("g")
    assert g.static_members["i-1"] == resp.member_id and g.leader_id == resp.member_id
    sync = node.shard.sync_group(
        SyncGroupRequest("g", 1, old, {}, group_instance_id="i-1"), "r", node.now
    )
    assert sync.response.error_code == E.fenced_instance_id
    assert node.reload().groups.group("g").static_members == {"i-1": resp.member_id}


def test_describe_and_list(node: Node) -> None:
    a, b = stable_group(node)
    (d,) = node.shard.describe_groups(["g"])
    assert d.state == "Stable" and d.protocol_type == "consumer" and d.protocol_data == "range"
    assert [(m.member_id, m.metadata, m.assignment) for m in d.members] == [
        (a, b"m", a.encode()),
        (b, b"m", b.encode()),
    ]
    (missing,) = node.shard.describe_groups(["nope"])
    assert missing.state == "Dead" and missing.members == ()
    assert [g.group_id for g in node.shard.list_groups(["stable"])] == ["g"]
    assert node.shard.list_groups(["Empty"]) == ()


def test_transition_table_refuses_illegal_moves() -> None:
    g = ClassicGroup("g")
    with pytest.raises(IllegalTransition, match="Empty -> Stable"):
        g.transition_to(S.STABLE, 0)
    g.transition_to(S.PREPARING_REBALANCE, 0)
    g.transition_to(S.COMPLETING_REBALANCE, 0)
    g.transition_to(S.STABLE, 0)
    g.transition_to(S.DEAD, 0)


def test_loaded_group_equals_live_checkpoint(node: Node) -> None:
    _a, _b = stable_group(node)
    live = node.shard.groups.group("g")
    loaded_shard = node.reload()
    loaded = loaded_shard.groups.group("g")
    assert loaded.state is S.STABLE
    assert (loaded.generation_id, loaded.protocol_type, loaded.protocol_name, loaded.leader_id) == (
        live.generation_id,
        live.protocol_type,
        live.protocol_name,
        live.leader_id,
    )
    assert {
        m: (x.assignment, x.session_timeout_ms, x.rebalance_timeout_ms)
        for m, x in loaded.members.items()
    } == {
        m: (x.assignment, x.session_timeout_ms, x.rebalance_timeout_ms)
        for m, x in live.members.items()
    }
    # loaded members must heartbeat within their session timeout
    loaded_shard.loaded(100)
    assert loaded_shard.next_deadline() == 100 + 10_000


def test_public_api_is_pinned() -> None:
    import oncelog.groups

    assert sorted(oncelog.groups.__all__) == oncelog.groups.__all__
    for name in oncelog.groups.__all__:
        assert getattr(oncelog.groups, name) is not None


def test_every_state_documents_what_it_means_and_what_leaves_it() -> None:
    for s in GroupState:
        doc = s.__doc__ or ""
        assert doc != GroupState.__doc__, s
        assert "leaves" in doc or "nothing leaves it" in doc, s


def test_the_transition_table_is_read_only() -> None:
    with pytest.raises(TypeError):
        VALID_PREVIOUS_STATES[GroupState.EMPTY] = frozenset()  # type: ignore[index]
