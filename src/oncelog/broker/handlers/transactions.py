"""The transaction APIs a producer calls: InitProducerId (with a transactional id),
AddPartitionsToTxn, AddOffsetsToTxn and EndTxn. The coordinator does the work.

Authorization, as in Kafka: each needs Write on the transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED), so a principal without it can neither start,
fence (InitProducerId bumps the epoch) nor end another's transaction. A producer id without
a transactional id needs IdempotentWrite on the cluster or Write on some topic (KIP-679;
else CLUSTER_AUTHORIZATION_FAILED). AddPartitionsToTxn also needs Write on each topic
(TOPIC_AUTHORIZATION_FAILED; the other partitions then get OPERATION_NOT_ATTEMPTED), and
AddOffsetsToTxn Read on the group (GROUP_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oncelog.broker.authorization import (
    authorize,
    authorize_by_resource_type,
    authorize_cluster,
)
from oncelog.broker.coordinator_runtime import CoordinatorError
from oncelog.broker.topic_names import is_internal
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.transactions.coordinator import client_error
from oncelog.transactions.state import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    is_partial_expected_producer,
)

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.request_context import RequestContext

BATCHED_ADD_PARTITIONS_FROM = 4


def _may_use(broker: Broker, header: RequestContext, transactional_id: str) -> bool:
    return authorize(
        broker, header, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id
    )


def _refused(code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}


async def handle_init_producer_id(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    if request.transactional_id is not None:
        if not _may_use(broker, header, request.transactional_id):
            return _refused(ErrorCode.transactional_id_authorization_failed)
    elif not (
        authorize_cluster(broker, header, AclOperation.IDEMPOTENT_WRITE)
        or authorize_by_resource_type(broker, header, AclOperation.WRITE, ResourceType.TOPIC)
    ):
        return _refused(ErrorCode.cluster_authorization_failed)
    expected_id = getattr(request, "producer_id", NO_PRODUCER_ID)  # v3+
    expected_epoch = getattr(request, "producer_epoch", NO_PRODUCER_EPOCH)
    if is_partial_expected_producer(expected_id, expected_epoch):
        return _refused(ErrorCode.invalid_request)
    try:
        if broker.cluster is not None:
            # In a cluster ids come from blocks reserved in ZooKeeper (no other broker
            # hands them out): have one at hand before the coordinator decides.
            await broker.cluster.producer_ids.ready()
        if request.transactional_id is None:
            # No transactional id: always a new producer id at epoch 0, as Kafka does.
            return _producer_id(ErrorCode.none, broker.new_producer_id(), 0)
    except CoordinatorError as exc:
        return _producer_id(client_error(ApiKey.INIT_PRODUCER_ID, header.api_version, exc.code))
    answer = await broker.transactions.init_producer_id(
        request.transactional_id,
        int(request.transaction_timeout.total_seconds() * 1000),
        expected_id,
        expected_epoch,
    )
    return _producer_id(
        client_error(ApiKey.INIT_PRODUCER_ID, header.api_version, answer.error),
        answer.producer_id,
        answer.producer_epoch,
    )


def _producer_id(code: ErrorCode, producer_id: int = -1, epoch: int = -1) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": code,
        "producer_id": producer_id,
        "producer_epoch": epoch,
    }


async def handle_add_partitions(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    if header.api_version >= BATCHED_ADD_PARTITIONS_FROM:
        # From brokers only (a partition leader's verify_only): Kafka asks ClusterAction
        # for the whole request, and then neither Write on the ids nor on the topics.
        if not authorize_cluster(broker, header, AclOperation.CLUSTER_ACTION):
            return {
                "throttle_time": 0,
                "error_code": ErrorCode.cluster_authorization_failed,
                "results_by_transaction": [],
            }
        results = [
            await _add_partitions(
                broker,
                header,
                t.transactional_id,
                t.producer_id,
                t.producer_epoch,
                t.topics,
                t.verify_only,
            )
            for t in request.transactions
        ]
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "results_by_transaction": [
                {"transactional_id": t.transactional_id, "topic_results": r}
                for t, r in zip(request.transactions, results, strict=True)
            ],
        }
    topic_results = await _add_partitions(
        broker,
        header,
        request.v3_and_below_transactional_id,
        request.v3_and_below_producer_id,
        request.v3_and_below_producer_epoch,
        request.v3_and_below_topics,
        False,
    )
    return {"throttle_time": 0, "results_by_topic_v3_and_below": topic_results}


async def _add_partitions(
    broker: Broker,
    header: RequestContext,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    topics: Any,
    verify_only: bool,
) -> list[dict[str, Any]]:
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    from_client = header.api_version < BATCHED_ADD_PARTITIONS_FROM
    if from_client and not _may_use(broker, header, transactional_id):
        return _by_topic(wanted, lambda tp: ErrorCode.transactional_id_authorization_failed)
    # A client never adds an internal topic itself (AddOffsetsToTxn adds the group's
    # offsets partition): Kafka counts them unauthorized whatever the ACLs. A broker's
    # question may name one: a TxnOffsetCommit's offsets partition.
    writable = {
        name: not from_client
        or (
            not is_internal(name)
            and authorize(broker, header, AclOperation.WRITE, ResourceType.TOPIC, name)
        )
        for name in {t for t, _ in wanted}
    }
    codes = {
        (t, p): ErrorCode.topic_authorization_failed
        if not writable[t]
        else ErrorCode.unknown_topic_or_partition
        for t, p in wanted
        if not writable[t] or not broker.knows_partition(t, p)
    }
    if codes:
        # Kafka refuses the whole request: refused and unknown partitions get their own
        # error, the others OPERATION_NOT_ATTEMPTED.
        return _by_topic(wanted, lambda tp: codes.get(tp, ErrorCode.operation_not_attempted))
    if verify_only:
        code = _verify(broker, transactional_id, producer_id, producer_epoch, wanted)
    else:
        answer = await broker.transactions.add_partitions(
            transactional_id, producer_id, producer_epoch, wanted
        )
        code = client_error(ApiKey.ADD_PARTITIONS_TO_TXN, header.api_version, answer.error)
    return _by_topic(wanted, lambda tp: code)


def _verify(
    broker: Broker,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    wanted: list[tuple[str, int]],
) -> ErrorCode:
    """KIP-890 part 1, asked by a partition leader: whether each partition is in the
    producer's ongoing transaction. A broker that does not coordinate the id (any more)
    says NOT_COORDINATOR, so the leader retries rather than refuses."""
    coordinators = broker.transactions
    if broker.cluster is not None and coordinators.partition_of(transactional_id) not in (
        coordinators.shards
    ):
        return ErrorCode.not_coordinator
    try:
        for topic, index in wanted:
            broker.transactions.check_write(
                transactional_id, producer_id, producer_epoch, topic, index
            )
    except KafkaError as exc:
        return exc.code
    return ErrorCode.none


def _by_topic(wanted: list[tuple[str, int]], code_of: Any) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, index in wanted:
        topics.setdefault(topic, []).append(
            {"partition_index": index, "partition_error_code": code_of((topic, index))}
        )
    return [{"name": name, "results_by_partition": parts} for name, parts in topics.items()]


async def handle_add_offsets(
    broker: Broker, header: RequestContext, request: Any
) -> dict[str, Any]:
    if not _may_use(broker, header, request.transactional_id):
        return {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed}
    if not authorize(broker, header, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed}
    answer = await broker.transactions.add_offsets(
        request.transactional_id, request.producer_id, request.producer_epoch, request.group_id
    )
    return {
        "throttle_time": 0,
        "error_code": client_error(ApiKey.ADD_OFFSETS_TO_TXN, header.api_version, answer.error),
    }


async def handle_end_txn(broker: Broker, header: RequestContext, request: Any) -> dict[str, Any]:
    """EndTxn: answered once the PREPARE record is durable. Nothing may be awaited between
    ``end_txn`` and the return: the coordinator's marker task yields one loop turn so that
    this answer is written before the markers are appended (transaction_coordinator.py,
    ``_write_markers``), which one more suspension here would undo."""
    if not _may_use(broker, header, request.transactional_id):
        return {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed}
    answer = await broker.transactions.end_txn(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed
    )
    return {
        "throttle_time": 0,
        "error_code": client_error(ApiKey.END_TXN, header.api_version, answer.error),
    }
