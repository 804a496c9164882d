"""DescribeCluster (60). (The ACL APIs are in acls.py.)"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oncelog.broker.authorization import (
    NO_AUTHORIZED_OPERATIONS,
    authorize_cluster,
    authorized_operations,
)
from oncelog.broker.handlers.metadata import cluster_view
from oncelog.protocol.errors import ErrorCode
from oncelog.security.acl import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.request_context import RequestContext

ENDPOINT_BROKERS = 1


def _cluster_operations(broker: Broker, header: RequestContext, request: Any) -> int:
    """KIP-430's bit field of what the principal may do on the cluster, when asked: every
    operation without an authorizer, none without Describe, as in Kafka."""
    if not request.include_cluster_authorized_operations:
        return NO_AUTHORIZED_OPERATIONS
    if not authorize_cluster(broker, header, AclOperation.DESCRIBE):
        return 0
    return authorized_operations(broker, header, ResourceType.CLUSTER, CLUSTER_NAME)


async def handle_describe_cluster(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    """The live brokers and the controller (in a cluster: as this broker's metadata cache
    knows them, like Kafka's ZooKeeper-mode brokers answer, once it holds the whole cluster:
    see Metadata's handler)."""
    if broker.cluster is not None:
        await broker.cluster.caught_up()
    view = cluster_view(broker, header.listener)
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
        "cluster_authorized_operations": _cluster_operations(broker, header, request),
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
