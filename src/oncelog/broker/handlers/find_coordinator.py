"""FindCoordinator: on one node this broker coordinates every group and transactional id;
in a cluster the leader of the key's partition of the internal topic does.

On one node, a key whose partition is out after a storage failure (until a restart
recovers it) gets COORDINATOR_NOT_AVAILABLE, as Kafka answers a key whose partition has no
leader: naming this broker would send the client straight back to a partition that
answers NOT_COORDINATOR.

Finding a coordinator creates the internal topic it keeps its state in, as Kafka does.
A group key needs Describe on the group (GROUP_AUTHORIZATION_FAILED), a transactional id
Describe on it (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), as in Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oncelog.broker.authorization import authorize
from oncelog.broker.internal_topics import CONSUMER_OFFSETS, TRANSACTION_STATE
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.request_context import RequestContext

GROUP = 0
TRANSACTION = 1
BATCHED_FROM_VERSION = 4


async def handle(broker: Broker, header: RequestContext, request: Any) -> dict[str, Any]:
    key_type = getattr(request, "key_type", GROUP)
    if header.api_version >= BATCHED_FROM_VERSION:
        keys = list(request.coordinator_keys)
    else:
        keys = [request.key]
    answers = [
        await _find(broker, key_type, key, header.listener)
        if _may_describe(broker, header, key_type, key)
        else _refusal(key_type, key)
        for key in keys
    ]
    if header.api_version >= BATCHED_FROM_VERSION:
        return {"throttle_time": 0, "coordinators": answers}
    (answer,) = answers
    return {"throttle_time": 0, **{k: v for k, v in answer.items() if k != "key"}}


def _may_describe(broker: Broker, header: RequestContext, key_type: int, key: str) -> bool:
    resource = {GROUP: ResourceType.GROUP, TRANSACTION: ResourceType.TRANSACTIONAL_ID}.get(key_type)
    return resource is None or authorize(broker, header, AclOperation.DESCRIBE, resource, key)


def _refusal(key_type: int, key: str) -> dict[str, Any]:
    if key_type == TRANSACTION:
        return _failed(key, ErrorCode.transactional_id_authorization_failed, "")
    return _failed(key, ErrorCode.group_authorization_failed, "")


async def _find(broker: Broker, key_type: int, key: str, listener: str) -> dict[str, Any]:
    if key_type not in (GROUP, TRANSACTION):
        return _failed(key, ErrorCode.invalid_request, f"unknown coordinator key type {key_type}")
    if key_type == TRANSACTION and not key:
        return _failed(
            key, ErrorCode.invalid_request, "an empty transactional id has no coordinator"
        )
    if broker.cluster is not None:
        from oncelog.cluster.coordinators import find_coordinator, internal_topic_specs

        topic = TRANSACTION_STATE if key_type == TRANSACTION else CONSUMER_OFFSETS
        spec = internal_topic_specs(broker.config)[topic]
        try:
            leader = await find_coordinator(broker.cluster, spec, key)
        except KafkaError as exc:
            return _failed(key, exc.code, exc.message)
        return _found(key, leader.broker_id, *leader.address_for(listener))
    coordinator = broker.transactions if key_type == TRANSACTION else broker.groups
    await coordinator.ready()
    if coordinator.offline(key):
        return _failed(
            key,
            ErrorCode.coordinator_not_available,
            "The coordinator is not available.",  # Kafka's text for this error
        )
    return _found(key, broker.node_id, *broker.advertised_address_for(listener))


def _found(key: str, node_id: int, host: str, port: int) -> dict[str, Any]:
    return {
        "key": key,
        "node_id": node_id,
        "host": host,
        "port": port,
        "error_code": ErrorCode.none,
        "error_message": None,
    }


def _failed(key: str, code: ErrorCode, message: str) -> dict[str, Any]:
    return {
        "key": key,
        "node_id": -1,
        "host": "",
        "port": -1,
        "error_code": code,
        "error_message": message,
    }
