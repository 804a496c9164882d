"""Metadata: brokers, topics and partitions; auto-creates topics when allowed (never the
internal ones: their coordinators create them).

A single node describes itself; a cluster broker answers from its copy of ZooKeeper (the
metadata cache): every live broker, the controller, and each partition's leader, leader
epoch, replicas, ISR and offline replicas. A cluster broker still joining holds its answer
until that copy is complete, as Kafka's broker serves once it has caught up.

Authorization, as in Kafka: a topic the principal may not Describe is left out of an
all-topics answer and answered TOPIC_AUTHORIZATION_FAILED when asked for by name, before
its existence is looked at (nothing about it is disclosed); auto-creation needs Create on
the cluster or on the topic (else TOPIC_AUTHORIZATION_FAILED). The authorized operations
(KIP-430) are filled in when the client asks for them.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from oncelog.broker.authorization import (
    NO_AUTHORIZED_OPERATIONS,
    authorize,
    authorized_operations,
)
from oncelog.broker.handlers.zookeeper_outage import answered_per_resource
from oncelog.broker.topic_names import is_internal
from oncelog.broker.topics import Topic
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.security.acl import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.request_context import RequestContext
    from oncelog.cluster.node import ClusterNode

log = logging.getLogger(__name__)

ZERO_UUID = uuid.UUID(int=0)
# Topic ids in requests, and null topic names, arrived in Metadata v12 (KIP-516); v10 and
# v11 carry a topic id field that must stay zero and a name that must not be null.
FIRST_VERSION_WITH_TOPIC_IDS = 12


@dataclass(frozen=True)
class ClusterView:
    """What Metadata and DescribeCluster say of the cluster: the broker itself on a single
    node (at the address advertised for the client's listener); in a cluster, the live
    brokers and controller this broker's cache knows."""

    cluster_id: str
    controller_id: int  # -1: none known
    brokers: list[tuple[int, str, int]]  # (id, host, port), by id


def cluster_view(broker: Broker, listener: str) -> ClusterView:
    """The live brokers and the controller, as this broker knows them now."""
    if broker.cluster is None:
        host, port = broker.advertised_address_for(listener)
        return ClusterView(broker.cluster_id, broker.node_id, [(broker.node_id, host, port)])
    cache = broker.cluster.cache
    return ClusterView(
        broker.cluster.cluster_id,
        -1 if cache.controller_id is None else cache.controller_id,
        [
            (b.broker_id, *b.address_for(listener))
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


class _Access:
    """What the request's principal may see and create, each answer asked once."""

    def __init__(self, broker: Broker, header: RequestContext) -> None:
        self.describe: Callable[[str], bool] = functools.cache(
            lambda name: authorize(broker, header, AclOperation.DESCRIBE, ResourceType.TOPIC, name)
        )
        self.listed: Callable[[str], bool] = functools.cache(
            lambda name: authorize(
                broker, header, AclOperation.DESCRIBE, ResourceType.TOPIC, name, log_denial=False
            )
        )
        create_any = functools.cache(
            lambda: authorize(
                broker,
                header,
                AclOperation.CREATE,
                ResourceType.CLUSTER,
                CLUSTER_NAME,
                log_denial=False,
            )
        )
        self.create: Callable[[str], bool] = lambda name: (
            create_any() or authorize(broker, header, AclOperation.CREATE, ResourceType.TOPIC, name)
        )


async def handle(broker: Broker, header: RequestContext, request: Any) -> dict[str, Any]:
    if broker.cluster is not None:
        # A broker still joining answers once it knows the cluster (ClusterNode.caught_up
        # says why a partial answer is harmful), or once joining should have ended.
        await broker.cluster.caught_up()
    access = _Access(broker, header)
    catalog = _LocalCatalog(broker) if broker.cluster is None else _ClusterCatalog(broker.cluster)
    requested = request.topics
    topics: list[dict[str, Any]]
    if requested is None or (header.api_version == 0 and not requested):
        described = (catalog.describe(n) for n in catalog.names() if access.listed(n))
        topics = [t for t in described if t is not None]  # each name listed has one
    elif _misuses_topic_ids(header, requested):
        topics = _all_invalid(requested)
    else:
        allow_create = getattr(request, "allow_auto_topic_creation", True)
        topics = [await _lookup(broker, catalog, t, allow_create, access) for t in requested]
    answer = _answer(cluster_view(broker, header.listener), topics)
    return _with_authorized_operations(broker, header, request, answer)


def _with_authorized_operations(
    broker: Broker, header: RequestContext, request: Any, answer: dict[str, Any]
) -> dict[str, Any]:
    """KIP-430: the operations the principal may do on each topic and on the cluster, for
    a client that asks (v8+)."""
    if getattr(request, "include_topic_authorized_operations", False):
        for topic in answer["topics"]:
            if topic["error_code"] == ErrorCode.none:
                topic["topic_authorized_operations"] = authorized_operations(
                    broker, header, ResourceType.TOPIC, topic["name"]
                )
    if getattr(request, "include_cluster_authorized_operations", False):
        answer["cluster_authorized_operations"] = authorized_operations(
            broker, header, ResourceType.CLUSTER, CLUSTER_NAME
        )
    return answer


def _misuses_topic_ids(header: RequestContext, requested: Any) -> bool:
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


async def _lookup(
    broker: Broker, catalog: _Catalog, requested: Any, allow_create: bool, access: _Access
) -> dict[str, Any]:
    name = requested.name
    topic_id = _topic_id(requested)
    if topic_id is not None:  # v12+: the id wins, as in Kafka
        name = broker.topic_name(topic_id)
        if name is None:
            return _missing(ErrorCode.unknown_topic_id, None, topic_id)
        if not access.describe(name):  # ids are not secret, as in Kafka
            return _missing(ErrorCode.topic_authorization_failed, None, topic_id)
    if name is None:  # v12+: neither a name nor an id
        return _missing(ErrorCode.invalid_request, None, None)
    if not access.describe(name):
        return _missing(ErrorCode.topic_authorization_failed, name, None)
    described = catalog.describe(name)
    if described is not None:
        return described
    if not (allow_create and broker.config.auto_create_topics_enable) or is_internal(name):
        # Internal topics are created by their coordinators alone, with their own counts.
        return _missing(ErrorCode.unknown_topic_or_partition, name, None)
    if not access.create(name):
        return _missing(ErrorCode.topic_authorization_failed, name, None)
    return await catalog.auto_create(name)


class _Catalog(Protocol):
    """Where Metadata looks topics up: a single node's own topics, or a cluster broker's
    copy of ZooKeeper."""

    def names(self) -> list[str]: ...

    def describe(self, name: str) -> dict[str, Any] | None:
        """The topic's answer, None when there is no such topic."""

    async def auto_create(self, name: str) -> dict[str, Any]:
        """Create the topic with the broker's defaults; its answer."""


class _LocalCatalog:
    """A single node's topics: it leads every partition."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def names(self) -> list[str]:
        return [t.name for t in self._broker.topics.all()]

    def describe(self, name: str) -> dict[str, Any] | None:
        topic = self._broker.topics.get(name)
        return None if topic is None else _describe(self._broker, topic)

    async def auto_create(self, name: str) -> dict[str, Any]:
        broker = self._broker
        try:
            topic = await broker.topics.create(name, -1, {}, broker.now_ms())
        except KafkaError as exc:
            if exc.code == ErrorCode.topic_already_exists:
                # Another request is creating it right now: retriable, as Kafka answers.
                return _missing(ErrorCode.leader_not_available, name, None)
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


class _ClusterCatalog:
    """A cluster broker's metadata cache: the controller creates topics."""

    def __init__(self, cluster: ClusterNode) -> None:
        self._cluster = cluster

    def names(self) -> list[str]:
        return sorted(self._cluster.cache.topics)

    def describe(self, name: str) -> dict[str, Any] | None:
        if name not in self._cluster.cache.topics:
            return None
        return _describe_in_cluster(self._cluster, name)

    async def auto_create(self, name: str) -> dict[str, Any]:
        if not self._cluster.cache.brokers:
            # Still joining: this broker has not read the cluster's brokers and topics yet,
            # so it cannot tell whether the topic exists, and creating would fail for want
            # of live brokers (INVALID_REPLICATION_FACTOR, which an idempotent producer takes
            # as final). Kafka's broker creates against ZooKeeper itself and finds the topic;
            # the client is told to ask again.
            return _missing(ErrorCode.leader_not_available, name, None)
        try:
            with answered_per_resource(f"Metadata's auto-creation of {name!r}"):
                await self._cluster.topic_admin.create(name, -1, -1, {})
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
        offline = cache.offline_replicas.get((name, index), frozenset())
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
                # As Kafka's: on a dead broker, or offline there (its log failed)
                "offline_replicas": [r for r in replicas if r not in live or r in offline],
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
