"""The classic consumer group model: Kafka's ``ClassicGroupState``, ``ClassicGroupMember``
and ``ClassicGroup`` (``group-coordinator/.../classic/``).

:class:`GroupState` names the states, each with what it means and what leaves it, and
:data:`VALID_PREVIOUS_STATES` is the read-only table of transitions: any other one raises
:class:`~oncelog.state_machines.IllegalTransition`. :class:`ClassicMember` and
:class:`ClassicGroup` are plain data with the queries and the small in-place changes the
operations of :mod:`oncelog.groups.classic` are made of. No I/O, no clock: times are the
``now_ms`` the caller passes.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from oncelog.groups.messages import JoinedMember, Protocol
from oncelog.groups.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
)
from oncelog.protocol.errors import ErrorCode
from oncelog.state_machines import IllegalTransition

__all__ = [
    "VALID_PREVIOUS_STATES",
    "ClassicGroup",
    "ClassicMember",
    "GroupState",
]

_E = ErrorCode


class GroupState(enum.Enum):
    """Kafka's ``ClassicGroupState``. ``kafka_name`` is what DescribeGroups and ListGroups
    show; each state's docstring says what it means and what leaves it."""

    EMPTY = (
        "Empty",
        """No members: a group just created by its first JoinGroup, or one whose members all
        left or expired; its committed offsets stay. A JoinGroup that adds a member leaves
        for PreparingRebalance (the first rebalance waits group.initial.rebalance.delay.ms);
        DeleteGroups, allowed only here, or a tombstone replayed at load leaves for Dead.""",
    )
    PREPARING_REBALANCE = (
        "PreparingRebalance",
        """A rebalance is under way: JoinGroups are parked until every member has rejoined
        or the rebalance timeout (the largest of the members') has passed; heartbeats and
        SyncGroups get REBALANCE_IN_PROGRESS. When the join phase completes the generation
        increments and the group leaves for CompletingRebalance, or for Empty if no member
        is left.""",
    )
    COMPLETING_REBALANCE = (
        "CompletingRebalance",
        """The join phase is done: every member has the new generation and waits, parked in
        SyncGroup, for the leader's assignment. The leader's SyncGroup leaves for Stable; a
        member that joins, rejoins with other protocols, leaves, misses the sync deadline or
        its session timeout sends the group back to PreparingRebalance.""",
    )
    STABLE = (
        "Stable",
        """Every member has its assignment: heartbeats are answered normally and offset
        commits of the current generation accepted. A member that leaves or misses its
        session timeout, the leader rejoining, or a member rejoining with other protocols
        leaves for PreparingRebalance (a static member replaced with the same protocols does
        not).""",
    )
    DEAD = (
        "Dead",
        """The group is gone: deleted, or removed by a tombstone at load. It is no longer in
        the manager; a request that still reaches it gets COORDINATOR_NOT_AVAILABLE, and
        DescribeGroups shows an unknown group as Dead. Final: nothing leaves it.""",
    )

    def __init__(self, kafka_name: str, doc: str) -> None:
        self.kafka_name = kafka_name
        self.__doc__ = " ".join(doc.split())


_S = GroupState

VALID_PREVIOUS_STATES: Mapping[GroupState, frozenset[GroupState]] = MappingProxyType(
    {
        _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
        _S.PREPARING_REBALANCE: frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}),
        _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
        _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
        _S.DEAD: frozenset(GroupState),
    }
)


