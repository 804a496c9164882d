"""An admin request that meets a ZooKeeper outage, answered as Kafka answers it.

Kafka's ZooKeeper-mode admin paths (ZkAdminManager for topics, partitions and SCRAM
credentials, ConfigHelper and the config handlers for configurations, AclAuthorizer for
ACLs, KafkaApis for a topic Metadata creates) catch any failure of one resource and answer
that resource alone with ``ApiError.fromThrowable``: UNKNOWN_SERVER_ERROR with the
exception's message, while the request's other resources are served and the connection
stays open. Our handlers already answer a KafkaError per resource; this turns the cluster
layer's ZooKeeperError (ZooKeeper unreachable for a whole session timeout, or the session
expired) into one. Without it the error escaped the handler, and a response with no
top-level error field could only be answered by closing the connection.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from oncelog.cluster.zookeeper import ZooKeeperError
from oncelog.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)


@contextmanager
def answered_per_resource(what: str) -> Iterator[None]:
    """Raise a ZooKeeperError met inside as KafkaError UNKNOWN_SERVER_ERROR (logged as an
    error, as Kafka logs a failure that is not a client's); ``what`` names the resource's
    work in that log line."""
    try:
        yield
    except ZooKeeperError as exc:
        log.error("%s failed: %s", what, exc)
        raise KafkaError(ErrorCode.unknown_server_error, str(exc)) from exc
