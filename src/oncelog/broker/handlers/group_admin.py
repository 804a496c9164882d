"""DeleteGroups (42) and OffsetDelete (47): what ``kafka-consumer-groups --delete`` and
``--delete-offsets`` send. Both write tombstones to ``__consumer_offsets``, which the log
cleaner then compacts away, so deleted groups cost nothing at the next start.

Both need Delete on the group (GROUP_AUTHORIZATION_FAILED); OffsetDelete also needs Read on
each topic (TOPIC_AUTHORIZATION_FAILED for its partitions), as in Kafka."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from oncelog.broker.authorization import authorize
from oncelog.broker.coordinator_runtime import CoordinatorError
from oncelog.protocol.errors import ErrorCode
from oncelog.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.request_context import RequestContext
    from oncelog.groups import GroupCoordinatorShard, Result


async def handle_delete_groups(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    results = []
    for group_id in request.groups_names:
        try:
            if not authorize(broker, header, AclOperation.DELETE, ResourceType.GROUP, group_id):
                code = ErrorCode.group_authorization_failed
            elif not group_id:
                code = ErrorCode.invalid_group_id
            else:
                code = await broker.groups.run(group_id, _deleting(group_id))
        except CoordinatorError as failed:
            code = failed.code
        results.append({"group_id": group_id, "error_code": code})
    return {"throttle_time": 0, "results": results}


async def handle_offset_delete(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    if not authorize(broker, header, AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return {
            "error_code": ErrorCode.group_authorization_failed,
            "throttle_time": 0,
            "topics": [],
        }
    readable = {
        t.name: authorize(broker, header, AclOperation.READ, ResourceType.TOPIC, t.name)
        for t in request.topics
    }
    refused = [
        {
            "name": t.name,
            "partitions": [
                {
                    "partition_index": p.partition_index,
                    "error_code": ErrorCode.topic_authorization_failed,
                }
                for p in t.partitions
            ],
        }
        for t in request.topics
        if not readable[t.name]
    ]
    wanted = {
        t.name: [p.partition_index for p in t.partitions]
        for t in request.topics
        if readable[t.name]
    }
    try:
        answer = await broker.groups.run(
            request.group_id, lambda shard, now: shard.delete_offsets(request.group_id, wanted)
        )
    except CoordinatorError as failed:
        return {"error_code": failed.code, "throttle_time": 0, "topics": []}
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for p in answer.partitions:
        by_topic.setdefault(p.topic, []).append(
            {"partition_index": p.partition, "error_code": p.error_code}
        )
    return {
        "error_code": answer.error_code,
        "throttle_time": 0,
        "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()]
        + refused,
    }


def _deleting(group_id: str) -> Callable[[GroupCoordinatorShard, int], Result[ErrorCode]]:
    return lambda shard, _now: shard.delete_group(group_id)
