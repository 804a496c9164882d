"""The requests and answers of the classic group protocol, as the group core sees them
(version-neutral: the broker's handlers translate the wire versions to and from these)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from oncelog.groups.records import CoordinatorRecord
from oncelog.protocol.errors import ErrorCode

UNKNOWN_MEMBER_ID = ""


@dataclass(frozen=True, slots=True)
class Protocol:
    """One protocol a member supports (e.g. ``range``) and its metadata (the subscription)."""

    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    """A JoinGroup as the group core sees it, whatever the request version."""

    group_id: str
    member_id: str
    protocol_type: str
    protocols: tuple[Protocol, ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int = -1  # -1 (JoinGroup v0): the session timeout
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    api_version: int = 5
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class JoinedMember:
    """A member as the leader's JoinGroup response lists it."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    """The answer to a JoinGroup; members are listed to the leader only."""

    error_code: ErrorCode
    member_id: str = UNKNOWN_MEMBER_ID
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: tuple[JoinedMember, ...] = ()  # only the leader's response lists them


@dataclass(frozen=True, slots=True)
class SyncGroupRequest:
    """A SyncGroup as the group core sees it; the leader's carries the assignments."""

    group_id: str
    generation_id: int
    member_id: str
    assignments: Mapping[str, bytes] = field(default_factory=dict)  # the leader's only
    group_instance_id: str | None = None
    protocol_type: str | None = None  # v5+
    protocol_name: str | None = None  # v5+


@dataclass(frozen=True, slots=True)
class SyncGroupResponse:
    """The answer to a SyncGroup: the member's assignment."""

    error_code: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """A Heartbeat as the group core sees it."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeavingMember:
    """One member a LeaveGroup removes (by member id, or by instance id alone)."""

    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    """LeaveGroup v0-2 carry one member id: pass one :class:`LeavingMember`, and answer with
    its error at the top level."""

    group_id: str
    members: tuple[LeavingMember, ...]


@dataclass(frozen=True, slots=True)
class LeftMember:
    """The outcome of one member's leave (LeaveGroup v3+ answers per member)."""

    member_id: str
    group_instance_id: str | None
    error_code: ErrorCode


@dataclass(frozen=True, slots=True)
class LeaveGroupResponse:
    """The answer to a LeaveGroup."""

    error_code: ErrorCode
    members: tuple[LeftMember, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribedMember:
    """A member as DescribeGroups shows it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes  # the elected protocol's metadata, Stable groups only
    assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    """A group as DescribeGroups shows it."""

    group_id: str
    error_code: ErrorCode
    state: str
    protocol_type: str
    protocol_data: str  # the elected protocol, Stable groups only
    members: tuple[DescribedMember, ...]


@dataclass(frozen=True, slots=True)
class ListedGroup:
    """A group as ListGroups shows it."""

    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Completion:
    """The answer to a parked JoinGroup or SyncGroup, identified by the caller's request id."""

    request_id: object
    response: JoinGroupResponse | SyncGroupResponse


@dataclass(frozen=True, slots=True)
class Result(Generic[R]):
    """What an operation decided. The coordinator runtime writes ``records`` (one batch;
    transactional with ``producer_id``/``producer_epoch`` when they are set), replays them
    when ``replay_records``, and only then sends ``response`` and the ``completions``.

    ``response`` is None when the caller's own request is parked. ``abandoned`` lists parked
    request ids that will never be answered (their member was replaced or removed); Kafka
    leaves those to the client's request timeout. ``events`` says what happened to the
    membership (a rebalance prepared or completed, a member removed), for the broker's log:
    what Kafka's group coordinator logs at INFO."""

    response: R | None = None
    records: tuple[CoordinatorRecord, ...] = ()
    completions: tuple[Completion, ...] = ()
    abandoned: tuple[object, ...] = ()
    events: tuple[str, ...] = ()
    replay_records: bool = True
    producer_id: int = -1
    producer_epoch: int = -1

    @property
    def log_records(self) -> tuple[tuple[bytes, bytes | None], ...]:
        """``records`` as the (key, value) bytes the log holds."""
        return tuple(record.encode() for record in self.records)
