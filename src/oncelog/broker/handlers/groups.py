"""Consumer group APIs (classic protocol): JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, TxnOffsetCommit, ListGroups, DescribeGroups.

Each handler turns the versioned request into the group core's request, runs it on the
group's shard, and writes the answer back in the version's layout.

Authorization, as in Kafka: joining, syncing, heartbeats, leaving and committing need Read
on the group (GROUP_AUTHORIZATION_FAILED); committing also needs Read on each topic
(TOPIC_AUTHORIZATION_FAILED for its partitions, the others are committed); a transactional
commit first needs Write on the transactional id. A committed partition the metadata does
not hold is UNKNOWN_TOPIC_OR_PARTITION (checked after Read). Fetching offsets and describing need
Describe on the group (fetching all offsets lists only the topics the principal may
Describe); listing shows every group to Describe on the cluster, else the groups the
principal may Describe.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, NamedTuple

from oncelog.broker.authorization import (
    NO_AUTHORIZED_OPERATIONS,
    authorize,
    authorize_cluster,
    authorized_operations,
)
from oncelog.broker.coordinator_runtime import CoordinatorError, write_error
from oncelog.broker.internal_topics import CONSUMER_OFFSETS
from oncelog.broker.transactional_writes import OffsetsProducer, ensure_still_open
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
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.partition import Partition
    from oncelog.broker.request_context import RequestContext
    from oncelog.cluster.txn_verification import Admission
    from oncelog.groups.coordinator import GroupCoordinatorShard
    from oncelog.producers.state import ProducerStateEntry

BATCHED_LEAVE_FROM = 3
BATCHED_OFFSET_FETCH_FROM = 8


def _may(broker: Broker, header: RequestContext, operation: AclOperation, group_id: str) -> bool:
    return authorize(broker, header, operation, ResourceType.GROUP, group_id)


class _Topic(NamedTuple):
    """A topic of a commit request with the partitions that may be committed."""

    name: str
    partitions: list[Any]


def _split_committable(
    broker: Broker, header: RequestContext, topics: Any
) -> tuple[list[_Topic], list[dict[str, Any]]]:
    """The partitions whose offsets may be committed, by topic, and the others' answers,
    as Kafka's KafkaApis sorts an OffsetCommit or TxnOffsetCommit before the group
    coordinator sees it: a topic the principal may not Read is TOPIC_AUTHORIZATION_FAILED;
    a partition the metadata does not hold (its topic unknown, or past its count) is
    UNKNOWN_TOPIC_OR_PARTITION, and no offset is stored for it."""
    committable: list[_Topic] = []
    refused: list[_Topic] = []
    unknown: list[_Topic] = []
    for topic in topics:
        if not authorize(broker, header, AclOperation.READ, ResourceType.TOPIC, topic.name):
            refused.append(_Topic(topic.name, list(topic.partitions)))
            continue
        known: list[Any] = []
        missing: list[Any] = []
        for p in topic.partitions:  # one pass: a request may name thousands of partitions
            (known if broker.knows_partition(topic.name, p.partition_index) else missing).append(p)
        if known:
            committable.append(_Topic(topic.name, known))
        if missing:
            unknown.append(_Topic(topic.name, missing))
    answers = _uniform_errors(refused, ErrorCode.topic_authorization_failed) + _uniform_errors(
        unknown, ErrorCode.unknown_topic_or_partition
    )
    return committable, answers


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000)


async def handle_join_group(broker: Broker, header: RequestContext, request: Any) -> dict[str, Any]:
    if not _may(broker, header, AclOperation.READ, request.group_id):
        return _join_error(ErrorCode.group_authorization_failed)
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


async def handle_sync_group(broker: Broker, header: RequestContext, request: Any) -> dict[str, Any]:
    if not _may(broker, header, AclOperation.READ, request.group_id):
        return _sync_error(ErrorCode.group_authorization_failed)
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
        return _sync_error(failed.code)
    return {
        "throttle_time": 0,
        "error_code": answer.error_code,
        "protocol_type": answer.protocol_type,
        "protocol_name": answer.protocol_name,
        "assignment": answer.assignment,
    }


def _sync_error(code: ErrorCode) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": code,
        "protocol_type": None,
        "protocol_name": None,
        "assignment": b"",
    }


async def handle_heartbeat(broker: Broker, header: RequestContext, request: Any) -> dict[str, Any]:
    if not _may(broker, header, AclOperation.READ, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed}
    beat = HeartbeatRequest(
        request.group_id,
        request.generation_id,
        request.member_id,
        getattr(request, "group_instance_id", None),
    )
    try:
        code = await broker.groups.run(request.group_id, lambda s, now: s.heartbeat(beat, now))
    except CoordinatorError as failed:
        # While the group's partition loads (a new coordinator after a failover) Kafka
        # answers a heartbeat NONE: the member keeps its place, and clients such as
        # kafka-python do not handle the error here.
        load = failed.code == ErrorCode.coordinator_load_in_progress
        code = ErrorCode.none if load else failed.code
    return {"throttle_time": 0, "error_code": code}


async def handle_leave_group(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    batched = header.api_version >= BATCHED_LEAVE_FROM
    if not _may(broker, header, AclOperation.READ, request.group_id):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.group_authorization_failed,
            "members": [],
        }
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
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    if not _may(broker, header, AclOperation.READ, request.group_id):
        refused = _uniform_errors(request.topics, ErrorCode.group_authorization_failed)
        return {"throttle_time": 0, "topics": refused}
    committable, refused = _split_committable(broker, header, request.topics)
    if not committable:
        return {"throttle_time": 0, "topics": refused}
    commit = OffsetCommitRequest(
        group_id=request.group_id,
        partitions=_commit_partitions(committable),
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
        return {"throttle_time": 0, "topics": _uniform_errors(committable, failed.code) + refused}
    return {"throttle_time": 0, "topics": _partition_errors(answer) + refused}


async def handle_txn_offset_commit(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    if not authorize(
        broker, header, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id
    ):
        code = ErrorCode.transactional_id_authorization_failed
        return {"throttle_time": 0, "topics": _uniform_errors(request.topics, code)}
    if not _may(broker, header, AclOperation.READ, request.group_id):
        code = ErrorCode.group_authorization_failed
        return {"throttle_time": 0, "topics": _uniform_errors(request.topics, code)}
    committable, refused = _split_committable(broker, header, request.topics)
    if not committable:
        return {"throttle_time": 0, "topics": refused}
    commit = TxnOffsetCommitRequest(
        transactional_id=request.transactional_id,
        group_id=request.group_id,
        producer_id=request.producer_id,
        producer_epoch=request.producer_epoch,
        partitions=_commit_partitions(committable),
        generation_id=getattr(request, "generation_id", -1),
        member_id=getattr(request, "member_id", ""),
        group_instance_id=getattr(request, "group_instance_id", None),
    )
    producer = OffsetsProducer(request.producer_id, request.producer_epoch)
    admission: Admission | None = None
    try:
        partition, admission = await _admit_transactional_offsets(
            broker, request.transactional_id, producer, request.group_id
        )
        before = partition.producers.held(producer.producer_id)
        if admission is not None:
            await admission.wait()

        def commit_in_transaction(shard: GroupCoordinatorShard, now: int) -> Any:
            # in the step that appends the offsets: no marker can come in between
            _check_still_in_transaction(
                broker, request.transactional_id, producer, partition, before
            )
            return shard.commit_transactional_offsets(commit, now)

        answer = await broker.groups.run(request.group_id, commit_in_transaction)
    except KafkaError as failed:  # a CoordinatorError too
        code = write_error(failed.code)
        return {"throttle_time": 0, "topics": _uniform_errors(committable, code) + refused}
    finally:
        if admission is not None:
            admission.done()
    return {"throttle_time": 0, "topics": _partition_errors(answer) + refused}


async def _admit_transactional_offsets(
    broker: Broker, transactional_id: str, producer: OffsetsProducer, group_id: str
) -> tuple[Partition, Admission | None]:
    """KIP-890 part 1 for offsets: a TxnOffsetCommit is a transactional write to the group's
    ``__consumer_offsets`` partition, and is verified against the producer's transaction as
    a batch is (Kafka's group coordinator verifies it before the write; a failed check is
    answered as a failed write, `write_error`). Unchecked, a late commit (sent before an
    abort, answered after it) or one without AddOffsetsToTxn opened a transaction on that
    partition that no marker would ever end: every ``require_stable`` OffsetFetch of the
    partition's groups answered UNSTABLE_OFFSET_COMMIT for good.

    The group's shard first, so a broker that does not coordinate the group answers as for
    any group request (CoordinatorError)."""
    index = await broker.groups.locate(group_id)
    broker.groups.shard_for(group_id)  # raises NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS
    partition = broker.partition_for_clients(CONSUMER_OFFSETS, index)
    return partition, broker.check_transactional_write(transactional_id, producer, partition)


def _check_still_in_transaction(
    broker: Broker,
    transactional_id: str,
    producer: OffsetsProducer,
    partition: Partition,
    before: ProducerStateEntry | None,
) -> None:
    """Run where the offsets are appended: on one node the coordinator's answer of now; in
    a cluster, that no marker ended the verified transaction since the admission
    (`before`: the producer's entry then). CoordinatorError, a refusal and no failure."""
    try:
        # the partition of now: a leadership that moved and came back made a new one
        partition = broker.partition_for_clients(partition.topic, partition.index)
        if broker.cluster is None:
            broker.check_transactional_write(transactional_id, producer, partition)
        else:
            ensure_still_open(partition, producer.producer_id, producer.producer_epoch, before)
    except KafkaError as refused:
        raise CoordinatorError(refused.code, refused.message) from None


async def handle_offset_fetch(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    require_stable = getattr(request, "require_stable", False)
    if header.api_version >= BATCHED_OFFSET_FETCH_FROM:
        groups = [
            await _fetch(broker, header, g.group_id, g.topics, require_stable)
            for g in request.groups
        ]
        return {"throttle_time": 0, "groups": groups, "error_code": ErrorCode.none}
    answer = await _fetch(broker, header, request.group_id, request.topics, require_stable)
    return {"throttle_time": 0, "topics": answer["topics"], "error_code": answer["error_code"]}


async def _fetch(
    broker: Broker, header: RequestContext, group_id: str, topics: Any, require_stable: bool
) -> dict[str, Any]:
    if not _may(broker, header, AclOperation.DESCRIBE, group_id):
        return {
            "group_id": group_id,
            "error_code": ErrorCode.group_authorization_failed,
            "topics": [],
        }
    wanted = None if topics is None else {t.name: list(t.partition_indexes) for t in topics}
    await broker.groups.ready()
    try:
        answer = broker.groups.shard_for(group_id).fetch_offsets(group_id, wanted, require_stable)
    except CoordinatorError as exc:
        return {"group_id": group_id, "error_code": exc.code, "topics": []}
    by_topic: dict[str, list[dict[str, Any]]] = {}
    describable = functools.cache(
        lambda topic: authorize(
            broker,
            header,
            AclOperation.DESCRIBE,
            ResourceType.TOPIC,
            topic,
            log_denial=wanted is not None,  # fetching all offsets only filters
        )
    )
    for p in answer.partitions:
        if not describable(p.topic):
            if wanted is not None:
                by_topic.setdefault(p.topic, []).append(_refused_offset(p.partition))
            continue
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


def _refused_offset(partition: int) -> dict[str, Any]:
    return {
        "partition_index": partition,
        "committed_offset": -1,
        "committed_leader_epoch": -1,
        "metadata": None,
        "error_code": ErrorCode.topic_authorization_failed,
    }


async def handle_list_groups(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    await broker.groups.ready()
    states = tuple(getattr(request, "states_filter", ()) or ())
    listed = [g for shard in broker.groups.shards.values() for g in shard.list_groups(states)]
    if not authorize_cluster(broker, header, AclOperation.DESCRIBE):
        listed = [
            g
            for g in listed
            if authorize(
                broker,
                header,
                AclOperation.DESCRIBE,
                ResourceType.GROUP,
                g.group_id,
                log_denial=False,
            )
        ]
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
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    await broker.groups.ready()
    described = []
    include_operations = getattr(request, "include_authorized_operations", False)
    for group_id in request.groups:
        if not _may(broker, header, AclOperation.DESCRIBE, group_id):
            described.append(_described_error(group_id, ErrorCode.group_authorization_failed))
            continue
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
                "authorized_operations": (
                    authorized_operations(broker, header, ResourceType.GROUP, group_id)
                    if include_operations
                    else NO_AUTHORIZED_OPERATIONS
                ),
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
        "authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }
