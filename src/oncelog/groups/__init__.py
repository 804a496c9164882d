"""Consumer group coordinator: classic groups and committed offsets, backed by
``__consumer_offsets`` (pure cores; the broker wires them to sockets and the log)."""

from oncelog.groups.classic import ClassicGroupManager, GroupConfig
from oncelog.groups.classic_group import GroupState
from oncelog.groups.coordinator import GroupCoordinatorShard
from oncelog.groups.messages import (
    Completion,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeavingMember,
    Protocol,
    Result,
    SyncGroupRequest,
    SyncGroupResponse,
)
from oncelog.groups.offsets import (
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetFetchResponse,
    OffsetManager,
    TxnOffsetCommitRequest,
)
from oncelog.groups.records import CoordinatorRecord, decode_record

__all__ = [
    "ClassicGroupManager",
    "Completion",
    "CoordinatorRecord",
    "GroupConfig",
    "GroupCoordinatorShard",
    "GroupState",
    "HeartbeatRequest",
    "JoinGroupRequest",
    "JoinGroupResponse",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "LeavingMember",
    "OffsetCommitPartition",
    "OffsetCommitRequest",
    "OffsetFetchResponse",
    "OffsetManager",
    "Protocol",
    "Result",
    "SyncGroupRequest",
    "SyncGroupResponse",
    "TxnOffsetCommitRequest",
    "decode_record",
]
