"""Classic consumer groups (JoinGroup, SyncGroup, Heartbeat, LeaveGroup): the operations of a
pure state machine.

No I/O, no clock, no asyncio. Every operation takes ``now_ms`` and returns a :class:`Result`;
timers are deadlines the broker schedules (:meth:`ClassicGroupManager.next_deadline`) and
fires by calling :meth:`ClassicGroupManager.tick`. JoinGroup and SyncGroup are parked in
Kafka until the rebalance moves on: the broker passes an opaque ``request_id`` and gets the
answer either at once (``Result.response``) or later, from any operation or tick, as a
:class:`Completion` carrying that id.

Rules follow Kafka 4.x's classic protocol (``group-coordinator/.../GroupMetadataManager.java``
classicGroup*, ``classic/ClassicGroup.java``, ``ClassicGroupMember.java``,
``ClassicGroupState.java``, the bounds checks of ``GroupCoordinatorService.joinGroup``):

- The states, their meaning and their valid previous states are in
  :mod:`oncelog.groups.classic_group` with the group and member model; any other
  transition is our bug and raises :class:`~oncelog.state_machines.IllegalTransition`.
- JoinGroup v4+ from an unknown member gets MEMBER_ID_REQUIRED and a member id
  (``client_id-uuid``); that id waits as a *pending* member until it rejoins or its session
  timeout passes. Before v4 the member is added at once.
- A member may join only if at least one of its protocols is supported by every member and
  its protocol type is the group's; else INCONSISTENT_GROUP_PROTOCOL. The protocol of a
  generation is elected: each member votes for its first preference among the protocols all
  members support; most votes wins (ties go to the first member's preference order).
- The first member is the leader; a leader that does not rejoin is replaced by the first
  member that did. Each completed join phase increments the generation.
- A rebalance from Empty waits ``group.initial.rebalance.delay.ms``, extended by the same delay
  while new members keep arriving, up to the rebalance timeout. Other rebalances complete when
  every member rejoined, or at the rebalance timeout (the largest of the members'), dropping
  the members that did not rejoin.
- New members' joins time out after ``new_member_join_timeout_ms`` (5 minutes in Kafka).
  Session timeouts must lie within ``group.min/max.session.timeout.ms``
  (INVALID_SESSION_TIMEOUT).
- The leader's SyncGroup carries the assignment: the group metadata record (with every
  member's assignment) is written, then all parked SyncGroups are answered and the group is
  Stable. Members that do not sync within the rebalance timeout are removed.
- Heartbeat: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION checks, then
  REBALANCE_IN_PROGRESS while preparing a rebalance. A member whose session timeout passes
  without a heartbeat is removed, which triggers a rebalance. Members parked in a join or
  sync count as alive (except new members).
- LeaveGroup removes each listed member (v3+ batches, by member id or, for static members,
  by group instance id alone) and rebalances.
- Static membership (KIP-345, ``group.instance.id``): a known instance rejoining with an
  unknown member id replaces the old member id (the old one is fenced with
  FENCED_INSTANCE_ID); in a Stable group whose protocol does not change this needs no
  rebalance. Static members are not dropped for missing a rejoin, only by session timeout or
  LeaveGroup.

Persistence follows Kafka exactly: the membership is soft state changed in place, and the
group metadata record is a checkpoint written when the leader's assignment is received, when
the group becomes Empty, when a static member is replaced without rebalance, and when a new
group produces no other record. Such results have ``replay_records=False`` (Kafka's
``CoordinatorResult.replayRecords``): the live state already holds them. Loading replays them
with :meth:`ClassicGroupManager.replay_group_metadata` into Stable (or Empty) groups, as Kafka
does; members then have to heartbeat within their session timeout.

Deviation: Kafka answers the leader's SyncGroup only after the record is written and rolls the
group back if the write fails; here the group moves to Stable at once and the broker must
write ``records`` before sending any response (and reload the shard if a write fails).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from operator import itemgetter
from typing import TypeVar

from oncelog.groups.classic_group import ClassicGroup, ClassicMember, GroupState
from oncelog.groups.messages import (
    UNKNOWN_MEMBER_ID,
    Completion,
    DescribedGroup,
    DescribedMember,
    HeartbeatRequest,
    JoinedMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeftMember,
    ListedGroup,
    Protocol,
    Result,
    SyncGroupRequest,
    SyncGroupResponse,
)
from oncelog.groups.records import CoordinatorRecord, GroupMetadataKey, GroupMetadataValue
from oncelog.protocol.errors import ErrorCode

R = TypeVar("R")
P = TypeVar("P", JoinGroupResponse, SyncGroupResponse)

__all__ = ["ClassicGroupManager", "GroupConfig"]

_E = ErrorCode
_S = GroupState


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Kafka's broker settings for classic groups (defaults are Kafka's)."""

    min_session_timeout_ms: int = 6_000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1  # group.max.size
    new_member_join_timeout_ms: int = 300_000  # Kafka's classicGroupNewMemberJoinTimeoutMs
    offset_metadata_max_bytes: int = 4_096  # offset.metadata.max.bytes


