"""The ACL APIs: DescribeAcls (29), CreateAcls (30), DeleteAcls (31).

Without ``authorizer.class.name`` they answer SECURITY_DISABLED, as a Kafka broker without
an authorizer does: tools that list ACLs on start (MirrorMaker 2's ACL sync, UIs) then
carry on instead of failing on an unsupported API. With it they read and change the ACL
store (``acls.json`` in the data directory) as Kafka's ``AclApis`` does: describing needs
Describe on the Cluster, creating and deleting need Alter on it; each new ACL is checked
(security/acl.py ``validate_binding``) and fails alone with INVALID_REQUEST; a deletion
filter removes every ACL it matches and reports them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oncelog.broker.authorization import authorize_cluster
from oncelog.broker.handlers.zookeeper_outage import answered_per_resource
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclTable,
    InvalidAcl,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    validate_binding,
)

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.request_context import RequestContext

NO_AUTHORIZER = "No Authorizer is configured."


def _filter(item: Any) -> AclBindingFilter:
    return AclBindingFilter(
        ResourcePatternFilter(
            ResourceType.from_code(item.resource_type_filter),
            item.resource_name_filter,
            PatternType.from_code(item.pattern_type_filter),
        ),
        AccessControlEntryFilter(
            item.principal_filter,
            item.host_filter,
            AclOperation.from_code(item.operation),
            AclPermissionType.from_code(item.permission_type),
        ),
    )


def _binding(creation: Any) -> AclBinding:
    return AclBinding.from_codes(
        creation.resource_type,
        creation.resource_name,
        creation.resource_pattern_type,
        creation.principal,
        creation.host,
        creation.operation,
        creation.permission_type,
    )


def _described(binding: AclBinding) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "resource_type": binding.pattern.resource_type,
        "resource_name": binding.pattern.name,
        "pattern_type": binding.pattern.pattern_type,
        "principal": binding.entry.principal,
        "host": binding.entry.host,
        "operation": binding.entry.operation,
        "permission_type": binding.entry.permission,
    }


async def handle_describe_acls(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    answer: dict[str, Any] = {"throttle_time": 0, "error_message": None, "resources": []}
    if broker.authorizer is None:
        return answer | {"error_code": ErrorCode.security_disabled, "error_message": NO_AUTHORIZER}
    if not authorize_cluster(broker, header, AclOperation.DESCRIBE):
        return answer | {"error_code": ErrorCode.cluster_authorization_failed}
    acl_filter = _filter(request)
    problem = acl_filter.unknown_element()
    if problem is not None:
        return answer | {"error_code": ErrorCode.invalid_request, "error_message": problem}
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for binding in broker.acls.table.matching(acl_filter):
        by_pattern.setdefault(binding.pattern, []).append(binding.entry)
    answer["resources"] = [
        {
            "resource_type": pattern.resource_type,
            "resource_name": pattern.name,
            "pattern_type": pattern.pattern_type,
            "acls": [
                {
                    "principal": e.principal,
                    "host": e.host,
                    "operation": e.operation,
                    "permission_type": e.permission,
                }
                for e in entries
            ],
        }
        for pattern, entries in by_pattern.items()
    ]
    return answer | {"error_code": ErrorCode.none}


async def handle_create_acls(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    def result(code: ErrorCode, message: str | None = None) -> dict[str, Any]:
        return {"error_code": code, "error_message": message}

    if broker.authorizer is None:
        refused = result(ErrorCode.security_disabled, NO_AUTHORIZER)
        return {"throttle_time": 0, "results": [refused for _ in request.creations]}
    if not authorize_cluster(broker, header, AclOperation.ALTER):
        refused = result(ErrorCode.cluster_authorization_failed)
        return {"throttle_time": 0, "results": [refused for _ in request.creations]}
    results: list[dict[str, Any]] = []
    valid: list[AclBinding] = []
    for creation in request.creations:
        binding = _binding(creation)
        try:
            validate_binding(binding)
        except InvalidAcl as exc:
            results.append(result(ErrorCode.invalid_request, str(exc)))
            continue
        valid.append(binding)
        results.append(result(ErrorCode.none))

    def add(table: AclTable) -> tuple[AclTable, None]:
        return table.with_added(valid), None

    if valid:
        try:
            with answered_per_resource("CreateAcls"):
                await broker.acls.update(add)
        except KafkaError as exc:  # every valid creation failed with it
            failure = result(exc.code, exc.message)
            results = [failure if r["error_code"] == ErrorCode.none else r for r in results]
    return {"throttle_time": 0, "results": results}


async def handle_delete_acls(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    def failed(code: ErrorCode, message: str | None = None) -> dict[str, Any]:
        return {"error_code": code, "error_message": message, "matching_acls": []}

    if broker.authorizer is None:
        refused = failed(ErrorCode.security_disabled, NO_AUTHORIZER)
        return {"throttle_time": 0, "filter_results": [refused for _ in request.filters]}
    if not authorize_cluster(broker, header, AclOperation.ALTER):
        refused = failed(ErrorCode.cluster_authorization_failed)
        return {"throttle_time": 0, "filter_results": [refused for _ in request.filters]}
    filters = [_filter(item) for item in request.filters]

    def delete(table: AclTable) -> tuple[AclTable, list[list[AclBinding]]]:
        """Each binding goes to the first filter that matches it, as in Kafka."""
        matched: list[list[AclBinding]] = [[] for _ in filters]
        taken: set[AclBinding] = set()
        for index, acl_filter in enumerate(filters):
            if acl_filter.unknown_element() is None:
                for binding in table.matching(acl_filter):
                    if binding not in taken:
                        taken.add(binding)
                        matched[index].append(binding)
        return (table.without(taken) if taken else table), matched

    try:
        with answered_per_resource("DeleteAcls"):
            matched = await broker.acls.update(delete)
    except KafkaError as exc:
        refused = failed(exc.code, exc.message)
        return {"throttle_time": 0, "filter_results": [refused for _ in filters]}
    results = []
    for acl_filter, bindings in zip(filters, matched, strict=True):
        problem = acl_filter.unknown_element()
        if problem is not None:
            results.append(failed(ErrorCode.invalid_request, problem))
        else:
            results.append(
                {
                    "error_code": ErrorCode.none,
                    "error_message": None,
                    "matching_acls": [_described(b) for b in bindings],
                }
            )
    return {"throttle_time": 0, "filter_results": results}
