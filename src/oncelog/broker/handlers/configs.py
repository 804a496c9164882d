"""AlterConfigs (33) and IncrementalAlterConfigs (44) for topics and this broker.

A topic's overrides are persisted in the topic catalogue and applied to its running
partitions at once. Broker keys that Kafka can change at run time (``DYNAMIC_BROKER_KEYS``)
are kept per broker (resource name = this node's id) or as the cluster-wide default
(resource name ""), persisted in ``dynamic-broker-configs.json`` and applied at once:
topics without an override of their own follow a changed default. In a cluster both live
in ZooKeeper (``/config/topics/<t>``, ``/config/brokers/<id>|<default>``) and every broker
applies them through a config change notification (``cluster/configs.py``); the change is
planned on the value ZooKeeper holds, so two brokers' concurrent changes never lose one.

Errors are Kafka 4.x's: a resource named twice, duplicate keys, null values, unknown
operations, a broker id that is not this node, a key that cannot change at run time:
INVALID_REQUEST; an unknown topic: UNKNOWN_TOPIC_OR_PARTITION; a bad topic key or value:
INVALID_CONFIG. AlterConfigs replaces all of a resource's settings; the incremental API
changes only the keys it names. Changing a topic needs AlterConfigs on it
(TOPIC_AUTHORIZATION_FAILED), changing a broker AlterConfigs on the cluster
(CLUSTER_AUTHORIZATION_FAILED), as in Kafka.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from oncelog.broker import config as cfg
from oncelog.broker.authorization import authorize
from oncelog.broker.config_changes import (
    ConfigChange,
    apply_ops,
    check_broker_name,
    duplicate_resources,
    preflight,
)
from oncelog.broker.dynamic_config import Plan
from oncelog.broker.handlers.zookeeper_outage import answered_per_resource
from oncelog.protocol.configs import ConfigResourceType
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.security.acl import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.request_context import RequestContext

log = logging.getLogger(__name__)


async def handle_incremental_alter_configs(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    resources = [
        (
            r.resource_type,
            r.resource_name,
            [ConfigChange(c.name, c.value, c.config_operation) for c in r.configs],
        )
        for r in request.resources
    ]
    return await _alter(broker, header, resources, request.validate_only, incremental=True)


async def handle_alter_configs(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    resources = [
        (r.resource_type, r.resource_name, [ConfigChange(c.name, c.value) for c in r.configs])
        for r in request.resources
    ]
    return await _alter(broker, header, resources, request.validate_only, incremental=False)


async def _alter(
    broker: Broker,
    header: RequestContext,
    resources: list[tuple[int, str, list[ConfigChange]]],
    validate_only: bool,
    *,
    incremental: bool,
) -> dict[str, Any]:
    twice = duplicate_resources([(kind, name) for kind, name, _ in resources])
    answers = []
    for kind, name, changes in resources:
        try:
            if (kind, name) in twice:
                raise KafkaError(
                    ErrorCode.invalid_request, "Each resource must appear at most once."
                )
            _check_permission(broker, header, kind, name)
            preflight(changes)
            with answered_per_resource(f"AlterConfigs of resource {kind} {name!r}"):
                if kind == ConfigResourceType.TOPIC:
                    await _alter_topic(broker, name, changes, validate_only, incremental)
                elif kind == ConfigResourceType.BROKER:
                    await _alter_broker(broker, name, changes, validate_only, incremental)
                else:
                    raise KafkaError(ErrorCode.invalid_request, f"Unknown resource type {kind}")
        except KafkaError as exc:
            log.info("alter configs of resource %d %r refused: %s", kind, name, exc.message)
            answers.append(_answer(kind, name, exc.code, exc.message))
            continue
        answers.append(_answer(kind, name, ErrorCode.none, None))
    return {"throttle_time": 0, "responses": answers}


def _check_permission(broker: Broker, header: RequestContext, kind: int, name: str) -> None:
    if kind == ConfigResourceType.TOPIC and not authorize(
        broker, header, AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, name
    ):
        raise KafkaError(ErrorCode.topic_authorization_failed, "Topic authorization failed.")
    if kind == ConfigResourceType.BROKER and not authorize(
        broker, header, AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME
    ):
        raise KafkaError(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")


def _answer(kind: int, name: str, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {
        "error_code": code,
        "error_message": message,
        "resource_type": kind,
        "resource_name": name,
    }


async def _alter_topic(
    broker: Broker,
    name: str,
    changes: Sequence[ConfigChange],
    validate_only: bool,
    incremental: bool,
) -> None:
    if name == "":
        raise KafkaError(ErrorCode.invalid_request, "Default topic resources are not allowed.")
    plan = _topic_plan(broker.config, changes, incremental)
    if broker.cluster is not None:  # /config/topics/<t>, applied by every broker
        await broker.cluster.configs.alter_topic(name, plan, validate_only=validate_only)
        return
    topic = broker.topics.get(name)
    if topic is None:
        raise KafkaError(
            ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist."
        )
    overrides = plan(topic.configs)
    if not validate_only:
        await broker.topics.alter_configs(name, overrides)
        log.info("topic %s configuration now %s", name, overrides or "the broker defaults")
        broker.configs_changed(frozenset({name}))


def _topic_plan(
    config: cfg.BrokerConfig, changes: Sequence[ConfigChange], incremental: bool
) -> Plan:
    """A topic's new overrides from its current ones (KafkaError INVALID_CONFIG)."""

    def plan(current: dict[str, str]) -> dict[str, str]:
        try:
            effective = cfg.TopicConfig(config, current).get if incremental else None
            wanted = _wanted(current, changes, cfg.topic_def, effective)
            return cfg.TopicConfig.validate(wanted)
        except cfg.ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from exc

    return plan


async def _alter_broker(
    broker: Broker,
    name: str,
    changes: Sequence[ConfigChange],
    validate_only: bool,
    incremental: bool,
) -> None:
    per_broker = check_broker_name(name, broker.node_id)
    plan = _broker_plan(broker.config, changes, incremental)
    await broker.dynamic_configs.update(plan, per_broker=per_broker, validate_only=validate_only)


def _broker_plan(
    config: cfg.BrokerConfig, changes: Sequence[ConfigChange], incremental: bool
) -> Plan:
    """A dynamic broker layer's new keys from its current ones (KafkaError
    INVALID_REQUEST, as Kafka answers a bad broker key)."""

    def plan(current: dict[str, str]) -> dict[str, str]:
        wanted = _wanted(current, changes, cfg.broker_def, config.get if incremental else None)
        try:
            return cfg.validate_dynamic(wanted)
        except cfg.ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_request, str(exc)) from exc

    return plan


def _wanted(
    current: dict[str, str],
    changes: Sequence[ConfigChange],
    definition: Callable[[str], cfg.ConfigDef | None],
    effective: Callable[[str], Any] | None,
) -> dict[str, str]:
    """The keys a request asks for, before validation: AlterConfigs (``effective`` None)
    replaces them all; IncrementalAlterConfigs applies its operations to ``current``,
    APPEND and SUBTRACT starting from the ``effective`` value of a key not set there."""
    if effective is None:
        return {c.name: c.value for c in changes if c.value is not None}

    def is_list(key: str) -> bool | None:
        d = definition(key)
        return None if d is None else d.type is cfg.ConfigType.LIST

    def effective_text(key: str) -> str | None:
        d = definition(key)
        return None if d is None else cfg.format_value(d, effective(key))

    return apply_ops(current, changes, is_list=is_list, effective=effective_text)
