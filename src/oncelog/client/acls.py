"""ACLs through the broker: CreateAcls, DescribeAcls and DeleteAcls, as Kafka's admin
client sends them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from oncelog.client.connection import KafkaConnection, ProtocolClientError
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

__all__ = ["AclRequestError", "create_acls", "delete_acls", "describe_acls"]


class AclRequestError(ProtocolClientError):
    """The broker refused (part of) an ACL request; the message says why."""


def _refusal(code: ErrorCode, message: str | None) -> str:
    return f"{code.name.upper()}{': ' + message if message else ''}"


def _filter_fields(acl_filter: AclBindingFilter) -> dict[str, Any]:
    return {
        "resource_type_filter": acl_filter.pattern.resource_type,
        "resource_name_filter": acl_filter.pattern.name,
        "pattern_type_filter": acl_filter.pattern.pattern_type,
        "principal_filter": acl_filter.entry.principal,
        "host_filter": acl_filter.entry.host,
        "operation": acl_filter.entry.operation,
        "permission_type": acl_filter.entry.permission,
    }


def create_acls(connection: KafkaConnection, bindings: Sequence[AclBinding]) -> None:
    creations = [
        {
            "resource_type": b.pattern.resource_type,
            "resource_name": b.pattern.name,
            "resource_pattern_type": b.pattern.pattern_type,
            "principal": b.entry.principal,
            "host": b.entry.host,
            "operation": b.entry.operation,
            "permission_type": b.entry.permission,
        }
        for b in bindings
    ]
    response = connection.request(ApiKey.CREATE_ACLS, {"creations": creations})
    failures = [
        _refusal(r.error_code, r.error_message)
        for r in response.results
        if r.error_code != ErrorCode.none
    ]
    if failures:
        raise AclRequestError("; ".join(failures))


def describe_acls(connection: KafkaConnection, acl_filter: AclBindingFilter) -> list[AclBinding]:
    response = connection.request(ApiKey.DESCRIBE_ACLS, _filter_fields(acl_filter))
    if response.error_code != ErrorCode.none:
        raise AclRequestError(_refusal(response.error_code, response.error_message))
    return [
        AclBinding(
            ResourcePattern(
                ResourceType.from_code(resource.resource_type),
                resource.resource_name,
                PatternType.from_code(resource.pattern_type),
            ),
            AccessControlEntry(
                acl.principal,
                acl.host,
                AclOperation.from_code(acl.operation),
                AclPermissionType.from_code(acl.permission_type),
            ),
        )
        for resource in response.resources
        for acl in resource.acls
    ]


def delete_acls(
    connection: KafkaConnection, filters: Sequence[AclBindingFilter]
) -> list[AclBinding]:
    """Delete every ACL the filters match; the ACLs deleted."""
    response = connection.request(
        ApiKey.DELETE_ACLS, {"filters": [_filter_fields(f) for f in filters]}
    )
    deleted = []
    for result in response.filter_results:
        if result.error_code != ErrorCode.none:
            raise AclRequestError(_refusal(result.error_code, result.error_message))
        deleted += [
            AclBinding(
                ResourcePattern(
                    ResourceType.from_code(m.resource_type),
                    m.resource_name,
                    PatternType.from_code(m.pattern_type),
                ),
                AccessControlEntry(
                    m.principal,
                    m.host,
                    AclOperation.from_code(m.operation),
                    AclPermissionType.from_code(m.permission_type),
                ),
            )
            for m in result.matching_acls
        ]
    return deleted
