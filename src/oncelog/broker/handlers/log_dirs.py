"""DescribeLogDirs: the one data directory and each partition's size on disk.

Sizes are not in any other Kafka API, so admin tools (``oncelog topics describe``,
Kafka's ``kafka-log-dirs.sh``) read them from here. Following Kafka's
``ReplicaManager.describeLogDirs``: a null topic list means every partition, and
requested partitions this broker does not host are left out rather than reported as
errors. A single node has no replica lag and no future logs; a cluster broker reports the
replicas it hosts, each with its log end's lag behind the high watermark.

It needs Describe on the cluster; without it the answer is empty (with
CLUSTER_AUTHORIZATION_FAILED from v3 on), as in Kafka.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any

from oncelog.broker.authorization import authorize_cluster
from oncelog.protocol.errors import ErrorCode
from oncelog.security.acl import AclOperation

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.partition import Partition
    from oncelog.broker.request_context import RequestContext


async def handle(broker: Broker, header: RequestContext, request: Any) -> dict[str, Any]:
    if not authorize_cluster(broker, header, AclOperation.DESCRIBE):
        refused = ErrorCode.cluster_authorization_failed
        return {"throttle_time": 0, "error_code": refused, "results": []}
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for partition in _wanted(broker, request.topics):
        by_topic.setdefault(partition.topic, []).append(
            {
                "partition_index": partition.index,
                "partition_size": partition.log.size_bytes(),
                # Kafka's offset lag of a current log: its end past the high watermark (0 on
                # a single node, where everything appended is committed).
                "offset_lag": partition.log.log_end_offset - partition.high_watermark,
                "is_future_key": False,
            }
        )
    log_dir = str(broker.data_dir.resolve())
    usage = shutil.disk_usage(log_dir)
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "results": [
            {
                "error_code": ErrorCode.none,
                "log_dir": log_dir,
                "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
                "total_bytes": usage.total,
                "usable_bytes": usage.free,
            }
        ],
    }


def _wanted(broker: Broker, topics: Any) -> list[Partition]:
    """The partitions this broker hosts: all of them, or those asked for."""
    hosted = broker.hosted.partitions()
    if topics is None:
        return hosted
    wanted = {(t.topic, p) for t in topics for p in t.partitions}
    return [p for p in hosted if (p.topic, p.index) in wanted]
