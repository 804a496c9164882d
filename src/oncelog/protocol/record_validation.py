"""What Kafka's ``LogValidator`` checks of a produced batch beyond its header, and the
conversion a topic's ``compression.type`` asks for.

``split_batches`` (record_batch.py) has already checked the header: lengths, magic, CRC,
codec id, record count against lastOffsetDelta, producer id/epoch/sequence coherence, no
control batch. Here the records themselves are read (decompressed first, with a bound):

1. A compressed payload must decompress with its codec (CORRUPT_MESSAGE) to at most
   ``max_uncompressed_bytes`` (MESSAGE_TOO_LARGE: a decompression bomb, or a batch no
   producer builds).
2. The records must parse exactly to the end of the batch, their number must be the
   header's, every varint well formed, record ``i`` at offset delta ``i``
   (INVALID_RECORD; see record_scan.py for the rules).
3. Every record's timestamp (base timestamp + delta) must fit in 64 bits, and the
   header's maxTimestamp must be the largest of them (INVALID_RECORD). Kafka rewrites a
   wrong maxTimestamp in place instead; no client sends one, and a refusal keeps the
   stored batch exactly as sent.
4. Per record, with record errors (Kafka's RecordValidationException): a keyless record
   on a compacted topic (INVALID_RECORD), a CreateTime timestamp outside
   ``message.timestamp.before.max.ms`` / ``after.max.ms`` of now (INVALID_TIMESTAMP). A
   client batch flagged LogAppendTime is INVALID_TIMESTAMP too (Kafka lets it through on
   CreateTime topics and rewrites the flag).

Then, as Kafka does, the batch is recompressed when the topic's ``compression.type``
names a codec other than the batch's (``uncompressed`` or a codec; ``producer`` keeps
it). Only the payload changes: the records' bytes are the same under every codec. A
result larger than ``max.message.bytes`` is MESSAGE_TOO_LARGE (Kafka's
RecordBatchTooLargeException after conversion).

Kafka differs in two places, both stricter here: a record whose offset delta is not its
index makes Kafka rebuild a compressed batch and passes unchanged in an uncompressed one;
a key or value length below -1 reads as null in Kafka. Both are refused here: no client
writes them, and a stored batch that consumers read differently from what the producer
meant is what this validation exists to prevent.
"""

from __future__ import annotations

from dataclasses import dataclass

from oncelog.protocol import compression
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import (
    HEADER_SIZE,
    BatchHeader,
    InvalidRecordBatch,
    decode_records,
    with_payload,
)
from oncelog.protocol.record_scan import Fault, Scan, scan

__all__ = ["RecordRules", "max_uncompressed_bytes", "validate_records"]

NO_TIMESTAMP = -1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_UNCOMPRESSED_FLOOR = 64 * 1024 * 1024
_UNCOMPRESSED_RATIO = 8


def max_uncompressed_bytes(max_message_bytes: int) -> int:
    """How far one batch's records may inflate: 64 MiB, or 8 x max.message.bytes for
    topics that allow batches over 8 MiB (Kafka has no bound; its JVM heap is one)."""
    return max(_UNCOMPRESSED_FLOOR, _UNCOMPRESSED_RATIO * max_message_bytes)


@dataclass(frozen=True, slots=True)
class RecordRules:
    """What a topic asks of the records produced to it (Kafka's LogValidator inputs)."""

    max_uncompressed_bytes: int
    target_compression: int | None = None  # None: 'producer', keep the batch's codec
    max_message_bytes: int = _INT64_MAX  # bounds a recompressed batch, as the one sent
    log_append_time: bool = False
    timestamp_before_max_ms: int = _INT64_MAX
    timestamp_after_max_ms: int = _INT64_MAX
    compacted: bool = False


