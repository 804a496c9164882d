"""DescribeCluster (60) and the ACL APIs (DescribeAcls 29, CreateAcls 30, DeleteAcls 31).

oncelog has no authorizer yet, so the ACL APIs answer SECURITY_DISABLED, as a Kafka broker
without ``authorizer.class.name`` does: tools that list ACLs on start (MirrorMaker 2's ACL
sync, UIs) then carry on instead of failing on an unsupported API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oncelog.broker.handlers.metadata import NO_AUTHORIZED_OPERATIONS, cluster_view
from oncelog.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.protocol.codec import RequestHeader

ENDPOINT_BROKERS = 1
NO_AUTHORIZER = "No Authorizer is configured."
# With no authorizer every operation is allowed: the operations Kafka defines on the
# cluster resource (AclOperation ids CREATE 5, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9,
# DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12), as a bit field.
CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))


async def handle_describe_cluster(
    broker: Broker, header: RequestHeader, request: Any
) -> dict[str, Any]:
    """The live brokers and the controller (in a cluster: as this broker's metadata cache
    knows them, like Kafka's ZooKeeper-mode brokers answer)."""
    view = cluster_view(broker)
    answer: dict[str, Any] = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "endpoint_type": ENDPOINT_BROKERS,
        "cluster_id": view.cluster_id,
        "controller_id": view.controller_id,
        "brokers": [
            {"broker_id": node_id, "host": host, "port": port, "rack": None, "is_fenced": False}
            for node_id, host, port in view.brokers
        ],
        "cluster_authorized_operations": (
            CLUSTER_OPERATIONS
            if request.include_cluster_authorized_operations
            else NO_AUTHORIZED_OPERATIONS
        ),
    }
    endpoint = getattr(request, "endpoint_type", ENDPOINT_BROKERS)
    if endpoint != ENDPOINT_BROKERS:
        answer |= {
            "error_code": ErrorCode.unsupported_endpoint_type,
            "error_message": "The request was sent to an endpoint of type BROKER, but we wanted"
            f" an endpoint of type {'CONTROLLER' if endpoint == 2 else endpoint}",
            "brokers": [],
        }
    return answer


async def handle_describe_acls(
    broker: Broker, header: RequestHeader, request: Any
) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.security_disabled,
        "error_message": NO_AUTHORIZER,
        "resources": [],
    }


async def handle_create_acls(broker: Broker, header: RequestHeader, request: Any) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "results": [
            {"error_code": ErrorCode.security_disabled, "error_message": NO_AUTHORIZER}
            for _ in request.creations
        ],
    }


async def handle_delete_acls(broker: Broker, header: RequestHeader, request: Any) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "filter_results": [
            {
                "error_code": ErrorCode.security_disabled,
                "error_message": NO_AUTHORIZER,
                "matching_acls": [],
            }
            for _ in request.filters
        ],
    }
