"""CreatePartitions (37) and DeleteRecords (21), with Kafka 4.x's checks and errors.

CreatePartitions only ever adds partitions (existing data never moves), at most 10,000 in
one request as for CreateTopics (POLICY_VIOLATION beyond); the internal
topics keep their counts, since a coordinator's partition is a hash of the group or
transactional id modulo that count. DeleteRecords moves a partition's log start offset
(whole segments below it are deleted); the producer state stays (KIP-360), so a producer
whose batches were deleted still continues its sequence. In a cluster CreatePartitions is
the controller's (``cluster/topic_admin.py``) and DeleteRecords the leader's, answered
once the followers' log starts have followed.

CreatePartitions needs Alter on the topic, DeleteRecords Delete on it
(TOPIC_AUTHORIZATION_FAILED), as in Kafka.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

from oncelog.broker.authorization import authorize
from oncelog.broker.handlers.zookeeper_outage import answered_per_resource
from oncelog.broker.topic_names import is_internal
from oncelog.broker.topics import check_partitions_per_request
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.partition import Partition
    from oncelog.broker.request_context import RequestContext
    from oncelog.cluster.node import ClusterNode
    from oncelog.cluster.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

LATEST = -1  # DeleteRecords: up to the high watermark


async def handle_create_partitions(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    counts = Counter(t.name for t in request.topics)
    try:
        check_partitions_per_request(sum(_added(broker, t) for t in request.topics))
    except KafkaError as exc:
        refused = {"error_code": exc.code, "error_message": exc.message}
        return {
            "throttle_time": 0,
            "results": [{"name": t.name, **refused} for t in request.topics],
        }
    results = []
    for wanted in request.topics:
        try:
            if counts[wanted.name] > 1:
                raise KafkaError(ErrorCode.invalid_request, "Duplicate topic in request.")
            if not authorize(broker, header, AclOperation.ALTER, ResourceType.TOPIC, wanted.name):
                raise KafkaError(ErrorCode.topic_authorization_failed, "Authorization failed.")
            if broker.cluster is not None:
                await _add_in_cluster(
                    broker.cluster, wanted, request.validate_only, request.timeout.total_seconds()
                )
            else:
                await _add_partitions(broker, wanted, request.validate_only)
        except KafkaError as exc:
            results.append(
                {"name": wanted.name, "error_code": exc.code, "error_message": exc.message}
            )
            continue
        results.append({"name": wanted.name, "error_code": ErrorCode.none, "error_message": None})
    return {"throttle_time": 0, "results": results}


async def _add_in_cluster(
    cluster: ClusterNode, wanted: Any, validate_only: bool, timeout_s: float
) -> None:
    """The controller writes the new assignment; the answer waits (up to the request's
    timeout) until the new partitions have leaders, as Kafka's DelayedCreatePartitions."""
    admin = cluster.topic_admin
    assignments = (
        None if wanted.assignments is None else [list(a.broker_ids) for a in wanted.assignments]
    )
    with answered_per_resource(f"CreatePartitions of {wanted.name!r}"):
        await admin.add_partitions(
            wanted.name, wanted.count, assignments, validate_only=validate_only
        )
    if not validate_only and not await admin.wait_for_leaders(
        wanted.name, timeout_s, partitions=wanted.count
    ):
        raise KafkaError(
            ErrorCode.request_timed_out,
            f"the new partitions of {wanted.name!r} had no leaders within the request "
            f"timeout of {timeout_s:g} s",
        )


def _added(broker: Broker, wanted: Any) -> int:
    """Partitions a topic of the request would gain (0 for one that does not exist)."""
    topic = broker.topics.get(wanted.name)
    return max(wanted.count - len(topic.partitions), 0) if topic is not None else 0


async def _add_partitions(broker: Broker, wanted: Any, validate_only: bool) -> None:
    topic = broker.topics.get(wanted.name)
    if topic is None:
        raise KafkaError(
            ErrorCode.unknown_topic_or_partition, f"The topic '{wanted.name}' does not exist."
        )
    if is_internal(topic.name):
        raise KafkaError(
            ErrorCode.invalid_partitions,
            f"The number of partitions for the internal topic {topic.name} cannot be changed.",
        )
    current = len(topic.partitions)
    if wanted.count < current:
        raise KafkaError(
            ErrorCode.invalid_partitions,
            f"The topic {topic.name} currently has {current} partition(s); {wanted.count} "
            "would not be an increase.",
        )
    if wanted.count == current:
        raise KafkaError(ErrorCode.invalid_partitions, f"Topic already has {current} partition(s).")
    if wanted.assignments is not None:
        added = wanted.count - current
        if len(wanted.assignments) != added:
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                f"Attempted to add {added} additional partition(s), but only "
                f"{len(wanted.assignments)} assignment(s) were specified.",
            )
        for assignment in wanted.assignments:
            brokers = list(assignment.broker_ids)
            unknown = [b for b in brokers if b != broker.node_id]
            if unknown:
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment,
                    f"The manual partition assignment includes broker {unknown[0]}, but no "
                    "such broker is registered.",
                )
            if len(brokers) != 1:
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment,
                    f"The manual partition assignment includes a partition with "
                    f"{len(brokers)} replica(s), but this is not consistent with previous "
                    "partitions, which have 1 replica(s).",
                )
    if not validate_only:
        await broker.topics.add_partitions(topic.name, wanted.count, broker.now_ms())