class _Out:
    """Collects what one operation produced."""

    def __init__(self) -> None:
        self.records: list[CoordinatorRecord] = []
        self.completions: list[Completion] = []
        self.abandoned: list[object] = []
        self.events: list[str] = []

    def event(self, group: ClassicGroup, text: str) -> None:
        """Note what happened to ``group``'s membership, for the broker's log."""
        self.events.append(f"group {group.group_id} generation {group.generation_id}: {text}")

    def complete(self, request_id: object, response: JoinGroupResponse | SyncGroupResponse) -> None:
        self.completions.append(Completion(request_id, response))

    def result(self, response: R | None) -> Result[R]:
        return Result(
            response,
            tuple(self.records),
            tuple(self.completions),
            tuple(self.abandoned),
            tuple(self.events),
            replay_records=False,
        )

    def parked_result(self, own_request: object, kind: type[P]) -> Result[P]:
        """The result of an operation that parked the caller's own request: if that request
        was completed here too, its answer becomes the direct response."""
        for i, c in enumerate(self.completions):
            if c.request_id == own_request and isinstance(c.response, kind):
                del self.completions[i]
                return self.result(c.response)
        return self.result(None)


def _join_error(code: ErrorCode, member_id: str = UNKNOWN_MEMBER_ID) -> JoinGroupResponse:
    return JoinGroupResponse(code, member_id=member_id)


