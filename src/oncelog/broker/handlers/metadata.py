"""Metadata: brokers, topics and partitions; auto-creates topics when allowed (never the
internal ones: their coordinators create them)."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from oncelog.broker.topic_names import is_internal
from oncelog.broker.topics import Topic
from oncelog.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.protocol.codec import RequestHeader

log = logging.getLogger(__name__)

NO_AUTHORIZED_OPERATIONS = -(2**31)
ZERO_UUID = uuid.UUID(int=0)
# Topic ids in requests, and null topic names, arrived in Metadata v12 (KIP-516); v10 and
# v11 carry a topic id field that must stay zero and a name that must not be null.
FIRST_VERSION_WITH_TOPIC_IDS = 12


async def handle(broker: Broker, header: RequestHeader, request: Any) -> dict[str, Any]:
    requested = request.topics
    if requested is None or (header.api_version == 0 and not requested):
        topics = [_describe(broker, t) for t in broker.topics.all()]
    elif header.api_version < FIRST_VERSION_WITH_TOPIC_IDS and any(
        t.name is None or _topic_id(t) is not None for t in requested
    ):
        # Kafka throws InvalidRequestException here; its error response names every
        # requested topic with INVALID_REQUEST, a null name as "" (these versions have none).
        topics = [_missing(ErrorCode.invalid_request, t.name or "", None) for t in requested]
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


def _topic_id(requested: Any) -> uuid.UUID | None:
    """The topic id a request names (None: none, which v10+ sends as the zero UUID)."""
    topic_id = getattr(requested, "topic_id", None)
    return None if topic_id in (None, ZERO_UUID) else topic_id


def _lookup(broker: Broker, requested: Any, allow_create: bool) -> dict[str, Any]:
    name = requested.name
    topic_id = _topic_id(requested)
    if topic_id is not None:  # v12+: the id wins, as in Kafka
        topic = broker.topics.by_id(topic_id)
        if topic is None:
            return _missing(ErrorCode.unknown_topic_id, None, topic_id)
        return _describe(broker, topic)
    if name is None:  # v12+: neither a name nor an id
        return _missing(ErrorCode.invalid_request, None, None)
    topic = broker.topics.get(name)
    if topic is not None:
        return _describe(broker, topic)
    if not (allow_create and broker.config.auto_create_topics_enable) or is_internal(name):
        # Internal topics are created by their coordinators alone, with their own counts.
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
