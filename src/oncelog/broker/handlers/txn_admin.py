"""Transaction administration (KIP-664): ListTransactions, DescribeTransactions and
WriteTxnMarkers.

ListTransactions and DescribeTransactions read the transaction coordinator's shards.
WriteTxnMarkers is the cluster-internal API a transaction coordinator sends to partition
leaders; Kafka's admin `abortTransaction` sends it too, to end a hanging transaction on one
partition. A broker writes markers only to partitions it leads (NOT_LEADER_OR_FOLLOWER
for others); on one node the coordinator writes its own in process.

Authorization, as in Kafka: ListTransactions shows only the transactional ids the
principal may Describe; DescribeTransactions needs Describe on each id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and lists only the topics the principal may
Describe; WriteTxnMarkers needs ClusterAction on the cluster (CLUSTER_AUTHORIZATION_FAILED
for every partition): a client cannot abort a transaction by writing markers itself.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import TYPE_CHECKING, Any

from oncelog.broker.authorization import authorize, authorize_cluster
from oncelog.broker.internal_topics import TRANSACTION_STATE
from oncelog.coordinator_partitions import partition_for
from oncelog.protocol.errors import ErrorCode
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.transactions.coordinator import TxnDescription
from oncelog.transactions.state import TxnState

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.request_context import RequestContext

_EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)


async def _coordinator_loaded(broker: Broker) -> bool:
    """Whether `__transaction_state` exists (then, on one node, wait until it is loaded).
    Listing and describing never create it: no topic means no transactional id was ever
    seen. In a cluster each broker answers for the partitions it coordinates."""
    if broker.cluster is not None:
        return TRANSACTION_STATE in broker.cluster.cache.topics
    if broker.topics.get(TRANSACTION_STATE) is None:
        return False
    await broker.transactions.ready()
    return True


# -- ListTransactions (66) -------------------------------------------------------------------


async def handle_list_transactions(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    states = tuple(request.state_filters or ())
    producer_ids = tuple(request.producer_id_filters or ())
    duration_ms = int(getattr(request, "duration_filter", -1))
    rows: list[dict[str, Any]] = []
    # from the request alone, as Kafka's listTransactionStates: also on a broker of a
    # cluster that coordinates no partition of __transaction_state
    unknown = list(dict.fromkeys(s for s in states if not _known_state(s)))  # a set, in Kafka
    error = ErrorCode.none
    if await _coordinator_loaded(broker):
        now = broker.now_ms()
        for _, shard in sorted(broker.transactions.shards.items()):
            listing = shard.list_transactions(states, producer_ids, duration_ms, now_ms=now)
            if listing.error != ErrorCode.none:
                # Kafka answers COORDINATOR_LOAD_IN_PROGRESS, and nothing else, for the
                # whole request while any coordinator partition is still loading.
                error, rows, unknown = listing.error, [], []
                break
            rows += [
                {"transactional_id": tid, "producer_id": pid, "transaction_state": state}
                for tid, pid, state in listing.transactions
                if authorize(
                    broker,
                    header,
                    AclOperation.DESCRIBE,
                    ResourceType.TRANSACTIONAL_ID,
                    tid,
                    log_denial=False,
                )
            ]
    return {
        "throttle_time": 0,
        "error_code": error,
        "unknown_state_filters": unknown,
        "transaction_states": rows,
    }


def _known_state(name: str) -> bool:
    return TxnState.from_kafka_name(name) is not None


# -- DescribeTransactions (65) -------------------------------------------------------------


async def handle_describe_transactions(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    loaded = await _coordinator_loaded(broker)
    states = []
    for tid in request.transactional_ids:
        if not authorize(broker, header, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
            found = TxnDescription(tid, ErrorCode.transactional_id_authorization_failed)
        elif not loaded:
            code = ErrorCode.invalid_request if not tid else ErrorCode.transactional_id_not_found
            found = TxnDescription(tid, code)
        else:
            index = partition_for(tid, broker.transactions.num_partitions) if tid else 0
            shard = broker.transactions.shards.get(index)
            if shard is None:
                # In a cluster another broker may coordinate it: the admin client asks
                # FindCoordinator again.
                code = (
                    ErrorCode.not_coordinator
                    if broker.cluster is not None
                    else ErrorCode.coordinator_not_available
                )
                found = TxnDescription(tid, code)
            else:
                (found,) = shard.describe([tid])
        states.append(_description(found, header, broker))
    return {"throttle_time": 0, "transaction_states": states}


def _description(d: TxnDescription, header: RequestContext, broker: Broker) -> dict[str, Any]:
    """The answer for one id, listing only the topics the principal may Describe."""
    topics = {
        topic: partitions
        for topic, partitions in d.topics.items()
        if authorize(
            broker, header, AclOperation.DESCRIBE, ResourceType.TOPIC, topic, log_denial=False
        )
    }
    return {
        "error_code": d.error,
        "transactional_id": d.transactional_id,
        "transaction_state": d.state,
        "transaction_timeout": d.timeout_ms,
        "transaction_start_time": _timestamp(d.start_time_ms),
        "producer_id": d.producer_id,
        "producer_epoch": d.producer_epoch,
        "topics": [{"topic": t, "partitions": list(ps)} for t, ps in sorted(topics.items())],
    }


def _timestamp(ms: int) -> datetime.datetime:
    """The field is a non-nullable int64 in which Kafka sends -1 for "no transaction yet";
    the codec maps negative milliseconds to None, which kio cannot write there, so pass
    the datetime itself (-1 ms before the epoch encodes as -1)."""
    return _EPOCH + datetime.timedelta(milliseconds=ms)


# -- WriteTxnMarkers (27) ------------------------------------------------------------------


async def handle_write_txn_markers(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    """Write each marker to each listed partition, then answer once every written marker
    is durable. Markers take effect in request order (each one's appends happen before
    the next one's). Errors are per partition, as Kafka's (UNKNOWN_TOPIC_OR_PARTITION,
    INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED, ...)."""
    if not authorize_cluster(broker, header, AclOperation.CLUSTER_ACTION):
        refused = ErrorCode.cluster_authorization_failed
        outcomes = [
            {(t.name, i): refused for t in marker.topics for i in t.partition_indexes}
            for marker in request.markers
        ]
        return _markers_answer(request, outcomes)
    outcomes = await asyncio.gather(
        *(
            broker.local_markers.write(
                marker.producer_id,
                marker.producer_epoch,
                marker.transaction_result,
                marker.coordinator_epoch,
                [(t.name, index) for t in marker.topics for index in t.partition_indexes],
            )
            for marker in request.markers
        )
    )
    return _markers_answer(request, outcomes)


def _markers_answer(request: Any, outcomes: Any) -> dict[str, Any]:
    return {
        "markers": [
            {
                "producer_id": marker.producer_id,
                "topics": [
                    {
                        "name": t.name,
                        "partitions": [
                            {"partition_index": index, "error_code": codes[t.name, index]}
                            for index in t.partition_indexes
                        ],
                    }
                    for t in marker.topics
                ],
            }
            for marker, codes in zip(request.markers, outcomes, strict=True)
        ]
    }
