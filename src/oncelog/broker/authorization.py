"""What handlers ask before they act: Kafka's ``AuthHelper`` over the ACL authorizer.

Without ``authorizer.class.name`` every request is allowed (``broker.authorizer`` is
None), as in Kafka. With it, each check goes to the pure authorizer (security/acl.py) with
the request's principal and client address; a refusal of something the client asked for
by name is logged at INFO on ``oncelog.authorizer`` with Kafka's wording (Kafka's
``kafka.authorizer.logger``), while filtering (listing only what a principal may see) is
silent.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from oncelog.protocol.api_versions import ApiKey
from oncelog.security.acl import (
    CLUSTER_NAME,
    AclOperation,
    PatternType,
    ResourceType,
)

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.request_context import RequestContext

__all__ = [
    "NO_AUTHORIZED_OPERATIONS",
    "authorize",
    "authorize_by_resource_type",
    "authorize_cluster",
    "authorized_operations",
    "filter_authorized",
]

log = logging.getLogger("oncelog.authorizer")

# What an "authorized operations" field holds when the client did not ask (Kafka's
# Integer.MIN_VALUE).
NO_AUTHORIZED_OPERATIONS = -(2**31)

# Kafka's "authorized operations" bit fields (KIP-430): the operations each resource type
# supports, reported to clients that ask (Metadata, DescribeGroups, DescribeCluster).
_SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
    ResourceType.CLUSTER: (
        AclOperation.CREATE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
    ),
}


def authorize(
    broker: Broker,
    context: RequestContext,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
    *,
    log_denial: bool = True,
) -> bool:
    """May the request's principal do ``operation`` on this resource?"""
    authorizer = broker.authorizer
    if authorizer is None:
        return True
    allowed = authorizer.authorize(
        context.principal, context.client_address, operation, resource_type, name
    )
    if not allowed and log_denial:
        log.info(
            "Principal = %s is Denied Operation = %s from host = %s on resource = %s:%s:%s "
            "for request = %s",
            context.principal,
            operation.kafka_name,
            context.client_address,
            resource_type.kafka_name,
            PatternType.LITERAL.kafka_name,
            name,
            _api_name(context.api_key),
        )
    return allowed


def authorize_cluster(broker: Broker, context: RequestContext, operation: AclOperation) -> bool:
    return authorize(broker, context, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def filter_authorized(
    broker: Broker,
    context: RequestContext,
    operation: AclOperation,
    resource_type: ResourceType,
    names: Iterable[str],
) -> set[str]:
    """The names among ``names`` the principal may do ``operation`` on (no logging: this
    decides what to show, not what was refused)."""
    return {
        name
        for name in set(names)
        if authorize(broker, context, operation, resource_type, name, log_denial=False)
    }


def authorize_by_resource_type(
    broker: Broker,
    context: RequestContext,
    operation: AclOperation,
    resource_type: ResourceType,
) -> bool:
    """May the principal do ``operation`` on at least one resource of this type?"""
    authorizer = broker.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize_by_resource_type(
        context.principal, context.client_address, operation, resource_type
    )


def authorized_operations(
    broker: Broker, context: RequestContext, resource_type: ResourceType, name: str
) -> int:
    """Kafka's bit field of the operations the principal may do on the resource."""
    bits = 0
    for operation in _SUPPORTED_OPERATIONS[resource_type]:
        if authorize(broker, context, operation, resource_type, name, log_denial=False):
            bits |= 1 << operation
    return bits


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)
