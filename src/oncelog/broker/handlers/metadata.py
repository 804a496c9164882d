"""Metadata: brokers, topics and partitions; auto-creates topics when allowed (never the
internal ones: their coordinators create them).

A single node describes itself; a cluster broker answers from its copy of ZooKeeper (the
metadata cache): every live broker, the controller, and each partition's leader, leader
epoch, replicas, ISR and offline replicas.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oncelog.broker.topic_names import is_internal
from oncelog.broker.topics import Topic
from oncelog.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.cluster.node import ClusterNode
    from oncelog.protocol.codec import RequestHeader

log = logging.getLogger(__name__)

NO_AUTHORIZED_OPERATIONS = -(2**31)
ZERO_UUID = uuid.UUID(int=0)
# Topic ids in requests, and null topic names, arrived in Metadata v12 (KIP-516); v10 and
# v11 carry a topic id field that must stay zero and a name that must not be null.
FIRST_VERSION_WITH_TOPIC_IDS = 12


@dataclass(frozen=True)
class ClusterView:
    """What Metadata and DescribeCluster say of the cluster: the broker itself on a single
    node; in a cluster, the live brokers and controller this broker's cache knows."""

    cluster_id: str
    controller_id: int  # -1: none known
    brokers: list[tuple[int, str, int]]  # (id, host, port), by id


def cluster_view(broker: Broker) -> ClusterView:
    """The live brokers and the controller, as this broker knows them now."""
    if broker.cluster is None:
        host, port = broker.advertised_address
        return ClusterView(broker.cluster_id, broker.node_id, [(broker.node_id, host, port)])
    cache = broker.cluster.cache
    return ClusterView(
        broker.cluster.cluster_id,
        -1 if cache.controller_id is None else cache.controller_id,
        [
            (b.broker_id, b.host, b.port)
            for b in sorted(cache.brokers.values(), key=lambda b: b.broker_id)
        ],
    )


def _answer(view: ClusterView, topics: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "brokers": [
            {"node_id": node_id, "host": host, "port": port, "rack": None}
            for node_id, host, port in view.brokers
        ],
        "cluster_id": view.cluster_id,
        "controller_id": view.controller_id,
        "topics": topics,
        "cluster_authorized_operations": NO_AUTHORIZED_OPERATIONS,
        "error_code": ErrorCode.none,
    }


async def handle(broker: Broker, header: RequestHeader, request: Any) -> dict[str, Any]:
    if broker.cluster is not None:
        return await _handle_in_cluster(broker, broker.cluster, header, request)
    requested = request.topics
    if requested is None or (header.api_version == 0 and not requested):
        topics = [_describe(broker, t) for t in broker.topics.all()]
    elif _misuses_topic_ids(header, requested):
        topics = _all_invalid(requested)
    else:
        allow_create = getattr(request, "allow_auto_topic_creation", True)
        topics = [_lookup(broker, t, allow_create) for t in requested]
    return _answer(cluster_view(broker), topics)


def _misuses_topic_ids(header: RequestHeader, requested: Any) -> bool:
    """A v10/v11 request naming a topic id or a null name."""
    return header.api_version < FIRST_VERSION_WITH_TOPIC_IDS and any(
        t.name is None or _topic_id(t) is not None for t in requested
    )


def _all_invalid(requested: Any) -> list[dict[str, Any]]:
    """Kafka throws InvalidRequestException there; its error response names every requested
    topic with INVALID_REQUEST, a null name as "" (these versions have none)."""
    return [_missing(ErrorCode.invalid_request, t.name or "", None) for t in requested]


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


# -- cluster mode ----------------------------------------------------------------------------

NO_LEADER = -1


async def _handle_in_cluster(
    broker: Broker, cluster: ClusterNode, header: RequestHeader, request: Any
) -> dict[str, Any]:
    cache = cluster.cache
    requested = request.topics
    if requested is None or (header.api_version == 0 and not requested):
        topics = [_describe_in_cluster(cluster, name) for name in sorted(cache.topics)]
    elif _misuses_topic_ids(header, requested):
        topics = _all_invalid(requested)
    else:
        allow_create = getattr(request, "allow_auto_topic_creation", True)
        topics = [await _lookup_in_cluster(broker, cluster, t, allow_create) for t in requested]
    return _answer(cluster_view(broker), topics)


async def _lookup_in_cluster(
    broker: Broker, cluster: ClusterNode, requested: Any, allow_create: bool
) -> dict[str, Any]:
    name = requested.name
    topic_id = _topic_id(requested)
    if topic_id is not None:  # v12+: the id wins, as in Kafka
        name = cluster.cache.topic_name(topic_id)
        if name is None:
            return _missing(ErrorCode.unknown_topic_id, None, topic_id)
    if name is None:  # v12+: neither a name nor an id
        return _missing(ErrorCode.invalid_request, None, None)
    if name in cluster.cache.topics:
        return _describe_in_cluster(cluster, name)
    if not (allow_create and broker.config.auto_create_topics_enable) or is_internal(name):
        return _missing(ErrorCode.unknown_topic_or_partition, name, None)
    try:
        await cluster.topic_admin.create(name, -1, -1, {})
    except KafkaError as exc:
        if exc.code != ErrorCode.topic_already_exists:
            log.info("metadata could not auto-create %r: %s", name, exc)
            return _missing(exc.code, name, None)
    # As Kafka: the topic exists but has no leaders yet; the client asks again.
    return _missing(ErrorCode.leader_not_available, name, None)


def _describe_in_cluster(cluster: ClusterNode, name: str) -> dict[str, Any]:
    cache = cluster.cache
    assignment = cache.topics[name]
    live = cache.brokers
    partitions = []
    for index, replicas in sorted(assignment.replicas.items()):
        state = cache.states.get((name, index))
        leader = NO_LEADER if state is None else state.leader
        error = ErrorCode.none if leader in live else ErrorCode.leader_not_available
        partitions.append(
            {
                "error_code": error,
                "partition_index": index,
                "leader_id": leader if leader in live else NO_LEADER,
                "leader_epoch": -1 if state is None else state.leader_epoch,
                "replica_nodes": list(replicas),
                "isr_nodes": [] if state is None else list(state.isr),
                "offline_replicas": [r for r in replicas if r not in live],
            }
        )
    return {
        "error_code": ErrorCode.none,
        "name": name,
        "topic_id": assignment.topic_id,
        "is_internal": is_internal(name),
        "partitions": partitions,
        "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }
