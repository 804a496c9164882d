"""Metadata: brokers, topics and partitions; auto-creates topics when allowed."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from oncelog.broker.topics import Topic
from oncelog.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.protocol.codec import RequestHeader

log = logging.getLogger(__name__)

NO_AUTHORIZED_OPERATIONS = -(2**31)


async def handle(broker: Broker, header: RequestHeader, request: Any) -> dict[str, Any]:
    requested = request.topics
    if requested is None or (header.api_version == 0 and not requested):
        topics = [_describe(broker, t) for t in broker.topics.all()]
    else:
        allow_create = getattr(request, "allow_auto_topic_creation", True)
        topics = [_lookup(broker, t, allow_create) for t in requested]
    host, port = broker.advertised_address
    return {
        "throttle_time": 0,
        "brokers": [{"node_id": broker.node_id, "host": host, "port": port, "rack": None}],
        "cluster_id": broker.cluster_id,
        "controller_id": broker.node_id,
        "topics": topics,
        "cluster_authorized_operations": NO_AUTHORIZED_OPERATIONS,
        "error_code": ErrorCode.none,
    }


def _lookup(broker: Broker, requested: Any, allow_create: bool) -> dict[str, Any]:
    name = getattr(requested, "name", None)
    topic_id = getattr(requested, "topic_id", None)
    if name is None and topic_id is not None:
        topic = broker.topics.by_id(topic_id)
        if topic is None:
            return _missing(ErrorCode.unknown_topic_id, None, topic_id)
        return _describe(broker, topic)
    topic = broker.topics.get(name)
    if topic is not None:
        return _describe(broker, topic)
    if not (allow_create and broker.config.auto_create_topics_enable):
        return _missing(ErrorCode.unknown_topic_or_partition, name, None)
    try:
        topic = broker.topics.create(name, -1, {}, broker.now_ms())
    except KafkaError as exc:
        log.info("metadata could not auto-create %r: %s", name, exc)
        return _missing(exc.code, name, None)
    return _describe(broker, topic)


def _describe(broker: Broker, topic: Topic) -> dict[str, Any]:
    node = broker.node_id
    return {
        "error_code": ErrorCode.none,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.is_internal,
        "partitions": [
            {
                "error_code": ErrorCode.none,
                "partition_index": p.index,
                "leader_id": node,
                "leader_epoch": 0,
                "replica_nodes": [node],
                "isr_nodes": [node],
                "offline_replicas": [],
            }
            for p in topic.partitions
        ],
        "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }


def _missing(code: ErrorCode, name: str | None, topic_id: Any) -> dict[str, Any]:
    return {
        "error_code": code,
        "name": name,
        "topic_id": topic_id,
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }
