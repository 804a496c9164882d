"""The transaction APIs a producer calls: InitProducerId (with a transactional id),
AddPartitionsToTxn, AddOffsetsToTxn and EndTxn. The coordinator does the work."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.transactions.coordinator import client_error

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.protocol.codec import RequestHeader

BATCHED_ADD_PARTITIONS_FROM = 4


async def handle_init_producer_id(
    broker: Broker, header: RequestHeader, request: Any
) -> dict[str, Any]:
    if request.transactional_id is None:
        # No transactional id: always a new producer id at epoch 0, as Kafka does; in a
        # cluster from a block reserved in ZooKeeper, so no other broker hands it out.
        if broker.cluster is not None:
            producer_id = await broker.cluster.allocate_producer_id()
        else:
            assert broker.producer_ids is not None
            producer_id = broker.producer_ids.allocate()
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "producer_id": producer_id,
            "producer_epoch": 0,
        }
    answer = await broker.transactions.init_producer_id(
        request.transactional_id,
        int(request.transaction_timeout.total_seconds() * 1000),
        getattr(request, "producer_id", -1),
        getattr(request, "producer_epoch", -1),
    )
    return {
        "throttle_time": 0,
        "error_code": client_error(ApiKey.INIT_PRODUCER_ID, header.api_version, answer.error),
        "producer_id": answer.producer_id,
        "producer_epoch": answer.producer_epoch,
    }


async def handle_add_partitions(
    broker: Broker, header: RequestHeader, request: Any
) -> dict[str, Any]:
    if header.api_version >= BATCHED_ADD_PARTITIONS_FROM:
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
    header: RequestHeader,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    topics: Any,
    verify_only: bool,
) -> list[dict[str, Any]]:
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    missing = [(t, p) for t, p in wanted if not _exists(broker, t, p)]
    if missing:
        # Kafka refuses the whole request: unknown partitions get their own error, the
        # others OPERATION_NOT_ATTEMPTED.
        codes = dict.fromkeys(missing, ErrorCode.unknown_topic_or_partition)
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
    try:
        for topic, index in wanted:
            broker.transactions.check_write(
                transactional_id, producer_id, producer_epoch, topic, index
            )
    except KafkaError as exc:
        return exc.code
    return ErrorCode.none


def _exists(broker: Broker, topic: str, index: int) -> bool:
    found = broker.topics.get(topic)
    return found is not None and 0 <= index < len(found.partitions)


def _by_topic(wanted: list[tuple[str, int]], code_of: Any) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, index in wanted:
        topics.setdefault(topic, []).append(
            {"partition_index": index, "partition_error_code": code_of((topic, index))}
        )
    return [{"name": name, "results_by_partition": parts} for name, parts in topics.items()]


async def handle_add_offsets(broker: Broker, header: RequestHeader, request: Any) -> dict[str, Any]:
    answer = await broker.transactions.add_offsets(
        request.transactional_id, request.producer_id, request.producer_epoch, request.group_id
    )
    return {
        "throttle_time": 0,
        "error_code": client_error(ApiKey.ADD_OFFSETS_TO_TXN, header.api_version, answer.error),
    }


async def handle_end_txn(broker: Broker, header: RequestHeader, request: Any) -> dict[str, Any]:
    answer = await broker.transactions.end_txn(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed
    )
    return {
        "throttle_time": 0,
        "error_code": client_error(ApiKey.END_TXN, header.api_version, answer.error),
    }
