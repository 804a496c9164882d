"""A tiny in-memory broker around one GroupCoordinatorShard: it writes every result's records
to a list standing for the __consumer_offsets partition (as bytes), replays them as the real
broker must, and keeps the answers to parked requests; and the client rounds several group
tests share (joins, a stable group, plain and transactional offset commits)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from oncelog.groups import GroupConfig, GroupCoordinatorShard, Result
from oncelog.groups.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    LeavingMember,
    Protocol,
    SyncGroupRequest,
)
from oncelog.groups.offsets import (
    OffsetCommitPartition,
    OffsetCommitRequest,
    TxnOffsetCommitRequest,
)
from oncelog.protocol.errors import ErrorCode as E

CONFIG = GroupConfig(initial_rebalance_delay_ms=0)


@dataclass
class Entry:
    offset: int
    producer_id: int
    key: bytes | None  # None: a transaction marker
    value: bytes | None
    committed: bool = False


@dataclass
class Node:
    config: GroupConfig = CONFIG
    log: list[Entry] = field(default_factory=list)
    answers: dict[Any, Any] = field(default_factory=dict)
    abandoned: list[Any] = field(default_factory=list)
    answered_twice: list[Any] = field(default_factory=list)
    events: list[str] = field(default_factory=list)  # what the broker would log
    now: int = 0

    def __post_init__(self) -> None:
        counter = itertools.count(1)
        self.shard = GroupCoordinatorShard(0, self.config, lambda: f"uuid{next(counter)}")
        self._rid = itertools.count(1)

    def apply(self, result: Result[Any], request_id: Any = None) -> Any:
        for key, value in result.log_records:
            entry = Entry(len(self.log), result.producer_id, key, value)
            self.log.append(entry)
            if result.replay_records:
                self.shard.replay(entry.offset, entry.producer_id, key, value)
        for c in result.completions:
            self._answer(c.request_id, c.response)
        self.abandoned.extend(result.abandoned)
        self.events.extend(result.events)
        if request_id is not None and result.response is not None:
            self._answer(request_id, result.response)
        return result.response

    def _answer(self, request_id: Any, response: Any) -> None:
        if request_id in self.answers:
            self.answered_twice.append(request_id)
        self.answers[request_id] = response

    def marker(self, producer_id: int, committed: bool) -> None:
        self.log.append(Entry(len(self.log), producer_id, None, None, committed))
        self.shard.replay_end_transaction_marker(producer_id, committed)

    def tick(self, now: int) -> None:
        self.now = now
        self.apply(self.shard.tick(now))

    # -- client-ish helpers --

    def join(
        self,
        group: str = "g",
        member_id: str = "",
        *,
        client_id: str = "c",
        protocols: tuple[Protocol, ...] = (Protocol("range", b"m"),),
        session: int = 10_000,
        rebalance: int = 30_000,
        version: int = 5,
        instance: str | None = None,
        protocol_type: str = "consumer",
    ) -> Any:
        """Send a JoinGroup; returns its request id (the answer lands in ``answers``)."""
        rid = ("join", next(self._rid))
        req = JoinGroupRequest(
            group,
            member_id,
            protocol_type,
            protocols,
            session,
            rebalance,
            instance,
            client_id,
            "/127.0.0.1",
            version,
        )
        self.apply(self.shard.join_group(req, rid, self.now), rid)
        return rid

    def sync(
        self,
        group: str,
        generation: int,
        member_id: str,
        assignments: dict[str, bytes] | None = None,
    ) -> Any:
        rid = ("sync", next(self._rid))
        req = SyncGroupRequest(group, generation, member_id, assignments or {})
        self.apply(self.shard.sync_group(req, rid, self.now), rid)
        return rid

    def heartbeat(self, group: str, generation: int, member_id: str) -> Any:
        return self.apply(
            self.shard.heartbeat(HeartbeatRequest(group, generation, member_id), self.now)
        )

    def leave(self, group: str, *member_ids: str) -> Any:
        req = LeaveGroupRequest(group, tuple(LeavingMember(m) for m in member_ids))
        return self.apply(self.shard.leave_group(req, self.now))

    def reload(self) -> GroupCoordinatorShard:
        """A fresh shard loaded from this node's log, the way the broker loads it."""
        shard = GroupCoordinatorShard(0, self.config)
        for e in self.log:
            if e.key is None:
                shard.replay_end_transaction_marker(e.producer_id, e.committed)
            else:
                shard.replay(e.offset, e.producer_id, e.key, e.value)
        return shard


def join_with_id(node: Node, group: str = "g", client_id: str = "c", **kw: Any) -> str:
    """The MEMBER_ID_REQUIRED round: returns the member id, with the rejoin parked."""
    first = node.answers[node.join(group, client_id=client_id, **kw)]
    assert first.error_code == E.member_id_required
    node.join(group, first.member_id, client_id=client_id, **kw)
    return str(first.member_id)


def stable_group(node: Node, n: int = 2) -> list[str]:
    """n members joined, generation 1 synced by the leader; returns member ids, leader first."""
    ids = [join_with_id(node, client_id=f"c{i}") for i in range(n)]
    node.tick(node.now)
    gen = node.shard.groups.group("g").generation_id
    followers = [node.sync("g", gen, m) for m in ids[1:]]
    leader_sync = node.sync("g", gen, ids[0], {m: m.encode() for m in ids})
    assert node.answers[leader_sync].error_code == E.none
    assert all(node.answers[f].error_code == E.none for f in followers)
    return ids


PID = 4000  # the producer of the transactional offset commits


def commit(
    node: Node,
    group: str = "g",
    offset: int = 10,
    *,
    generation: int = -1,
    member: str = "",
    version: int = 9,
    partition: int = 0,
    metadata: str | None = None,
) -> E:
    """OffsetCommit of one partition of topic "t" (leader epoch 3); its error code."""
    req = OffsetCommitRequest(
        group,
        (OffsetCommitPartition("t", partition, offset, 3, metadata),),
        generation,
        member,
        None,
        version,
    )
    (answer,) = node.apply(node.shard.commit_offsets(req, node.now)).partitions
    return answer.error_code


def txn_commit(
    node: Node,
    group: str = "g",
    offset: int = 20,
    *,
    pid: int = PID,
    generation: int = -1,
    member: str = "",
    instance: str | None = None,
    partition: int = 0,
) -> E:
    """TxnOffsetCommit of one partition of topic "t" by producer ``pid`` (epoch 0) of
    transactional id "tx"; its error code."""
    req = TxnOffsetCommitRequest(
        "tx",
        group,
        pid,
        0,
        (OffsetCommitPartition("t", partition, offset),),
        generation,
        member,
        instance,
    )
    (answer,) = node.apply(node.shard.commit_transactional_offsets(req, node.now)).partitions
    return answer.error_code
