"""DescribeProducers (KIP-664): the producer state each partition holds (in a cluster, as
its leader holds it: NOT_LEADER_OR_FOLLOWER elsewhere, as in Kafka). Each topic needs Read
(TOPIC_AUTHORIZATION_FAILED), as in Kafka."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oncelog.broker.authorization import authorize
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.partition import Partition
    from oncelog.broker.request_context import RequestContext


async def handle_describe_producers(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    topics = []
    for topic in request.topics:
        answers = []
        readable = authorize(broker, header, AclOperation.READ, ResourceType.TOPIC, topic.name)
        for index in topic.partition_indexes:
            try:
                if not readable:
                    raise KafkaError(ErrorCode.topic_authorization_failed)
                partition = broker.partition_for_clients(topic.name, index)
            except KafkaError as exc:
                answers.append(
                    {
                        "partition_index": index,
                        "error_code": exc.code,
                        "error_message": exc.message,
                        "active_producers": [],
                    }
                )
                continue
            answers.append(
                {
                    "partition_index": index,
                    "error_code": ErrorCode.none,
                    "error_message": None,
                    "active_producers": describe(partition),
                }
            )
        topics.append({"name": topic.name, "partitions": answers})
    return {"throttle_time": 0, "topics": topics}


def describe(partition: Partition) -> list[dict[str, Any]]:
    """One row per producer the partition remembers, ordered by producer id."""
    return [
        {
            "producer_id": entry.producer_id,
            "producer_epoch": entry.producer_epoch,
            "last_sequence": entry.last_seq,
            "last_timestamp": entry.last_timestamp,
            "coordinator_epoch": entry.coordinator_epoch,
            "current_txn_start_offset": -1
            if entry.current_txn_first_offset is None
            else entry.current_txn_first_offset,
        }
        for _, entry in sorted(partition.producers.entries.items())
    ]
