"""Consumer group APIs (classic protocol): JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, TxnOffsetCommit, ListGroups, DescribeGroups.

Each handler turns the versioned request into the group core's request, runs it on the
group's shard, and writes the answer back in the version's layout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oncelog.broker.coordinator_runtime import CoordinatorError
from oncelog.groups import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    LeavingMember,
    OffsetCommitPartition,
    OffsetCommitRequest,
    Protocol,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
)
from oncelog.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.protocol.codec import RequestHeader

BATCHED_LEAVE_FROM = 3
BATCHED_OFFSET_FETCH_FROM = 8


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000)


async def handle_join_group(broker: Broker, header: RequestHeader, request: Any) -> dict[str, Any]:
    rebalance = getattr(request, "rebalance_timeout", None)
    join = JoinGroupRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        protocol_type=request.protocol_type,
        protocols=tuple(Protocol(p.name, bytes(p.metadata)) for p in request.protocols),
        session_timeout_ms=_ms(request.session_timeout),
        rebalance_timeout_ms=-1 if rebalance is None else _ms(rebalance),
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=header.client_id or "",
        client_host="",
        api_version=header.api_version,
        reason=getattr(request, "reason", None),
    )
    try:
        answer = await broker.groups.run_parked(
            request.group_id, lambda s, rid, now: s.join_group(join, rid, now)
        )
    except CoordinatorError as failed:
        return _join_error(failed.code)
    return {
        "throttle_time": 0,
        "error_code": answer.error_code,
        "generation_id": answer.generation_id,
        "protocol_type": answer.protocol_type,
        "protocol_name": answer.protocol_name or "",
        "leader": answer.leader,
        "skip_assignment": answer.skip_assignment,
        "member_id": answer.member_id,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata,
            }
            for m in answer.members
        ],
    }


def _join_error(code: ErrorCode) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": code,
        "generation_id": -1,
        "protocol_type": None,
        "protocol_name": "",
        "leader": "",
        "skip_assignment": False,
        "member_id": "",
        "members": [],
    }


async def handle_sync_group(broker: Broker, header: RequestHeader, request: Any) -> dict[str, Any]:
    sync = SyncGroupRequest(
        group_id=request.group_id,
        generation_id=request.generation_id,
        member_id=request.member_id,
        assignments={a.member_id: bytes(a.assignment) for a in request.assignments},
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
    )
    try:
        answer = await broker.groups.run_parked(
            request.group_id, lambda s, rid, now: s.sync_group(sync, rid, now)
        )
    except CoordinatorError as failed:
        return {
            "throttle_time": 0,
            "error_code": failed.code,
            "protocol_type": None,
            "protocol_name": None,
            "assignment": b"",
        }
    return {
        "throttle_time": 0,
        "error_code": answer.error_code,
        "protocol_type": answer.protocol_type,
        "protocol_name": answer.protocol_name,
        "assignment": answer.assignment,
    }


async def handle_heartbeat(broker: Broker, header: RequestHeader, request: Any) -> dict[str, Any]:
    beat = HeartbeatRequest(
        request.group_id,
        request.generation_id,
        request.member_id,
        getattr(request, "group_instance_id", None),
    )
    try:
        code = await broker.groups.run(request.group_id, lambda s, now: s.heartbeat(beat, now))
    except CoordinatorError as failed:
        code = failed.code
    return {"throttle_time": 0, "error_code": code}


async def handle_leave_group(broker: Broker, header: RequestHeader, request: Any) -> dict[str, Any]:
    batched = header.api_version >= BATCHED_LEAVE_FROM
    if batched:
        members = tuple(
            LeavingMember(m.member_id, m.group_instance_id, getattr(m, "reason", None))
            for m in request.members
        )
    else:
        members = (LeavingMember(request.member_id),)
    leave = LeaveGroupRequest(request.group_id, members)
    try:
        answer = await broker.groups.run(request.group_id, lambda s, now: s.leave_group(leave, now))
    except CoordinatorError as failed:
        return {"throttle_time": 0, "error_code": failed.code, "members": []}
    if not batched:
        code = answer.members[0].error_code if answer.members else answer.error_code
        return {"throttle_time": 0, "error_code": answer.error_code or code}
    return {
        "throttle_time": 0,
        "error_code": answer.error_code,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "error_code": m.error_code,
            }
            for m in answer.members
        ],
    }


def _commit_partitions(topics: Any) -> tuple[OffsetCommitPartition, ...]:
    return tuple(
        OffsetCommitPartition(
            t.name,
            p.partition_index,
            p.committed_offset,
            getattr(p, "committed_leader_epoch", -1),
            p.committed_metadata,
            getattr(p, "commit_timestamp", -1),
        )
        for t in topics
        for p in t.partitions
    )


def _partition_errors(response: Any) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for p in response.partitions:
        topics.setdefault(p.topic, []).append(
            {"partition_index": p.partition, "error_code": p.error_code}
        )
    return [{"name": name, "partitions": parts} for name, parts in topics.items()]


def _uniform_errors(topics: Any, code: ErrorCode) -> list[dict[str, Any]]:
    return [
        {
            "name": t.name,
            "partitions": [
                {"partition_index": p.partition_index, "error_code": code} for p in t.partitions
            ],
        }
        for t in topics
    ]


async def handle_offset_commit(
    broker: Broker, header: RequestHeader, request: Any
) -> dict[str, Any]:
    commit = OffsetCommitRequest(
        group_id=request.group_id,
        partitions=_commit_partitions(request.topics),
        generation_id=request.generation_id_or_member_epoch,  # every version kio reads (2+)
        member_id=getattr(request, "member_id", ""),
        group_instance_id=getattr(request, "group_instance_id", None),
        api_version=header.api_version,
    )
    try:
        answer = await broker.groups.run(
            request.group_id, lambda s, now: s.commit_offsets(commit, now)
        )
    except CoordinatorError as failed:
        return {"throttle_time": 0, "topics": _uniform_errors(request.topics, failed.code)}
    return {"throttle_time": 0, "topics": _partition_errors(answer)}


async def handle_txn_offset_commit(
    broker: Broker, header: RequestHeader, request: Any
) -> dict[str, Any]:
    commit = TxnOffsetCommitRequest(
        transactional_id=request.transactional_id,
        group_id=request.group_id,
        producer_id=request.producer_id,
        producer_epoch=request.producer_epoch,
        partitions=_commit_partitions(request.topics),
        generation_id=getattr(request, "generation_id", -1),
        member_id=getattr(request, "member_id", ""),
        group_instance_id=getattr(request, "group_instance_id", None),
    )
    try:
        answer = await broker.groups.run(
            request.group_id, lambda s, now: s.commit_transactional_offsets(commit, now)
        )
    except CoordinatorError as failed:
        return {"throttle_time": 0, "topics": _uniform_errors(request.topics, failed.code)}
    return {"throttle_time": 0, "topics": _partition_errors(answer)}


async def handle_offset_fetch(
    broker: Broker, header: RequestHeader, request: Any
) -> dict[str, Any]:
    require_stable = getattr(request, "require_stable", False)
    if header.api_version >= BATCHED_OFFSET_FETCH_FROM:
        groups = [
            await _fetch(broker, g.group_id, g.topics, require_stable) for g in request.groups
        ]
        return {"throttle_time": 0, "groups": groups, "error_code": ErrorCode.none}
    answer = await _fetch(broker, request.group_id, request.topics, require_stable)
    return {"throttle_time": 0, "topics": answer["topics"], "error_code": answer["error_code"]}


async def _fetch(
    broker: Broker, group_id: str, topics: Any, require_stable: bool
) -> dict[str, Any]:
    wanted = None if topics is None else {t.name: list(t.partition_indexes) for t in topics}
    await broker.groups.ready()
    try:
        answer = broker.groups.shard_for(group_id).fetch_offsets(group_id, wanted, require_stable)
    except CoordinatorError as exc:
        return {"group_id": group_id, "error_code": exc.code, "topics": []}
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for p in answer.partitions:
        by_topic.setdefault(p.topic, []).append(
            {
                "partition_index": p.partition,
                "committed_offset": p.offset,
                "committed_leader_epoch": p.leader_epoch,
                "metadata": p.metadata,
                "error_code": p.error_code,
            }
        )
    return {
        "group_id": group_id,
        "error_code": answer.error_code,
        "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()],
    }


async def handle_list_groups(broker: Broker, header: RequestHeader, request: Any) -> dict[str, Any]:
    await broker.groups.ready()
    states = tuple(getattr(request, "states_filter", ()) or ())
    listed = [g for shard in broker.groups.shards.values() for g in shard.list_groups(states)]
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "groups": [
            {
                "group_id": g.group_id,
                "protocol_type": g.protocol_type,
                "group_state": g.state,
                "group_type": g.group_type,
            }
            for g in listed
        ],
    }


async def handle_describe_groups(
    broker: Broker, header: RequestHeader, request: Any
) -> dict[str, Any]:
    await broker.groups.ready()
    described = []
    for group_id in request.groups:
        try:
            (group,) = broker.groups.shard_for(group_id).describe_groups([group_id])
        except CoordinatorError as exc:
            described.append(_described_error(group_id, exc.code))
            continue
        described.append(
            {
                "error_code": group.error_code,
                "group_id": group.group_id,
                "group_state": group.state,
                "protocol_type": group.protocol_type,
                "protocol_data": group.protocol_data,
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata,
                        "member_assignment": m.assignment,
                    }
                    for m in group.members
                ],
                "authorized_operations": -(2**31),
            }
        )
    return {"throttle_time": 0, "groups": described}


def _described_error(group_id: str, code: ErrorCode) -> dict[str, Any]:
    return {
        "error_code": code,
        "group_id": group_id,
        "group_state": "",
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
        "authorized_operations": -(2**31),
    }
