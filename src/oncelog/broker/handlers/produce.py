"""Produce: validate and append each partition's batches, then answer per acks.

A refused batch (header, records, producer state) gets its partition's error, with the
records at fault where Produce v8+ carries them; the other partitions are appended.

Internal topics are written by their coordinators only: a client's batch for one is
refused with INVALID_TOPIC_EXCEPTION, as Kafka does.

acks=0 gets no response, acks=1 is answered after the append, acks=-1 after the append
is durable when the partition fsyncs before acknowledging (see durability.py).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from oncelog.broker.topic_names import is_internal
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.record_batch import InvalidRecordBatch, RecordErrors

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.partition import Partition
    from oncelog.protocol.codec import RequestHeader

log = logging.getLogger(__name__)

VALID_ACKS = (-1, 0, 1)


async def handle(broker: Broker, header: RequestHeader, request: Any) -> dict[str, Any] | None:
    now = broker.now_ms()
    acks = request.acks
    durable_waits: list[asyncio.Future[None]] = []
    topics = []
    for topic_data in request.topic_data:
        answers = []
        for partition_data in topic_data.partition_data:
            answer, partition, end_offset = _append(
                broker, topic_data.name, partition_data, acks, request.transactional_id, now
            )
            answers.append(answer)
            if partition is None:
                continue
            if acks == -1 and partition.fsync_before_ack:
                durable_waits.append(broker.flusher.wait_durable(partition, end_offset))
            elif partition.flush_due():
                broker.flusher.request_flush(partition)
        topics.append({"name": topic_data.name, "partition_responses": answers})
    if acks == 0:
        return None
    if durable_waits:
        outcomes = await asyncio.gather(*durable_waits, return_exceptions=True)
        failure = next((o for o in outcomes if isinstance(o, BaseException)), None)
        if failure is not None:
            code = (
                failure.code if isinstance(failure, KafkaError) else ErrorCode.kafka_storage_error
            )
            for topic in topics:
                for answer in topic["partition_responses"]:
                    if answer["error_code"] == ErrorCode.none:
                        answer.update(_error(answer["index"], code, str(failure)))
    return {"responses": topics, "throttle_time": 0}


def _append(
    broker: Broker,
    topic: str,
    partition_data: Any,
    acks: int,
    transactional_id: str | None,
    now_ms: int,
) -> tuple[dict[str, Any], Partition | None, int]:
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
        partition = broker.topics.partition(topic, index)
        if partition_data.records is None:
            raise KafkaError(ErrorCode.invalid_record, "produce request without records")
        header, batch = partition.split(partition_data.records, now_ms)
        if header.is_transactional:
            broker.check_transactional_write(transactional_id, header, topic, index)
        outcome = partition.append_client_batch(batch, header, now_ms)
    except KafkaError as exc:
        log.debug("produce to %s-%d refused: %s", topic, index, exc)
        record_errors = exc.record_errors if isinstance(exc, InvalidRecordBatch) else ()
        return _error(index, exc.code, exc.message, record_errors), None, 0
    answer = {
        "index": index,
        "error_code": ErrorCode.none,
        "base_offset": outcome.base_offset,
        "log_append_time": outcome.log_append_time_ms,
        "log_start_offset": partition.log_start_offset,
        "record_errors": [],
        "error_message": None,
    }
    return answer, partition, outcome.last_offset + 1


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
