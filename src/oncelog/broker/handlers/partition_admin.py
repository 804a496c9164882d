"""CreatePartitions (37) and DeleteRecords (21), with Kafka 4.x's checks and errors.

CreatePartitions only ever adds partitions (existing data never moves); the internal
topics keep their counts, since a coordinator's partition is a hash of the group or
transactional id modulo that count. DeleteRecords moves a partition's log start offset
(whole segments below it are deleted); the producer state stays (KIP-360), so a producer
whose batches were deleted still continues its sequence.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

from oncelog.broker.topic_names import is_internal
from oncelog.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.cluster.node import ClusterNode
    from oncelog.protocol.codec import RequestHeader

log = logging.getLogger(__name__)

LATEST = -1  # DeleteRecords: up to the high watermark


async def handle_create_partitions(
    broker: Broker, header: RequestHeader, request: Any
) -> dict[str, Any]:
    counts = Counter(t.name for t in request.topics)
    results = []
    for wanted in request.topics:
        try:
            if counts[wanted.name] > 1:
                raise KafkaError(ErrorCode.invalid_request, "Duplicate topic in request.")
            if broker.cluster is not None:
                await _add_in_cluster(
                    broker.cluster, wanted, request.validate_only, request.timeout.total_seconds()
                )
            else:
                _add_partitions(broker, wanted, request.validate_only)
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
    await admin.add_partitions(wanted.name, wanted.count, assignments, validate_only=validate_only)
    if not validate_only and not await admin.wait_for_leaders(
        wanted.name, timeout_s, partitions=wanted.count
    ):
        raise KafkaError(
            ErrorCode.request_timed_out,
            f"the new partitions of {wanted.name!r} had no leaders within the request "
            f"timeout of {timeout_s:g} s",
        )


def _add_partitions(broker: Broker, wanted: Any, validate_only: bool) -> None:
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
        broker.topics.add_partitions(topic.name, wanted.count, broker.now_ms())


async def handle_delete_records(
    broker: Broker, header: RequestHeader, request: Any
) -> dict[str, Any]:
    topics = []
    persist = []
    for wanted in request.topics:
        partitions = []
        for asked in wanted.partitions:
            try:
                partition = _deletable(broker, wanted.name, asked.partition_index)
                low = partition.delete_records_before(
                    partition.high_watermark if asked.offset == LATEST else asked.offset
                )
                persist.append(partition)
            except KafkaError as exc:
                log.info("DeleteRecords %s-%d refused: %s", wanted.name, asked.partition_index, exc)
                partitions.append(
                    {
                        "partition_index": asked.partition_index,
                        "low_watermark": -1,
                        "error_code": exc.code,
                    }
                )
                continue
            partitions.append(
                {
                    "partition_index": asked.partition_index,
                    "low_watermark": low,
                    "error_code": ErrorCode.none,
                }
            )
        topics.append({"name": wanted.name, "partitions": partitions})
    # The new log start offsets are on disk before anyone is told about them.
    await asyncio.to_thread(_persist_log_starts, persist)
    return {"throttle_time": 0, "topics": topics}


def _deletable(broker: Broker, topic: str, index: int) -> Any:
    if is_internal(topic):
        raise KafkaError(
            ErrorCode.invalid_topic_exception, f"Cannot delete records of internal topic {topic}"
        )
    return broker.topics.partition(topic, index)


def _persist_log_starts(partitions: list[Any]) -> None:
    for partition in partitions:
        partition.log.write_log_start_checkpoint()