@dataclass(slots=True, eq=False)
class ClassicMember:
    """One member of a classic group (Kafka's ``ClassicGroupMember``): what it joined with,
    its assignment, the JoinGroup or SyncGroup it has parked, and when its session ends."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[Protocol, ...]
    assignment: bytes = b""
    join_request: object | None = None  # the parked JoinGroup, if any
    sync_request: object | None = None  # the parked SyncGroup, if any
    is_new: bool = False
    heartbeat_deadline_ms: int | None = None

    @property
    def awaiting_join(self) -> bool:
        return self.join_request is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_request is not None

    def has_satisfied_heartbeat(self) -> bool:
        """Parked members are alive, unless new (a new member's join can time out)."""
        return not self.is_new and (self.awaiting_join or self.awaiting_sync)

    def metadata(self, protocol: str | None) -> bytes:
        for p in self.protocols:
            if p.name == protocol:
                return p.metadata
        raise ValueError(f"member {self.member_id} does not support protocol {protocol!r}")

    def vote(self, candidates: set[str]) -> str:
        for p in self.protocols:
            if p.name in candidates:
                return p.name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


@dataclass(slots=True, eq=False)
class ClassicGroup:
    """One classic group (Kafka's ``ClassicGroup``): state, generation, elected protocol,
    leader and members, pending members (given an id, not yet rejoined), and the deadlines
    of its timers. Changed in place, only through the methods below and the operations of
    :class:`~oncelog.groups.classic.ClassicGroupManager`."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    previous_state: GroupState | None = None
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    current_state_timestamp: int = -1
    members: dict[str, ClassicMember] = field(default_factory=dict)  # join order
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: dict[str, int] = field(default_factory=dict)  # member id -> deadline
    pending_sync: set[str] = field(default_factory=set)
    new_member_added: bool = False
    # timers: the join phase (initial delay or rebalance timeout) and the pending syncs
    join_deadline_ms: int | None = None
    initial_delay: tuple[int, int] | None = None  # (delay, remaining) while an initial delay
    sync_deadline_ms: int | None = None
    sync_generation: int = -1

    # -- queries --

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join)

    def has_all_members_joined(self) -> bool:
        return all(m.awaiting_join for m in self.members.values()) and not self.pending_members

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def candidate_protocols(self) -> set[str]:
        counts: dict[str, int] = {}
        for m in self.members.values():
            for p in m.protocols:
                counts[p.name] = counts.get(p.name, 0) + 1
        return {name for name, n in counts.items() if n == len(self.members)}

    def supports_protocols(self, protocol_type: str, names: Iterable[str]) -> bool:
        """Whether a member with these protocols may join (Kafka's ``supportsProtocols``)."""
        names = set(names)
        if self.state is GroupState.EMPTY:
            return protocol_type != "" and bool(names)
        if self.protocol_type != protocol_type:
            return False
        # With no members left (all gone mid-rebalance) any protocol is common to all.
        return not self.members or bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        if not self.members:
            raise ValueError(f"group {self.group_id} has no members to elect a protocol")
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            name = m.vote(candidates)
            votes[name] = votes.get(name, 0) + 1
        first = next(iter(self.members.values()))
        order = [p.name for p in first.protocols]
        return max(votes, key=lambda n: (votes[n], -order.index(n)))

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode | None:
        """Kafka's ``validateMember``: the instance id (if any) must map to this member id."""
        if group_instance_id is not None:
            existing = self.static_members.get(group_instance_id)
            if existing is None:
                return _E.unknown_member_id
            if existing != member_id:
                return _E.fenced_instance_id
        if member_id not in self.members:
            return _E.unknown_member_id
        return None

    def current_members(self) -> tuple[JoinedMember, ...]:
        return tuple(
            JoinedMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        )

    # -- changes --

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalTransition(
                f"group {self.group_id}: {self.state.kafka_name} -> {target.kafka_name} is not "
                f"a valid transition (valid from: "
                f"{sorted(s.kafka_name for s in VALID_PREVIOUS_STATES[target])})"
            )
        self.previous_state = self.state
        self.state = target
        self.current_state_timestamp = now_ms

    def add(self, member: ClassicMember) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise ValueError(f"instance {member.group_instance_id} is already a member")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.protocol_type != member.protocol_type:
            raise ValueError("the member's protocol type is not the group's")
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> ClassicMember | None:
        member = self.members.pop(member_id, None)
        if member is not None and member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync.discard(member_id)
        return member

    def maybe_elect_new_joined_leader(self) -> bool:
        """True if the leader rejoined or a rejoined member replaced it."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].awaiting_join:
            return True
        for m in self.members.values():
            if m.awaiting_join:
                self.leader_id = m.member_id
                return True
        return False

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync.clear()

    def metadata_record(self, assignment: Mapping[str, bytes] | None = None) -> CoordinatorRecord:
        """The group metadata record of the current generation (Kafka's
        ``newGroupMetadataRecord``): each member's metadata for the elected protocol."""
        members = tuple(
            MemberMetadata(
                member_id=m.member_id,
                client_id=m.client_id,
                client_host=m.client_host,
                session_timeout=m.session_timeout_ms,
                subscription=m.metadata(self.protocol_name),
                assignment=(assignment or {}).get(m.member_id, m.assignment),
                rebalance_timeout=m.rebalance_timeout_ms,
                group_instance_id=m.group_instance_id,
            )
            for m in self.members.values()
        )
        value = GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp=self.current_state_timestamp,
            members=members,
        )
        return CoordinatorRecord(GroupMetadataKey(self.group_id), value)

    def next_deadline(self) -> int | None:
        deadlines = [d for d in (self.join_deadline_ms, self.sync_deadline_ms) if d is not None]
        deadlines.extend(self.pending_members.values())
        deadlines.extend(
            m.heartbeat_deadline_ms
            for m in self.members.values()
            if m.heartbeat_deadline_ms is not None
        )
        return min(deadlines, default=None)