async def handle_delete_records(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    answers: dict[tuple[str, int], dict[str, Any]] = {}
    moved: list[tuple[tuple[str, int], Partition, int]] = []  # key, partition, offset asked
    for wanted in request.topics:
        deletable = authorize(broker, header, AclOperation.DELETE, ResourceType.TOPIC, wanted.name)
        for asked in wanted.partitions:
            key = (wanted.name, asked.partition_index)
            try:
                if not deletable:
                    raise KafkaError(ErrorCode.topic_authorization_failed)
                partition = _deletable(broker, *key)
                offset = partition.high_watermark if asked.offset == LATEST else asked.offset
                low = partition.delete_records_before(offset)
            except KafkaError as exc:
                log.info("DeleteRecords %s-%d refused: %s", *key, exc)
                answers[key] = _deleted(key[1], -1, exc.code)
                continue
            if broker.cluster is not None:
                assert broker.cluster.replicas is not None
                broker.cluster.replicas.log_start_moved(partition)
            moved.append((key, partition, offset))
            answers[key] = _deleted(key[1], low, ErrorCode.none)
    # The new log start offsets are on disk before anyone is told about them.
    await asyncio.to_thread(_persist_log_starts, [partition for _, partition, _ in moved])
    if broker.cluster is not None and moved:
        assert broker.cluster.replicas is not None
        await _wait_for_replicas(
            broker.cluster.replicas, moved, answers, request.timeout.total_seconds()
        )
    return {
        "throttle_time": 0,
        "topics": [
            {
                "name": wanted.name,
                "partitions": [
                    answers[(wanted.name, a.partition_index)] for a in wanted.partitions
                ],
            }
            for wanted in request.topics
        ],
    }


async def _wait_for_replicas(
    replicas: ReplicaManager,
    moved: list[tuple[tuple[str, int], Partition, int]],
    answers: dict[tuple[str, int], dict[str, Any]],
    timeout_s: float,
) -> None:
    """Kafka's DelayedDeleteRecords: answer once every live replica's log start reached
    the offset asked (the followers take it from their next fetch), with that low
    watermark; REQUEST_TIMED_OUT for those still behind at the request's timeout,
    NOT_LEADER_OR_FOLLOWER where the leadership moved meanwhile."""
    waiting: dict[asyncio.Future[int], tuple[str, int]] = {}
    for key, partition, offset in moved:
        try:
            waiting[replicas.wait_low_watermark(partition, offset)] = key
        except KafkaError as exc:
            answers[key] = _deleted(key[1], -1, exc.code)
    if not waiting:
        return
    done, pending = await asyncio.wait(waiting, timeout=timeout_s)
    for future in pending:
        future.cancel()
        key = waiting[future]
        answers[key] = {**answers[key], "error_code": ErrorCode.request_timed_out}
    for future in done:
        key = waiting[future]
        error = future.exception()
        if isinstance(error, KafkaError):
            answers[key] = _deleted(key[1], -1, error.code)
        elif error is not None:
            raise error
        else:
            answers[key] = _deleted(key[1], future.result(), ErrorCode.none)


def _deleted(index: int, low_watermark: int, code: ErrorCode) -> dict[str, Any]:
    return {"partition_index": index, "low_watermark": low_watermark, "error_code": code}


def _deletable(broker: Broker, topic: str, index: int) -> Partition:
    """The partition whose records to delete: on its leader in a cluster."""
    if is_internal(topic):
        raise KafkaError(
            ErrorCode.invalid_topic_exception, f"Cannot delete records of internal topic {topic}"
        )
    return broker.partition_for_clients(topic, index)


def _persist_log_starts(partitions: list[Partition]) -> None:
    for partition in partitions:
        partition.log.write_log_start_checkpoint()
