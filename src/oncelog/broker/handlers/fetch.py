"""Fetch: return stored batches, long-polling until min_bytes arrive or max_wait passes.

Consumers read up to the high watermark (the last stable offset under read_committed). In
a cluster only the leader serves, and a follower's fetch (its replica id set) reads up to
the log end and tells the leader how far the follower has got (replica_manager.py).

Byte limits follow KIP-74: partitions are filled in request order, each up to its
partition_max_bytes and the response up to max_bytes (capped by the broker's
fetch.max.bytes, as Kafka does), except that the first batch
found is returned whole even when it is larger, so a consumer can always make progress.

Authorization, as in Kafka: a consumer needs Read on each topic (else
TOPIC_AUTHORIZATION_FAILED for its partitions); a follower needs ClusterAction on the
cluster (else every partition is refused).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from oncelog.broker.authorization import authorize, authorize_cluster
from oncelog.broker.partition import Partition
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.record_batch import iter_stored_batches
from oncelog.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.request_context import RequestContext

READ_COMMITTED = 1
TOPIC_IDS_FROM_VERSION = 13
CONSUMER = -1


async def handle(broker: Broker, header: RequestContext, request: Any) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.max_wait.total_seconds()
    by_id = header.api_version >= TOPIC_IDS_FROM_VERSION
    if _replica_id(request) >= 0:
        follower_allowed = authorize_cluster(broker, header, AclOperation.CLUSTER_ACTION)
        may_read: Callable[[str], bool] = lambda _: follower_allowed  # noqa: E731
    else:
        may_read = functools.cache(
            lambda name: authorize(broker, header, AclOperation.READ, ResourceType.TOPIC, name)
        )
    while True:
        responses, total_bytes, partitions = _read_all(broker, request, by_id, may_read)
        remaining = deadline - loop.time()
        if total_bytes >= request.min_bytes or remaining <= 0 or not partitions:
            return {
                "throttle_time": 0,
                "error_code": ErrorCode.none,
                "session_id": 0,
                "responses": responses,
            }
        await _wait_for_append(partitions, remaining)


async def _wait_for_append(partitions: list[Partition], timeout_s: float) -> None:
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    for partition in partitions:
        partition.wait_for_append(waiter)
    try:
        async with asyncio.timeout(timeout_s):
            await waiter
    except TimeoutError:
        pass
    finally:
        for partition in partitions:
            partition.forget_waiter(waiter)


def _read_all(
    broker: Broker, request: Any, by_id: bool, may_read: Callable[[str], bool]
) -> tuple[list[dict[str, Any]], int, list[Partition]]:
    committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    # Kafka caps the response size a client asks for with the broker's fetch.max.bytes.
    budget = min(getattr(request, "max_bytes", 2**31 - 1), broker.config.fetch_max_bytes)
    follower = _replica_id(request) if broker.cluster is not None else CONSUMER
    total = 0
    served: list[Partition] = []
    responses = []
    for fetch_topic in request.topics:
        answers = []
        for wanted in fetch_topic.partitions:
            found = _lookup(broker, fetch_topic, wanted, by_id, follower, may_read)
            if not isinstance(found, Partition):
                answers.append(_error(wanted.partition, found))
                continue
            partition = found
            served.append(partition)
            limit = min(wanted.partition_max_bytes, max(budget - total, 0))
            answer = _read_partition(
                partition, wanted, limit, committed, first=total == 0, to_log_end=follower >= 0
            )
            total += len(answer["records"])
            answers.append(answer)
        entry: dict[str, Any] = {"partitions": answers}
        entry["topic_id" if by_id else "topic"] = (
            fetch_topic.topic_id if by_id else fetch_topic.topic
        )
        responses.append(entry)
    return responses, total, served


def _lookup(
    broker: Broker,
    fetch_topic: Any,
    wanted: Any,
    by_id: bool,
    follower: int,
    may_read: Callable[[str], bool],
) -> Partition | ErrorCode:
    """The partition to read, or the error code to answer with. Permission is checked
    before existence (a name refused reveals nothing); an unknown topic id has no name to
    check, as in Kafka."""
    name = broker.topic_name(fetch_topic.topic_id) if by_id else fetch_topic.topic
    if name is not None and not may_read(name):
        return ErrorCode.topic_authorization_failed
    missing = ErrorCode.unknown_topic_id if by_id else ErrorCode.unknown_topic_or_partition
    if broker.cluster is None:
        topic = None if name is None else broker.topics.get(name)
        if topic is None or not 0 <= wanted.partition < len(topic.partitions):
            return missing
        return topic.partitions[wanted.partition]
    if name is None or name not in broker.cluster.cache.topics:
        return missing
    epoch = getattr(wanted, "current_leader_epoch", -1)
    try:
        if follower >= 0:
            return broker.cluster.hosting().follower_fetch(
                name,
                wanted.partition,
                follower,
                wanted.fetch_offset,
                epoch,
                getattr(wanted, "log_start_offset", -1),
            )
        return broker.partition_for_clients(name, wanted.partition, epoch)
    except KafkaError as exc:
        if exc.code == ErrorCode.kafka_storage_error and follower < 0:
            # A consumer of a replica whose log failed: Kafka answers KAFKA_STORAGE_ERROR,
            # on which aiokafka's consumer fetches from this broker again for up to
            # metadata.max.age.ms (5 minutes) instead of finding the new leader. Every
            # client looks the leader up again on NOT_LEADER_OR_FOLLOWER, which is as true.
            return ErrorCode.not_leader_or_follower
        return exc.code


def _replica_id(request: Any) -> int:
    """The fetching follower's broker id (-1: a consumer); v15+ moved it into replica_state."""
    state = getattr(request, "replica_state", None)
    if state is not None:
        return int(state.replica_id)
    return int(getattr(request, "replica_id", CONSUMER))


def _read_partition(
    partition: Partition,
    wanted: Any,
    limit: int,
    committed: bool,
    first: bool,
    to_log_end: bool = False,
) -> dict[str, Any]:
    """Read from the fetch offset up to the high watermark (a consumer; the last stable
    offset under read_committed) or up to the log end (a follower replicating)."""
    if to_log_end:
        upper = None
    else:
        upper = partition.last_stable_offset if committed else partition.high_watermark
    try:
        records = partition.log.read(
            wanted.fetch_offset, limit, max_offset=upper, min_one_batch=first
        )
    except KafkaError as exc:
        return _error(wanted.partition, exc.code, partition)
    aborted = None
    if committed:
        end = _end_offset(records) if records else wanted.fetch_offset
        aborted = [
            {"producer_id": t.producer_id, "first_offset": t.first_offset}
            for t in partition.aborted_transactions(wanted.fetch_offset, end)
        ]
    return {
        "partition_index": wanted.partition,
        "error_code": ErrorCode.none,
        "high_watermark": partition.high_watermark,
        "last_stable_offset": partition.last_stable_offset,
        "log_start_offset": partition.log_start_offset,
        "aborted_transactions": aborted,
        "preferred_read_replica": -1,
        "records": records,
    }


def _end_offset(records: bytes) -> int:
    """The offset after the last whole batch of `records`."""
    end = 0
    for _, header in iter_stored_batches(records):
        end = header.next_offset
    return end


def _error(index: int, code: ErrorCode, partition: Partition | None = None) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": code,
        "high_watermark": partition.high_watermark if partition else -1,
        "last_stable_offset": partition.last_stable_offset if partition else -1,
        "log_start_offset": partition.log_start_offset if partition else -1,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": b"",
    }