def validate_records(
    header: BatchHeader, batch: memoryview, rules: RecordRules, now_ms: int
) -> memoryview | bytes:
    """The batch to append: ``batch`` itself, or a recompressed copy. Raise
    :class:`InvalidRecordBatch` (with record errors where Kafka has them) if refused."""
    payload = batch[HEADER_SIZE:]
    records = payload
    if header.compression != compression.NONE:
        records = memoryview(
            compression.decompress(header.compression, payload, rules.max_uncompressed_bytes)
        )
    found = scan(records, header.record_count, rules.compacted)
    if found.fault != Fault.OK:
        raise InvalidRecordBatch(ErrorCode.invalid_record, _describe(found, header.record_count))
    _check_timestamps(header, found, rules, now_ms, batch)
    if found.first_keyless >= 0:
        _refuse_keyless(batch)
    target = rules.target_compression
    if target is None or target == header.compression:
        return batch
    converted = with_payload(batch, target, compression.compress(target, bytes(records)))
    if len(converted) > rules.max_message_bytes:
        raise InvalidRecordBatch(
            ErrorCode.message_too_large,
            f"the batch recompressed for the topic's compression.type takes {len(converted)} "
            f"bytes, more than max.message.bytes {rules.max_message_bytes}",
        )
    return converted


def _check_timestamps(
    header: BatchHeader, found: Scan, rules: RecordRules, now_ms: int, batch: memoryview
) -> None:
    if header.timestamp_type == 1:
        raise InvalidRecordBatch(
            ErrorCode.invalid_timestamp,
            "producers may not set the timestamp type to LogAppendTime",
            [(i, "LogAppendTime set by the producer") for i in range(header.record_count)],
        )
    lowest = header.base_timestamp + found.min_timestamp_delta
    highest = header.base_timestamp + found.max_timestamp_delta
    if lowest < _INT64_MIN or highest > _INT64_MAX:
        raise InvalidRecordBatch(
            ErrorCode.invalid_record,
            f"record timestamps overflow: base {header.base_timestamp}, deltas "
            f"{found.min_timestamp_delta}..{found.max_timestamp_delta}",
        )
    if highest != header.max_timestamp:
        raise InvalidRecordBatch(
            ErrorCode.invalid_record,
            f"maxTimestamp {header.max_timestamp} is not the records' largest timestamp {highest}",
        )
    if rules.log_append_time:
        return
    earliest = now_ms - rules.timestamp_before_max_ms
    latest = now_ms + rules.timestamp_after_max_ms
    if (lowest == highest == NO_TIMESTAMP) or (lowest >= earliest and highest <= latest):
        return
    # The slow path runs only for a refusal: name every record out of range, as Kafka does.
    errors = [
        (i, f"timestamp {r.timestamp} is out of range [{earliest}, {latest}]")
        for i, r in enumerate(decode_records(batch))
        if r.timestamp != NO_TIMESTAMP and not earliest <= r.timestamp <= latest
    ]
    if errors:
        raise InvalidRecordBatch(
            ErrorCode.invalid_timestamp,
            "One or more records have been rejected due to invalid timestamp",
            errors,
        )


def _refuse_keyless(batch: memoryview) -> None:
    errors = [
        (i, "Compacted topic cannot accept message without key")
        for i, r in enumerate(decode_records(batch))
        if r.key is None
    ]
    raise InvalidRecordBatch(
        ErrorCode.invalid_record,
        f"One or more records have been rejected due to {len(errors)} record errors",
        errors,
    )


_FAULTS = {
    Fault.TRUNCATED: "a field runs past the end of its record, at byte {value}",
    Fault.VARINT_TOO_LONG: "varint at byte {value} is longer than its type allows",
    Fault.BAD_RECORD_LENGTH: "invalid record length {value}",
    Fault.LENGTH_MISMATCH: "the fields of the record at byte {value} end before its length",
    Fault.OFFSET_DELTA: "offset delta {value} where {index} was expected",
    Fault.BAD_FIELD_LENGTH: "invalid key, value or header value length {value}",
    Fault.BAD_HEADER_COUNT: "invalid number of record headers {value}",
    Fault.BAD_HEADER_KEY: "invalid header key length {value}",
}


def _describe(found: Scan, count: int) -> str:
    if found.fault == Fault.COUNT_TOO_LARGE:
        return f"record count {count} cannot fit in the batch's records"
    if found.fault == Fault.TRAILING_BYTES:
        return f"{found.value} bytes remain after the {count} records the header declares"
    detail = _FAULTS[found.fault].format(value=found.value, index=found.record)
    return f"invalid record structure: record {found.record} of {count}: {detail}"
