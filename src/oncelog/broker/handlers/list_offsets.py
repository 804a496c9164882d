"""ListOffsets: earliest, latest, max timestamp, or the first offset at a timestamp.
Each topic needs Describe (else TOPIC_AUTHORIZATION_FAILED), as in Kafka."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oncelog.broker.authorization import authorize
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.partition import Partition
    from oncelog.broker.request_context import RequestContext

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5  # Kafka's LATEST_TIERED_TIMESTAMP (KIP-1005)
READ_COMMITTED = 1


async def handle(broker: Broker, header: RequestContext, request: Any) -> dict[str, Any]:
    committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    topics = []
    for topic in request.topics:
        answers = []
        describable = authorize(
            broker, header, AclOperation.DESCRIBE, ResourceType.TOPIC, topic.name
        )
        for wanted in topic.partitions:
            try:
                if not describable:
                    raise KafkaError(ErrorCode.topic_authorization_failed)
                partition = broker.partition_for_clients(
                    topic.name, wanted.partition_index, getattr(wanted, "current_leader_epoch", -1)
                )
                lagging = _lagging_high_watermark(broker, partition)
                timestamp, offset = resolve(partition, wanted.timestamp, committed, lagging)
            except KafkaError as exc:
                answers.append(
                    {
                        "partition_index": wanted.partition_index,
                        "error_code": exc.code,
                        "timestamp": -1,
                        "offset": -1,
                        "leader_epoch": -1,
                    }
                )
                continue
            answers.append(
                {
                    "partition_index": wanted.partition_index,
                    "error_code": ErrorCode.none,
                    "timestamp": timestamp,
                    "offset": offset,
                    "leader_epoch": partition.leader_epoch,
                }
            )
        topics.append({"name": topic.name, "partitions": answers})
    return {"throttle_time": 0, "topics": topics}


def _lagging_high_watermark(broker: Broker, partition: Partition) -> KafkaError | None:
    """A new leader's high watermark may lag behind what the ISR had committed until its
    followers fetch again (KIP-207): the OFFSET_NOT_AVAILABLE (retriable) that `resolve`
    answers where Kafka does, while it is below the start of the leader's epoch."""
    if broker.cluster is None or broker.cluster.replicas is None:
        return None
    start = broker.cluster.replicas.leader_epoch_start(partition)
    if start is None or partition.high_watermark >= start:
        return None
    return KafkaError(
        ErrorCode.offset_not_available,
        f"the high watermark {partition.high_watermark} has not reached the start {start} "
        "of the leader's epoch yet",
    )


def resolve(
    partition: Partition, timestamp: int, committed: bool, lagging: KafkaError | None = None
) -> tuple[int, int]:
    """(timestamp, offset) as Kafka answers them; (-1, -1) when no record matches.

    A lookup by timestamp (and the max timestamp) answers only an offset a consumer of the
    same isolation level can fetch: below the last stable offset under read_committed, the
    high watermark otherwise. Else no match, as Kafka answers (`lastFetchableOffset` in
    ReplicaManager.fetchOffset): a Spark batch ending at a timestamp inside an open
    transaction then ends at the latest offset, never at one it cannot read.

    `lagging`, a new leader's high watermark still below its epoch's start, is raised
    only where that high watermark would be the answer, as in Kafka's
    `Partition.fetchOffsetForTimestamp`: for the latest offset, and for a lookup that finds
    nothing fetchable; the earliest offsets and a fetchable match are answered as ever.
    """
    fetchable = partition.last_stable_offset if committed else partition.high_watermark
    if timestamp == LATEST:
        if lagging is not None:
            raise lagging
        return -1, fetchable
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return -1, partition.log_start_offset
    if timestamp == LATEST_TIERED:
        return -1, -1  # no tiered storage: nothing tiered, as Kafka answers without it
    if timestamp == MAX_TIMESTAMP:
        max_timestamp, max_offset = partition.log.max_timestamp()  # (-1, -1): empty log
        found_at: tuple[int, int] | None = (max_offset, max_timestamp)
    elif timestamp < 0:
        raise KafkaError(ErrorCode.invalid_request, f"unknown special timestamp {timestamp}")
    else:
        found_at = partition.log.offset_for_timestamp(timestamp)
    if found_at is None or found_at[0] >= fetchable:
        if lagging is not None:
            raise lagging
        return -1, -1
    found_offset, found_timestamp = found_at
    return found_timestamp, found_offset