class ClassicGroupManager:
    """The classic groups of one ``__consumer_offsets`` partition."""

    def __init__(
        self, config: GroupConfig | None = None, new_uuid: Callable[[], str] | None = None
    ) -> None:
        self.config = config or GroupConfig()
        self._new_uuid = new_uuid or (lambda: str(uuid.uuid4()))
        self._groups: dict[str, ClassicGroup] = {}

    # -- lookups --

    @property
    def groups(self) -> Mapping[str, ClassicGroup]:
        return self._groups

    def group(self, group_id: str) -> ClassicGroup | None:
        return self._groups.get(group_id)

    def get_or_create(self, group_id: str) -> ClassicGroup:
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = ClassicGroup(group_id)
        return group

    # -- JoinGroup --

    def join(
        self, request: JoinGroupRequest, request_id: object, now_ms: int
    ) -> Result[JoinGroupResponse]:
        out = _Out()
        if not request.group_id:
            return out.result(_join_error(_E.invalid_group_id, request.member_id))
        cfg = self.config
        if (
            not cfg.min_session_timeout_ms
            <= request.session_timeout_ms
            <= cfg.max_session_timeout_ms
        ):
            return out.result(_join_error(_E.invalid_session_timeout, request.member_id))
        if request.rebalance_timeout_ms < 0:
            request = _with_rebalance_timeout(request, request.session_timeout_ms)
        is_unknown = request.member_id == UNKNOWN_MEMBER_ID
        is_new_group = request.group_id not in self._groups
        if is_new_group and not is_unknown:
            return out.result(_join_error(_E.unknown_member_id, request.member_id))
        group = self.get_or_create(request.group_id)
        if not self._accept_joining_member(group, request.member_id):
            removed = group.remove(request.member_id)
            if removed is not None:
                out.abandoned.extend(
                    r for r in (removed.join_request, removed.sync_request) if r is not None
                )
            response: JoinGroupResponse | None = _join_error(_E.group_max_size_reached)
        elif is_unknown:
            response = self._join_new_member(group, request, request_id, out, now_ms)
        else:
            response = self._join_existing_member(group, request, request_id, out, now_ms)
        if is_new_group and not out.records:
            # Kafka writes an empty group record so the new group exists in the log.
            out.records.append(_empty_group_record(group))
        if response is not None:
            if response.error_code not in (_E.none, _E.member_id_required):
                member = request.member_id or "a new member"
                out.event(
                    group, f"JoinGroup of {member} answered {response.error_code.name.upper()}"
                )
            return out.result(response)
        return out.parked_result(request_id, JoinGroupResponse)

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        max_size = self.config.max_size
        if group.is_in(_S.EMPTY, _S.DEAD):
            return True
        if group.is_in(_S.PREPARING_REBALANCE):
            member = group.members.get(member_id)
            return (member is not None and member.awaiting_join) or (
                group.num_awaiting_join() < max_size
            )
        return member_id in group.members or len(group.members) < max_size

    def _join_new_member(
        self, group: ClassicGroup, req: JoinGroupRequest, request_id: object, out: _Out, now_ms: int
    ) -> JoinGroupResponse | None:
        if group.is_in(_S.DEAD):
            return _join_error(_E.coordinator_not_available)
        if not group.supports_protocols(req.protocol_type, (p.name for p in req.protocols)):
            return _join_error(_E.inconsistent_group_protocol)
        prefix = req.group_instance_id if req.group_instance_id is not None else req.client_id
        new_member_id = f"{prefix}-{self._new_uuid()}"
        if req.group_instance_id is not None:
            existing = group.static_members.get(req.group_instance_id)
            if existing is not None:
                return self._replace_static_member(
                    group, req, request_id, existing, new_member_id, out, now_ms
                )
            self._add_member_then_rebalance(group, req, request_id, new_member_id, out, now_ms)
            return None
        if req.api_version >= 4:  # JoinGroupRequest.requiresKnownMemberId
            group.pending_members[new_member_id] = now_ms + req.session_timeout_ms
            out.event(group, f"new member {new_member_id} is pending until it rejoins with its id")
            return _join_error(_E.member_id_required, new_member_id)
        self._add_member_then_rebalance(group, req, request_id, new_member_id, out, now_ms)
        return None

    def _join_existing_member(
        self, group: ClassicGroup, req: JoinGroupRequest, request_id: object, out: _Out, now_ms: int
    ) -> JoinGroupResponse | None:
        member_id = req.member_id
        if group.is_in(_S.DEAD):
            return _join_error(_E.coordinator_not_available, member_id)
        if not group.supports_protocols(req.protocol_type, (p.name for p in req.protocols)):
            return _join_error(_E.inconsistent_group_protocol, member_id)
        if member_id in group.pending_members:
            if req.group_instance_id is not None:
                return _join_error(_E.invalid_request, member_id)  # Kafka: IllegalStateException
            self._add_member_then_rebalance(group, req, request_id, member_id, out, now_ms)
            return None
        error = group.validate_member(member_id, req.group_instance_id)
        if error is not None:
            return _join_error(error, member_id)
        member = group.members[member_id]
        if group.is_in(_S.PREPARING_REBALANCE):
            self._update_member_then_rebalance(group, member, req, request_id, out, now_ms)
            return None
        if group.is_in(_S.COMPLETING_REBALANCE, _S.STABLE):
            changed = member.protocols != req.protocols
            if changed or (group.is_in(_S.STABLE) and group.is_leader(member_id)):
                # The leader rejoining a Stable group asks for a rebalance (e.g. new topics).
                self._update_member_then_rebalance(group, member, req, request_id, out, now_ms)
                return None
            members = (
                group.current_members()
                if group.is_leader(member_id) and group.is_in(_S.COMPLETING_REBALANCE)
                else ()
            )
            return self._join_response(group, member_id, members)
        # Empty: the member is gone; it must rejoin from scratch.
        return _join_error(_E.unknown_member_id, member_id)

    def _join_response(
        self,
        group: ClassicGroup,
        member_id: str,
        members: tuple[JoinedMember, ...] = (),
        skip_assignment: bool = False,
        leader: str | None = None,
    ) -> JoinGroupResponse:
        return JoinGroupResponse(
            _E.none,
            member_id=member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=(group.leader_id if leader is None else leader) or "",
            skip_assignment=skip_assignment,
            members=members,
        )

    def _add_member_then_rebalance(
        self,
        group: ClassicGroup,
        req: JoinGroupRequest,
        request_id: object,
        member_id: str,
        out: _Out,
        now_ms: int,
    ) -> None:
        member = ClassicMember(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=req.protocols,
            join_request=request_id,
            is_new=True,
        )
        if group.is_in(_S.PREPARING_REBALANCE) and group.previous_state is _S.EMPTY:
            group.new_member_added = True  # extends the initial rebalance delay
        group.add(member)
        # New members cannot heartbeat yet: their parked join times out on its own.
        member.heartbeat_deadline_ms = now_ms + self.config.new_member_join_timeout_ms
        self._maybe_prepare_rebalance_or_complete_join(group, out, now_ms)

    def _update_member_then_rebalance(
        self,
        group: ClassicGroup,
        member: ClassicMember,
        req: JoinGroupRequest,
        request_id: object,
        out: _Out,
        now_ms: int,
    ) -> None:
        self._update_member(member, req, request_id, out)
        self._maybe_prepare_rebalance_or_complete_join(group, out, now_ms)

    @staticmethod
    def _update_member(
        member: ClassicMember, req: JoinGroupRequest, request_id: object, out: _Out
    ) -> None:
        member.protocols = req.protocols
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        if member.join_request is not None and member.join_request != request_id:
            out.abandoned.append(member.join_request)
        member.join_request = request_id

    def _replace_static_member(
        self,
        group: ClassicGroup,
        req: JoinGroupRequest,
        request_id: object,
        old_id: str,
        new_id: str,
        out: _Out,
        now_ms: int,
    ) -> JoinGroupResponse | None:
        old = group.members.pop(old_id)
        if old.join_request is not None:
            out.complete(old.join_request, JoinGroupResponse(_E.fenced_instance_id, old_id))
        if old.sync_request is not None:
            out.complete(old.sync_request, SyncGroupResponse(_E.fenced_instance_id))
        group.pending_sync.discard(old_id)
        old_leader = group.leader_id
        new = ClassicMember(
            new_id,
            old.group_instance_id,
            old.client_id,
            old.client_host,
            old.rebalance_timeout_ms,
            old.session_timeout_ms,
            old.protocol_type,
            old.protocols,
            old.assignment,
        )
        group.members[new_id] = new
        assert old.group_instance_id is not None
        group.static_members[old.group_instance_id] = new_id
        if group.leader_id == old_id:
            group.leader_id = new_id
        new.heartbeat_deadline_ms = now_ms + new.session_timeout_ms
        self._update_member(new, req, request_id, out)
        if group.is_in(_S.STABLE):
            if group.protocol_name == group.select_protocol():
                # Same protocol: no rebalance; persist the new member id and answer with the
                # current generation (the leader skips the assignment from v9 on).
                new.join_request = None
                out.records.append(group.metadata_record())
                if req.api_version >= 9:
                    is_leader = group.is_leader(new_id)
                    return self._join_response(
                        group,
                        new_id,
                        group.current_members() if is_leader else (),
                        skip_assignment=is_leader,
                    )
                return self._join_response(group, new_id, leader=old_leader or "")
            self._maybe_prepare_rebalance_or_complete_join(group, out, now_ms)
        elif group.is_in(_S.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, out, now_ms)
        else:
            self._maybe_complete_join_phase(group, out, now_ms)
        return None

    # -- the rebalance machinery --

    def _maybe_prepare_rebalance_or_complete_join(
        self, group: ClassicGroup, out: _Out, now_ms: int
    ) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, out, now_ms)
        else:
            self._maybe_complete_join_phase(group, out, now_ms)

    def _prepare_rebalance(self, group: ClassicGroup, out: _Out, now_ms: int) -> None:
        if group.is_in(_S.COMPLETING_REBALANCE):
            # Members waiting for the assignment must rejoin.
            for m in group.members.values():
                m.assignment = b""
            self._propagate_assignment(group, _E.rebalance_in_progress, out, now_ms)
        group.pending_sync.clear()
        group.sync_deadline_ms = None
        out.event(
            group,
            f"preparing to rebalance in state {group.state.kafka_name}: "
            f"{group.num_awaiting_join()} of {len(group.members)} member(s) joined, "
            f"{len(group.pending_members)} pending",
        )
        initial = group.is_in(_S.EMPTY)
        if initial:
            delay = self.config.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            group.initial_delay = (delay, remaining)
            group.join_deadline_ms = now_ms + delay
        group.transition_to(_S.PREPARING_REBALANCE, now_ms)
        if not initial:
            self._maybe_complete_join_else_schedule(group, out, now_ms)

    def _maybe_complete_join_else_schedule(
        self, group: ClassicGroup, out: _Out, now_ms: int
    ) -> None:
        if group.has_all_members_joined():
            self._complete_join(group, out, now_ms)
        else:
            group.initial_delay = None
            group.join_deadline_ms = now_ms + group.rebalance_timeout_ms()

    def _maybe_complete_join_phase(self, group: ClassicGroup, out: _Out, now_ms: int) -> None:
        if (
            group.is_in(_S.PREPARING_REBALANCE)
            and group.previous_state is not _S.EMPTY  # the initial delay runs its course
            and group.has_all_members_joined()
        ):
            self._complete_join(group, out, now_ms)

    def _complete_join(self, group: ClassicGroup, out: _Out, now_ms: int) -> None:
        group.join_deadline_ms = None
        group.initial_delay = None
        for m in [m for m in group.members.values() if not m.awaiting_join]:
            if m.group_instance_id is None:  # static members keep their place
                out.event(group, f"member {m.member_id} did not rejoin in time: removed")
                group.remove(m.member_id)
                if m.sync_request is not None:
                    out.abandoned.append(m.sync_request)
        if group.is_in(_S.DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that did not rejoin: wait for their sessions to expire.
            group.join_deadline_ms = now_ms + max(group.rebalance_timeout_ms(), 1)
            return
        group.init_next_generation(now_ms)
        if group.is_in(_S.EMPTY):
            out.event(group, "is now empty")
            out.records.append(group.metadata_record())
            return
        out.event(
            group,
            f"stabilized with leader {group.leader_id} and {len(group.members)} member(s): "
            + ", ".join(group.members),
        )
        for m in group.members.values():
            members = group.current_members() if group.is_leader(m.member_id) else ()
            assert m.join_request is not None
            out.complete(m.join_request, self._join_response(group, m.member_id, members))
            m.join_request = None
            m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms
            m.is_new = False
            group.pending_sync.add(m.member_id)
        group.sync_deadline_ms = now_ms + group.rebalance_timeout_ms()
        group.sync_generation = group.generation_id

    def _propagate_assignment(
        self, group: ClassicGroup, error: ErrorCode, out: _Out, now_ms: int
    ) -> None:
        ok = error is _E.none
        for m in group.members.values():
            if m.sync_request is None:
                continue
            out.complete(
                m.sync_request,
                SyncGroupResponse(
                    error,
                    assignment=m.assignment,
                    protocol_type=group.protocol_type if ok else None,
                    protocol_name=group.protocol_name if ok else None,
                ),
            )
            m.sync_request = None
            m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms

    def _remove_member(self, group: ClassicGroup, member: ClassicMember, out: _Out) -> None:
        """Remove a member that left or failed: its parked JoinGroup is answered
        UNKNOWN_MEMBER_ID, its parked SyncGroup abandoned. The group does not rebalance
        here: the caller decides, once for all the members one request or timer removes."""
        if member.join_request is not None:
            out.complete(member.join_request, _join_error(_E.unknown_member_id))
            member.join_request = None
        if member.sync_request is not None:
            out.abandoned.append(member.sync_request)
        group.remove(member.member_id)

    # -- SyncGroup --

    def sync(
        self, request: SyncGroupRequest, request_id: object, now_ms: int
    ) -> Result[SyncGroupResponse]:
        out = _Out()
        if not request.group_id:
            return out.result(SyncGroupResponse(_E.invalid_group_id))
        group = self._groups.get(request.group_id)
        if group is None or group.is_in(_S.EMPTY):
            return out.result(SyncGroupResponse(_E.unknown_member_id))
        if group.is_in(_S.DEAD):
            return out.result(SyncGroupResponse(_E.coordinator_not_available))
        error = group.validate_member(request.member_id, request.group_instance_id)
        if error is None and request.generation_id != group.generation_id:
            error = _E.illegal_generation
        if error is None and (
            _inconsistent(request.protocol_type, group.protocol_type)
            or _inconsistent(request.protocol_name, group.protocol_name)
        ):
            error = _E.inconsistent_group_protocol
        if error is None and group.is_in(_S.PREPARING_REBALANCE):
            error = _E.rebalance_in_progress
        if error is not None:
            return out.result(SyncGroupResponse(error))
        member = group.members[request.member_id]
        self._remove_pending_sync(group, request.member_id)
        if group.is_in(_S.STABLE):
            return out.result(
                SyncGroupResponse(
                    _E.none, member.assignment, group.protocol_type, group.protocol_name
                )
            )
        # CompletingRebalance: park; the leader's assignment completes everybody.
        if member.sync_request is not None and member.sync_request != request_id:
            out.abandoned.append(member.sync_request)
        member.sync_request = request_id
        if group.is_leader(request.member_id):
            out.event(group, f"assignment received from leader {request.member_id}")
            assignment = {m: request.assignments.get(m, b"") for m in group.members}
            out.records.append(group.metadata_record(assignment))
            for m in group.members.values():
                m.assignment = assignment[m.member_id]
            self._propagate_assignment(group, _E.none, out, now_ms)
            group.transition_to(_S.STABLE, now_ms)
        return out.parked_result(request_id, SyncGroupResponse)

    def _remove_pending_sync(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.is_in(_S.COMPLETING_REBALANCE, _S.STABLE) or not group.pending_sync:
            group.sync_deadline_ms = None

    # -- Heartbeat --

    def heartbeat(self, request: HeartbeatRequest, now_ms: int) -> Result[ErrorCode]:
        out = _Out()
        if not request.group_id:
            return out.result(_E.invalid_group_id)
        group = self._groups.get(request.group_id)
        if group is None:
            return out.result(_E.unknown_member_id)
        if group.is_in(_S.DEAD):
            return out.result(_E.coordinator_not_available)
        error = group.validate_member(request.member_id, request.group_instance_id)
        if error is None and request.generation_id != group.generation_id:
            error = _E.illegal_generation
        if error is not None:
            return out.result(error)
        if group.is_in(_S.EMPTY):
            return out.result(_E.unknown_member_id)
        self.reschedule_heartbeat(group, request.member_id, now_ms)
        if group.is_in(_S.PREPARING_REBALANCE):
            return out.result(_E.rebalance_in_progress)
        return out.result(_E.none)

    def reschedule_heartbeat(self, group: ClassicGroup, member_id: str, now_ms: int) -> None:
        """The member is alive: its session timeout starts again (heartbeats, and offset
        commits in Stable and PreparingRebalance groups)."""
        member = group.members[member_id]
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms

    # -- LeaveGroup --

    def leave(self, request: LeaveGroupRequest, now_ms: int) -> Result[LeaveGroupResponse]:
        out = _Out()
        if not request.group_id:
            return out.result(LeaveGroupResponse(_E.invalid_group_id))
        group = self._groups.get(request.group_id)
        if group is None:
            return out.result(LeaveGroupResponse(_E.unknown_member_id))
        if group.is_in(_S.DEAD):
            return out.result(LeaveGroupResponse(_E.coordinator_not_available))
        answers: list[LeftMember] = []
        left = False
        for who in request.members:
            error: ErrorCode | None = None
            if who.member_id == UNKNOWN_MEMBER_ID:
                # Admin removal of a static member by instance id alone.
                target = group.static_members.get(who.group_instance_id or "")
                if who.group_instance_id is None or target is None:
                    error = _E.unknown_member_id
                else:
                    out.event(group, f"member {target} removed by its instance id")
                    self._remove_member(group, group.members[target], out)
            elif who.member_id in group.pending_members:
                group.pending_members.pop(who.member_id)
            else:
                error = group.validate_member(who.member_id, who.group_instance_id)
                if error is None:
                    out.event(group, f"member {who.member_id} left")
                    self._remove_member(group, group.members[who.member_id], out)
            answers.append(LeftMember(who.member_id, who.group_instance_id, error or _E.none))
            left = left or error is None
        if left:
            if group.is_in(_S.STABLE, _S.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(group, out, now_ms)
            elif group.is_in(_S.PREPARING_REBALANCE):
                self._maybe_complete_join_phase(group, out, now_ms)
        return out.result(LeaveGroupResponse(_E.none, tuple(answers)))

    # -- timers --

    def next_deadline(self) -> int | None:
        """The earliest timer of any group; call :meth:`tick` then."""
        return min(
            (d for g in self._groups.values() if (d := g.next_deadline()) is not None),
            default=None,
        )

    def tick(self, now_ms: int) -> Result[None]:
        """Fire every timer due at ``now_ms``, earliest first."""
        out = _Out()
        while True:
            due = min(self._due_timers(now_ms), default=None, key=itemgetter(0))
            if due is None:
                break
            _, fire = due
            fire(out)
        return out.result(None)

    def _due_timers(self, now_ms: int) -> Iterator[tuple[int, Callable[[_Out], None]]]:
        for g in self._groups.values():
            if g.join_deadline_ms is not None and g.join_deadline_ms <= now_ms:
                yield g.join_deadline_ms, partial(self._on_join_timer, g, now_ms=now_ms)
            if g.sync_deadline_ms is not None and g.sync_deadline_ms <= now_ms:
                yield g.sync_deadline_ms, partial(self._on_sync_timer, g, now_ms=now_ms)
            for member_id, deadline in g.pending_members.items():
                if deadline <= now_ms:
                    yield deadline, partial(self._on_pending_expired, g, member_id, now_ms=now_ms)
            for m in g.members.values():
                if m.heartbeat_deadline_ms is not None and m.heartbeat_deadline_ms <= now_ms:
                    yield (
                        m.heartbeat_deadline_ms,
                        partial(self._on_session_expired, g, m, now_ms=now_ms),
                    )

    def _on_join_timer(self, group: ClassicGroup, out: _Out, now_ms: int) -> None:
        group.join_deadline_ms = None
        if group.initial_delay is not None:
            delay, remaining = group.initial_delay
            if group.new_member_added and remaining != 0:
                group.new_member_added = False
                new_delay = min(self.config.initial_rebalance_delay_ms, remaining)
                group.initial_delay = (new_delay, max(remaining - delay, 0))
                group.join_deadline_ms = now_ms + new_delay
                return
        self._complete_join(group, out, now_ms)

    def _on_sync_timer(self, group: ClassicGroup, out: _Out, now_ms: int) -> None:
        group.sync_deadline_ms = None
        if group.sync_generation != group.generation_id:
            return
        if group.is_in(_S.COMPLETING_REBALANCE, _S.STABLE) and group.pending_sync:
            for member_id in sorted(group.pending_sync):
                member = group.members.get(member_id)
                if member is not None:
                    out.event(group, f"member {member_id} did not sync in time: removed")
                    self._remove_member(group, member, out)
            self._prepare_rebalance(group, out, now_ms)

    def _on_pending_expired(
        self, group: ClassicGroup, member_id: str, out: _Out, now_ms: int
    ) -> None:
        group.pending_members.pop(member_id, None)
        out.event(group, f"pending member {member_id} did not rejoin in time: removed")
        if group.is_in(_S.PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group, out, now_ms)

    def _on_session_expired(
        self, group: ClassicGroup, member: ClassicMember, out: _Out, now_ms: int
    ) -> None:
        member.heartbeat_deadline_ms = None
        if member.has_satisfied_heartbeat():
            return
        out.event(group, f"member {member.member_id} failed its session timeout: removed")
        self._remove_member(group, member, out)
        if group.is_in(_S.STABLE, _S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group, out, now_ms)
        elif group.is_in(_S.PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group, out, now_ms)

    # -- admin --

    def describe(self, group_ids: Sequence[str]) -> tuple[DescribedGroup, ...]:
        described = []
        for group_id in group_ids:
            group = self._groups.get(group_id)
            if group is None:
                described.append(DescribedGroup(group_id, _E.none, _S.DEAD.kafka_name, "", "", ()))
                continue
            stable = group.is_in(_S.STABLE)
            members = tuple(
                DescribedMember(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata(group.protocol_name) if stable else b"",
                    m.assignment,
                )
                for m in group.members.values()
            )
            described.append(
                DescribedGroup(
                    group_id,
                    _E.none,
                    group.state.kafka_name,
                    group.protocol_type or "",
                    (group.protocol_name or "") if stable else "",
                    members,
                )
            )
        return tuple(described)

    def list(self, states: Iterable[str] = ()) -> tuple[ListedGroup, ...]:
        wanted = {s.strip().lower() for s in states}
        return tuple(
            ListedGroup(g.group_id, g.protocol_type or "", g.state.kafka_name)
            for g in self._groups.values()
            if not wanted or g.state.kafka_name.lower() in wanted
        )

    def delete(self, group_id: str) -> Result[ErrorCode]:
        """DeleteGroups for one group: only Empty groups; the tombstone removes it on replay
        (the caller adds the offsets' tombstones)."""
        out = _Out()
        group = self._groups.get(group_id)
        if group is None or group.is_in(_S.DEAD):
            return out.result(_E.group_id_not_found)
        if not group.is_in(_S.EMPTY):
            return out.result(_E.non_empty_group)
        out.records.append(CoordinatorRecord(GroupMetadataKey(group_id), None))
        return Result(_E.none, tuple(out.records))

    # -- load --

    def replay_group_metadata(self, group_id: str, value: GroupMetadataValue | None) -> None:
        """Apply a stored group metadata record: the group as of its last checkpoint, Stable
        if it has members (they must heartbeat again), Empty otherwise; a tombstone deletes
        the group. Only the load path calls this (the live path changed the group already)."""
        if value is None:
            group = self._groups.pop(group_id, None)
            if group is not None:
                group.state = _S.DEAD
            return
        group = ClassicGroup(
            group_id,
            state=_S.STABLE if value.members else _S.EMPTY,
            generation_id=value.generation,
            protocol_type=value.protocol_type or None,
            protocol_name=value.protocol,
            leader_id=value.leader,
            current_state_timestamp=value.current_state_timestamp,
        )
        for m in value.members:
            member = ClassicMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=(
                    m.session_timeout if m.rebalance_timeout == -1 else m.rebalance_timeout
                ),
                session_timeout_ms=m.session_timeout,
                protocol_type=value.protocol_type,
                protocols=(Protocol(value.protocol or "", m.subscription),),
                assignment=m.assignment,
            )
            group.members[m.member_id] = member
            if m.group_instance_id is not None:
                group.static_members[m.group_instance_id] = m.member_id
        self._groups[group_id] = group

    def start_sessions(self, now_ms: int) -> None:
        """After loading: every loaded member's session timeout starts now."""
        for group in self._groups.values():
            for m in group.members.values():
                if m.heartbeat_deadline_ms is None:
                    m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current


def _with_rebalance_timeout(req: JoinGroupRequest, timeout: int) -> JoinGroupRequest:
    return replace(req, rebalance_timeout_ms=timeout)


def _empty_group_record(group: ClassicGroup) -> CoordinatorRecord:
    return CoordinatorRecord(
        GroupMetadataKey(group.group_id),
        GroupMetadataValue("", 0, None, None, group.current_state_timestamp, ()),
    )
