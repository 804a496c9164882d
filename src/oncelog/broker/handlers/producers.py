"""DescribeProducers (KIP-664): the producer state each partition holds."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oncelog.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.partition import Partition
    from oncelog.protocol.codec import RequestHeader


async def handle_describe_producers(
    broker: Broker, header: RequestHeader, request: Any
) -> dict[str, Any]:
    topics = []
    for topic in request.topics:
        answers = []
        for index in topic.partition_indexes:
            try:
                partition = broker.topics.partition(topic.name, index)
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
