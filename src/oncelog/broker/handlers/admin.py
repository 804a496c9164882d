"""Topic administration: CreateTopics, DeleteTopics, DescribeConfigs.

In cluster mode CreateTopics and DeleteTopics go through the cluster's TopicAdmin (the
controller's job, as in Kafka's ZooKeeper mode) and topic configurations come from ZooKeeper;
a ZooKeeper outage fails the topics it touches alone (zookeeper_outage.py).

Authorization, as in Kafka: creating needs Create on the cluster or on the topic (the
topic's configurations are returned only with DescribeConfigs on it); deleting needs
Delete on the topic (and Describe, when the topic is named by id); describing
configurations needs DescribeConfigs on the topic, or on the cluster for a broker. Each
refusal is TOPIC_AUTHORIZATION_FAILED or CLUSTER_AUTHORIZATION_FAILED for that resource
alone, decided before its existence is looked at.

A CreateTopics asking for more than MAX_PARTITIONS_PER_REQUEST partitions in all is
refused whole, every topic with POLICY_VIOLATION, before anything is created (Kafka's
controller does the same). Topics are created one after another, their files made off
the event loop (see topics.py).
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from oncelog.broker import config as cfg
from oncelog.broker.authorization import authorize, authorize_cluster
from oncelog.broker.handlers.zookeeper_outage import answered_per_resource
from oncelog.broker.topics import check_partitions_per_request
from oncelog.protocol.configs import ConfigResourceType
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.security.acl import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.request_context import RequestContext
    from oncelog.cluster.node import ClusterNode

log = logging.getLogger(__name__)


async def handle_create_topics(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    validate_only = getattr(request, "validate_only", False)
    try:
        check_partitions_per_request(sum(_requested(broker, t) for t in request.topics))
    except KafkaError as exc:
        return {"throttle_time": 0, "topics": [_create_failed(t.name, exc) for t in request.topics]}
    create_any = authorize(
        broker, header, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, log_denial=False
    )
    created = []
    for wanted in request.topics:
        if not (
            create_any
            or authorize(broker, header, AclOperation.CREATE, ResourceType.TOPIC, wanted.name)
        ):
            refusal = KafkaError(ErrorCode.topic_authorization_failed, "Authorization failed.")
            created.append(_create_failed(wanted.name, refusal))
        elif broker.cluster is not None:
            timeout_s = request.timeout.total_seconds()
            created.append(
                await _create_in_cluster(broker, broker.cluster, wanted, validate_only, timeout_s)
            )
        else:
            created.append(await _create(broker, wanted, validate_only))
    for answer in created:
        if answer["error_code"] == ErrorCode.none and not authorize(
            broker,
            header,
            AclOperation.DESCRIBE_CONFIGS,
            ResourceType.TOPIC,
            answer["name"],
            log_denial=False,
        ):
            answer |= {
                "configs": [],
                "topic_config_error_code": ErrorCode.topic_authorization_failed,
            }
    return {"throttle_time": 0, "topics": created}


async def _create_in_cluster(
    broker: Broker, cluster: ClusterNode, wanted: Any, validate_only: bool, timeout_s: float
) -> dict[str, Any]:
    admin = cluster.topic_admin
    try:
        admin.require_controller()
        with answered_per_resource(f"CreateTopics of {wanted.name!r}"):
            assignment, overrides = await admin.create(
                wanted.name,
                wanted.num_partitions,
                wanted.replication_factor,
                {c.name: c.value for c in wanted.configs},
                assignments={a.partition_index: list(a.broker_ids) for a in wanted.assignments},
                validate_only=validate_only,
            )
    except KafkaError as exc:
        return _create_failed(wanted.name, exc)
    if not validate_only and not await admin.wait_for_leaders(wanted.name, timeout_s):
        return _create_failed(
            wanted.name,
            KafkaError(
                ErrorCode.request_timed_out,
                f"topic {wanted.name!r} was created but its partitions had no leaders within "
                f"the request timeout of {timeout_s:g} s",
            ),
        )
    return _created(
        broker,
        wanted.name,
        assignment.topic_id,
        overrides,
        len(assignment.replicas),
        len(assignment.replicas[0]),
    )


def _requested(broker: Broker, wanted: Any) -> int:
    """Partitions a topic of the request would have, counted as Kafka counts them."""
    if wanted.assignments:
        return len(wanted.assignments)
    if wanted.num_partitions == -1:
        return broker.config.num_partitions
    return max(wanted.num_partitions, 0)


async def _create(broker: Broker, wanted: Any, validate_only: bool) -> dict[str, Any]:
    try:
        num_partitions = _partition_count(broker, wanted)
        configs = {c.name: c.value for c in wanted.configs}
        topic = await broker.topics.create(
            wanted.name, num_partitions, configs, broker.now_ms(), validate_only=validate_only
        )
    except KafkaError as exc:
        return _create_failed(wanted.name, exc)
    count = num_partitions if num_partitions != -1 else broker.config.num_partitions
    return _created(broker, topic.name, topic.topic_id, topic.configs, count, 1)


def _create_failed(name: str, exc: KafkaError) -> dict[str, Any]:
    return {
        "name": name,
        "topic_id": None,
        "error_code": exc.code,
        "error_message": exc.message,
        "configs": None,
    }


def _created(
    broker: Broker,
    name: str,
    topic_id: uuid.UUID,
    overrides: dict[str, str],
    num_partitions: int,
    replication_factor: int,
) -> dict[str, Any]:
    entries = cfg.TopicConfig(broker.config, overrides).entries()
    return {
        "name": name,
        "topic_id": topic_id,
        "error_code": ErrorCode.none,
        "error_message": None,
        "num_partitions": num_partitions,
        "replication_factor": replication_factor,
        "configs": [
            {
                "name": e.name,
                "value": e.value,
                "read_only": e.read_only,
                "config_source": e.source,
                "is_sensitive": e.sensitive,
            }
            for e in entries
        ],
    }


def _partition_count(broker: Broker, wanted: Any) -> int:
    """Partitions asked for, checking what a single node can honour."""
    if wanted.replication_factor not in (-1, 1):
        raise KafkaError(
            ErrorCode.invalid_replication_factor,
            f"replication factor {wanted.replication_factor} is larger than the 1 broker available",
        )
    if not wanted.assignments:
        return wanted.num_partitions
    if wanted.num_partitions != -1 or wanted.replication_factor != -1:
        raise KafkaError(
            ErrorCode.invalid_request,
            "both a replica assignment and a partition count or replication factor were given",
        )
    for assignment in wanted.assignments:
        if list(assignment.broker_ids) != [broker.node_id]:
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                f"partition {assignment.partition_index} assigned to {list(assignment.broker_ids)};"
                f" the only broker is {broker.node_id}",
            )
    return len(wanted.assignments)


async def handle_delete_topics(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    wanted = getattr(request, "topics", None)
    if wanted is None:  # versions 0-5 list names only
        wanted = [_ByName(name) for name in request.topic_names]
    return {"throttle_time": 0, "responses": [await _delete(broker, header, t) for t in wanted]}


class _ByName:
    def __init__(self, name: str) -> None:
        self.name = name
        self.topic_id = None


async def _delete(broker: Broker, header: RequestContext, wanted: Any) -> dict[str, Any]:
    name, topic_id = wanted.name, wanted.topic_id
    if name is None and topic_id is not None:
        name = broker.topic_name(topic_id)
        if name is None:
            return {
                "name": None,
                "topic_id": topic_id,
                "error_code": ErrorCode.unknown_topic_id,
                "error_message": f"no topic with id {topic_id}",
            }
        if not authorize(broker, header, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            return {  # the name stays hidden
                "name": None,
                "topic_id": topic_id,
                "error_code": ErrorCode.topic_authorization_failed,
                "error_message": None,
            }
    try:
        if not authorize(broker, header, AclOperation.DELETE, ResourceType.TOPIC, name):
            raise KafkaError(ErrorCode.topic_authorization_failed, "Topic authorization failed.")
        if not broker.config.delete_topic_enable:
            raise KafkaError(ErrorCode.topic_deletion_disabled, "delete.topic.enable is false")
        topic_id = await _delete_topic(broker, name)
    except KafkaError as exc:
        return {
            "name": name,
            "topic_id": topic_id,
            "error_code": exc.code,
            "error_message": exc.message,
        }
    return {
        "name": name,
        "topic_id": topic_id,
        "error_code": ErrorCode.none,
        "error_message": None,
    }


async def _delete_topic(broker: Broker, name: str) -> uuid.UUID:
    """Delete a topic: from the catalogue of a single node, or (the controller only) from
    ZooKeeper in a cluster; its id."""
    if broker.cluster is None:
        return (await broker.topics.delete(name)).topic_id
    broker.cluster.topic_admin.require_controller()
    with answered_per_resource(f"DeleteTopics of {name!r}"):
        return await broker.cluster.topic_admin.delete(name)


async def handle_describe_configs(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    synonyms = getattr(request, "include_synonyms", False)
    documentation = getattr(request, "include_documentation", False)
    return {
        "throttle_time": 0,
        "results": [
            await _describe(broker, header, r, synonyms, documentation) for r in request.resources
        ],
    }


def _describe_configs_refusal(
    broker: Broker, header: RequestContext, resource: Any
) -> ErrorCode | None:
    if resource.resource_type == ConfigResourceType.TOPIC and not authorize(
        broker, header, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, resource.resource_name
    ):
        return ErrorCode.topic_authorization_failed
    if resource.resource_type == ConfigResourceType.BROKER and not authorize_cluster(
        broker, header, AclOperation.DESCRIBE_CONFIGS
    ):
        return ErrorCode.cluster_authorization_failed
    return None


async def _topic_overrides(broker: Broker, name: str) -> dict[str, str] | None:
    """A topic's configuration overrides (read from ZooKeeper in cluster mode), None if
    unknown."""
    if broker.cluster is not None:
        return await broker.cluster.configs.topic_overrides(name)
    topic = broker.topics.get(name)
    return None if topic is None else topic.configs


async def _describe(
    broker: Broker, header: RequestContext, resource: Any, synonyms: bool, documentation: bool
) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "resource_type": resource.resource_type,
        "resource_name": resource.resource_name,
        "configs": [],
    }
    refusal = _describe_configs_refusal(broker, header, resource)
    if refusal is not None:
        return {**answer, "error_code": refusal, "error_message": None}
    if resource.resource_type == ConfigResourceType.TOPIC:
        try:
            with answered_per_resource(f"DescribeConfigs of topic {resource.resource_name!r}"):
                overrides = await _topic_overrides(broker, resource.resource_name)
        except KafkaError as exc:
            return {**answer, "error_code": exc.code, "error_message": exc.message}
        if overrides is None:
            return {
                **answer,
                "error_code": ErrorCode.unknown_topic_or_partition,
                "error_message": f"topic {resource.resource_name!r} does not exist",
            }
        entries = cfg.TopicConfig(broker.config, overrides).entries()
    elif resource.resource_type == ConfigResourceType.BROKER:
        if resource.resource_name not in ("", str(broker.node_id)):
            return {
                **answer,
                "error_code": ErrorCode.invalid_request,
                "error_message": f"this is broker {broker.node_id}, not {resource.resource_name}",
            }
        entries = cfg.describe_broker(broker.config, cluster_default=resource.resource_name == "")
    else:
        return {
            **answer,
            "error_code": ErrorCode.invalid_request,
            "error_message": f"resource type {resource.resource_type} is not supported",
        }
    keys = resource.configuration_keys
    if keys is not None:
        entries = [e for e in entries if e.name in keys]
    answer["configs"] = [
        {
            "name": e.name,
            "value": None if e.sensitive else e.value,
            "read_only": e.read_only,
            "config_source": e.source,
            "is_default": e.source == cfg.ConfigSource.DEFAULT_CONFIG,
            "is_sensitive": e.sensitive,
            "synonyms": [{"name": s.name, "value": s.value, "source": s.source} for s in e.synonyms]
            if synonyms
            else [],
            "config_type": e.type,
            "documentation": e.doc if documentation else None,
        }
        for e in entries
    ]
    return {**answer, "error_code": ErrorCode.none, "error_message": None}
