"""OffsetsForLeaderEpoch (KIP-101, KIP-279): where a leader epoch ended in this leader's log.

Followers ask it before fetching, to cut a tail that diverged; consumers ask it after a
leader change to check their position (KIP-320). Only the leader answers. A single node has
one epoch, 0, from the log start: it answers for it with its log end.

ClusterAction on the cluster (followers) allows every topic; otherwise each topic needs
Describe (TOPIC_AUTHORIZATION_FAILED), as in Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oncelog.broker.authorization import authorize
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from oncelog.storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_OFFSET

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.request_context import RequestContext

SINGLE_NODE_EPOCH = 0


async def handle(broker: Broker, header: RequestContext, request: Any) -> dict[str, Any]:
    replica = authorize(
        broker,
        header,
        AclOperation.CLUSTER_ACTION,
        ResourceType.CLUSTER,
        CLUSTER_NAME,
        log_denial=False,
    )
    topics = []
    for topic in request.topics:
        if replica or authorize(
            broker, header, AclOperation.DESCRIBE, ResourceType.TOPIC, topic.topic
        ):
            partitions = [_answer(broker, topic.topic, p) for p in topic.partitions]
        else:
            refused = ErrorCode.topic_authorization_failed
            partitions = [
                _result(p.partition, refused, UNDEFINED_EPOCH, UNDEFINED_OFFSET)
                for p in topic.partitions
            ]
        topics.append({"topic": topic.topic, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}


def _answer(broker: Broker, topic: str, wanted: Any) -> dict[str, Any]:
    index = wanted.partition
    try:
        epoch, end = _end_offset(
            broker, topic, index, wanted.current_leader_epoch, wanted.leader_epoch
        )
    except KafkaError as exc:
        return _result(index, exc.code, UNDEFINED_EPOCH, UNDEFINED_OFFSET)
    return _result(index, ErrorCode.none, epoch, end)


def _end_offset(
    broker: Broker, topic: str, index: int, current_leader_epoch: int, epoch: int
) -> tuple[int, int]:
    if broker.cluster is not None and broker.cluster.replicas is not None:
        return broker.cluster.replicas.end_offset_for_epoch(
            topic, index, current_leader_epoch, epoch
        )
    partition = broker.topics.partition(topic, index)
    if current_leader_epoch > SINGLE_NODE_EPOCH:
        raise KafkaError(ErrorCode.unknown_leader_epoch, "a single node is at leader epoch 0")
    if epoch == SINGLE_NODE_EPOCH:
        return SINGLE_NODE_EPOCH, partition.log.log_end_offset
    return UNDEFINED_EPOCH, UNDEFINED_OFFSET


def _result(index: int, code: ErrorCode, epoch: int, end_offset: int) -> dict[str, Any]:
    return {"partition": index, "error_code": code, "leader_epoch": epoch, "end_offset": end_offset}
