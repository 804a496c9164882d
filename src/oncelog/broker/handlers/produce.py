"""Produce: validate and append each partition's batches, then answer per acks.

A refused batch (header, records, producer state) gets its partition's error, with the
records at fault where Produce v8+ carries them; the other partitions are appended. A
batch whose log write fails (an OSError: ENOSPC, EIO) gets KAFKA_STORAGE_ERROR.

Internal topics are written by their coordinators only: a client's batch for one is
refused with INVALID_TOPIC_EXCEPTION, as Kafka does.

Authorization, as in Kafka's KafkaApis: a request carrying transactional batches needs
Write on its transactional id (else every partition gets
TRANSACTIONAL_ID_AUTHORIZATION_FAILED and nothing is appended); each topic needs Write
(else TOPIC_AUTHORIZATION_FAILED, checked before the topic's existence).

acks=0 gets no response, acks=1 is answered after the append, acks=-1 after the append
is durable when the partition fsyncs before acknowledging (see durability.py) and, in a
cluster, once every in-sync replica holds it (NOT_ENOUGH_REPLICAS before the append when
the ISR is smaller than min.insync.replicas, NOT_ENOUGH_REPLICAS_AFTER_APPEND when it
shrank below it meanwhile). Only the partition's leader accepts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from oncelog.broker.authorization import authorize
from oncelog.broker.topic_names import is_internal
from oncelog.cluster.txn_verification import Admission, produce_error
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.record_batch import (
    HEADER_SIZE,
    InvalidRecordBatch,
    RecordErrors,
    parse_header,
)
from oncelog.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.partition import Partition
    from oncelog.broker.request_context import RequestContext
    from oncelog.protocol.record_batch import BatchHeader

log = logging.getLogger(__name__)

VALID_ACKS = (-1, 0, 1)


async def handle(broker: Broker, header: RequestContext, request: Any) -> dict[str, Any] | None:
    now = broker.now_ms()
    acks = request.acks
    transactional_id = request.transactional_id
    if _has_transactional_batches(request) and not (
        transactional_id is not None
        and authorize(
            broker, header, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id
        )
    ):
        return None if acks == 0 else _refuse_all(request)
    writable = {
        name: authorize(broker, header, AclOperation.WRITE, ResourceType.TOPIC, name)
        for name in {t.name for t in request.topic_data}
    }
    appended: list[tuple[dict[str, Any], Partition, int]] = []
    deferred: list[tuple[dict[str, Any], Admission, str, Any]] = []
    topics = []
    for topic_data in request.topic_data:
        answers = []
        for partition_data in topic_data.partition_data:
            if not writable[topic_data.name]:
                answers.append(_error(partition_data.index, *_TOPIC_REFUSED))
                continue
            answer, partition, end_offset = _append(
                broker, topic_data.name, partition_data, acks, transactional_id, now
            )
            answers.append(answer)
            if isinstance(end_offset, Admission):
                deferred.append((answer, end_offset, topic_data.name, partition_data))
            elif partition is not None:
                appended.append((answer, partition, end_offset))
        topics.append({"name": topic_data.name, "partition_responses": answers})
    # Transactional batches whose coordinator (on another broker) is asked first: each is
    # appended in its turn once confirmed (cluster/txn_verification.py).
    for answer, admission, topic, partition_data in deferred:
        outcome, partition, end_offset = await _append_admitted(
            broker, admission, topic, partition_data, acks
        )
        answer.update(outcome)
        if partition is not None:
            appended.append((answer, partition, end_offset))
    waits = [
        wait
        for answer, partition, end_offset in appended
        for wait in _durability_waits(broker, answer, partition, end_offset, acks)
    ]
    if acks == 0:
        return None
    if waits:
        # A single node waits for its fsync however long it takes, as it always has; a
        # cluster leader waits for the ISR at most the request's timeout, as Kafka does.
        timeout_s = None if broker.cluster is None else request.timeout.total_seconds()
        await _await_all(waits, timeout_s)
    return {"responses": topics, "throttle_time": 0}


_TOPIC_REFUSED = (ErrorCode.topic_authorization_failed, "Topic authorization failed.")


def _has_transactional_batches(request: Any) -> bool:
    """Kafka's ``RequestUtils.hasTransactionalRecords``: the first batch of any partition
    is transactional."""
    return any(
        p.records is not None
        and len(p.records) >= HEADER_SIZE
        and parse_header(p.records).is_transactional
        for t in request.topic_data
        for p in t.partition_data
    )


def _refuse_all(request: Any) -> dict[str, Any]:
    code, message = (
        ErrorCode.transactional_id_authorization_failed,
        ("Transactional Id authorization failed."),
    )
    return {
        "responses": [
            {
                "name": t.name,
                "partition_responses": [_error(p.index, code, message) for p in t.partition_data],
            }
            for t in request.topic_data
        ],
        "throttle_time": 0,
    }


def _durability_waits(
    broker: Broker, answer: dict[str, Any], partition: Partition, end_offset: int, acks: int
) -> list[tuple[dict[str, Any], asyncio.Future[None]]]:
    """What an appended batch waits for before it is acknowledged (fsync and, in a
    cluster, the ISR), and, when nothing waits, a flush if one is due."""
    replication = broker.cluster.replicas if broker.cluster is not None else None
    waits = []
    if replication is not None:
        replication.after_leader_append(partition)
    if acks == -1 and partition.fsync_before_ack:
        waits.append((answer, broker.flusher.wait_durable(partition, end_offset)))
    elif partition.flush_due():
        broker.flusher.request_flush(partition)
    if acks == -1 and replication is not None:
        waits.append((answer, replication.wait_replicated(partition, end_offset)))
    return waits


async def _await_all(
    waits: list[tuple[dict[str, Any], asyncio.Future[None]]], timeout_s: float | None
) -> None:
    """Wait for fsyncs (and, in a cluster, the ISR) up to ``timeout_s``; each partition
    whose wait failed or did not end gets its own error."""
    futures = [future for _, future in waits]
    timeout = None if timeout_s is None else max(timeout_s, 0.0)
    if timeout is None and len(futures) == 1:
        # One partition's fsync, the common case: awaited as it is, without the sets, the
        # callbacks and the extra future ``asyncio.wait`` makes (issue 12).
        with contextlib.suppress(Exception):  # its failure is read below
            await futures[0]
        pending: set[asyncio.Future[None]] = set()
    else:
        _, pending = await asyncio.wait(futures, timeout=timeout)
    for answer, future in waits:
        if answer["error_code"] != ErrorCode.none:
            continue
        if future in pending:
            future.cancel()
            answer.update(
                _error(
                    answer["index"],
                    ErrorCode.request_timed_out,
                    f"not replicated to the ISR within the request timeout of {timeout} s",
                )
            )
            continue
        failure = future.exception()
        if failure is not None:
            code = (
                failure.code if isinstance(failure, KafkaError) else ErrorCode.kafka_storage_error
            )
            answer.update(_error(answer["index"], code, str(failure)))


def _append(
    broker: Broker,
    topic: str,
    partition_data: Any,
    acks: int,
    transactional_id: str | None,
    now_ms: int,
) -> tuple[dict[str, Any], Partition | None, int | Admission]:
    """Append one partition's batch now; or, for a transactional batch a coordinator on
    another broker must confirm first, the Admission it waits for."""
    index = partition_data.index
    if acks not in VALID_ACKS:
        return (
            _error(index, ErrorCode.invalid_required_acks, f"acks must be -1, 0 or 1, not {acks}"),
            None,
            0,
        )
    try:
        if is_internal(topic):
            raise KafkaError(
                ErrorCode.invalid_topic_exception, f"Cannot append to internal topic {topic}"
            )
        partition = broker.partition_for_clients(topic, index)
        if partition_data.records is None:
            raise KafkaError(ErrorCode.invalid_record, "produce request without records")
        header, batch = partition.split(partition_data.records, now_ms)
        if header.is_transactional:
            try:
                admission = broker.check_transactional_write(transactional_id, header, partition)
            except KafkaError as refused:  # by the coordinator in process
                raise KafkaError(produce_error(refused.code), refused.message) from None
            if admission is not None:
                return _pending(index), partition, admission
        return _append_now(
            broker, partition, header, batch, len(partition_data.records), acks, now_ms
        )
    except KafkaError as exc:
        return _refused(topic, index, exc), None, 0


async def _append_admitted(
    broker: Broker, admission: Admission, topic: str, partition_data: Any, acks: int
) -> tuple[dict[str, Any], Partition | None, int]:
    """Append a transactional batch once its Admission lets it (the leadership, and the
    producer's transaction, may have changed meanwhile)."""
    index = partition_data.index
    try:
        await admission.wait()
        now_ms = broker.now_ms()
        partition = broker.partition_for_clients(topic, index)
        header, batch = partition.split(partition_data.records, now_ms)
        admission.check_still_open(partition, header.producer_id)
        return _append_now(
            broker, partition, header, batch, len(partition_data.records), acks, now_ms
        )
    except KafkaError as exc:
        return _refused(topic, index, exc), None, 0
    finally:
        admission.done()


def _append_now(
    broker: Broker,
    partition: Partition,
    header: BatchHeader,
    batch: memoryview | bytes,
    received: int,
    acks: int,
    now_ms: int,
) -> tuple[dict[str, Any], Partition | None, int]:
    """Append ``batch`` (the request's records after validation, recompressed if the
    topic's compression.type asks); BytesIn counts the ``received`` bytes, as Kafka's
    appendToLocalLog marks the request's records.sizeInBytes. A failed log write
    (OSError) is this partition's KAFKA_STORAGE_ERROR (see ``_storage_failure``)."""
    if acks == -1 and broker.cluster is not None and broker.cluster.replicas is not None:
        broker.cluster.replicas.check_min_insync(partition)
    try:
        outcome = partition.append_client_batch(batch, header, now_ms)
    except OSError as exc:
        return _storage_failure(partition, exc), None, 0
    partition.client_writes_failing = False
    broker.metrics.count_produced(partition.topic, received, header.record_count)
    answer = {
        "index": partition.index,
        "error_code": ErrorCode.none,
        "base_offset": outcome.base_offset,
        "log_append_time": outcome.log_append_time_ms,
        "log_start_offset": partition.log_start_offset,
        "record_errors": [],
        "error_message": None,
    }
    return answer, partition, outcome.last_offset + 1


def _refused(topic: str, index: int, exc: KafkaError) -> dict[str, Any]:
    log.debug("produce to %s-%d refused: %s", topic, index, exc)
    record_errors = exc.record_errors if isinstance(exc, InvalidRecordBatch) else ()
    return _error(index, exc.code, exc.message, record_errors)


def _storage_failure(partition: Partition, exc: OSError) -> dict[str, Any]:
    """A write to the partition's log failed (ENOSPC, EIO: the segment cut the torn bytes
    off, or took the log offline): that partition is answered KAFKA_STORAGE_ERROR, which
    clients retry, and the request's other partitions as usual, as Kafka's
    ``appendToLocalLog`` answers a KafkaStorageException. Produce has no top-level error
    field: an escaping OSError would close the client's connection instead. Logged once
    until an append succeeds again; each client retry meanwhile at DEBUG."""
    level = logging.DEBUG if partition.client_writes_failing else logging.WARNING
    partition.client_writes_failing = True
    log.log(level, "produce to %r: the log write failed: %s", partition, exc)
    return _error(partition.index, ErrorCode.kafka_storage_error, f"the log write failed: {exc}")


def _pending(index: int) -> dict[str, Any]:
    """The answer of a batch waiting for its Admission (filled in once appended)."""
    return _error(index, ErrorCode.unknown_server_error, "not appended yet")


def _error(
    index: int, code: ErrorCode, message: str, record_errors: RecordErrors = ()
) -> dict[str, Any]:
    """A refused partition; ``record_errors`` name the records at fault (Produce v8+
    carries them, older versions drop the field)."""
    return {
        "index": index,
        "error_code": code,
        "base_offset": -1,
        "log_append_time": -1,
        "log_start_offset": -1,
        "record_errors": [
            {"batch_index": i, "batch_index_error_message": text} for i, text in record_errors
        ],
        "error_message": message,
    }
