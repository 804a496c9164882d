"""Rewriting a stored batch with fewer records, as the log cleaner does.

Kafka's ``MemoryRecords.buildRetainedRecordsInto`` keeps everything a reader or the
producer state relies on: the base offset and the last offset delta (offsets keep their
gaps and the last sequence survives), producer id, epoch and base sequence, the
transactional and control bits, the timestamp type, the partition leader epoch and the
codec. Only the records, their count, the base timestamp (the delete horizon when one is
set, KIP-534) and the max timestamp change. ``DefaultRecordBatch.writeEmptyHeader`` is the
limit case: a header with no records at all, kept so a producer's last sequence survives.

Records are copied byte for byte from their offset delta on (key, value, headers exactly
as the producer wrote them); only the length, attributes and timestamp delta in front are
re-encoded, since the base timestamp may move. Nothing is decoded into text, so header
names that are not UTF-8 survive.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# The batch layout and varint codec are record_batch's (private there): shared, not repeated.
from oncelog.protocol import compression as codecs
from oncelog.protocol.record_batch import (
    ATTR_COMPRESSION_MASK,
    ATTR_DELETE_HORIZON,
    COMPRESSION_NONE,
    DECODE_MAX_UNCOMPRESSED_BYTES,
    HEADER_SIZE,
    BatchHeader,
    _read_bytes,
    _read_varint,
    _write_varint,
    parse_header,
)
from oncelog.protocol.record_batch import (
    _assemble as _assemble_batch,
)

__all__ = ["RawRecord", "empty_batch", "read_raw_records", "retained_batch"]

NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One record of a stored batch: what compaction decides by, and its bytes."""

    offset: int
    key: bytes | None
    value: bytes | None
    attributes: int
    create_timestamp: int  # base timestamp + delta, whatever the batch's timestamp type
    tail: bytes  # the record from its offset delta to its end, verbatim


def read_raw_records(batch: bytes | bytearray | memoryview) -> list[RawRecord]:
    """The records of one stored batch (ValueError if they, or their codec's payload,
    do not parse)."""
    mv = memoryview(batch)
    header = parse_header(mv)
    body = memoryview(_decompress(header.compression, mv[HEADER_SIZE : header.size]))
    records = []
    pos = 0
    for _ in range(header.record_count):
        length, pos = _read_varint(body, pos)
        end = pos + length
        if length < 1 or end > len(body):
            raise ValueError(f"record of {length} bytes runs past the end of the batch")
        attributes = body[pos]
        ts_delta, tail_at = _read_varint(body, pos + 1)
        offset_delta, pos = _read_varint(body, tail_at)
        key, pos = _read_bytes(body, pos)
        value, pos = _read_bytes(body, pos)
        if pos > end:
            raise ValueError("record fields run past the record's length")
        records.append(
            RawRecord(
                header.base_offset + offset_delta,
                key,
                value,
                attributes,
                header.base_timestamp + ts_delta,
                bytes(body[tail_at:end]),
            )
        )
        pos = end
    if pos != len(body):
        raise ValueError(f"{len(body) - pos} bytes follow the batch's last record")
    return records


def retained_batch(
    header: BatchHeader, records: Sequence[RawRecord], *, delete_horizon_ms: int | None
) -> bytes:
    """The batch re-encoded with only ``records`` (at least one), in its codec.

    ``delete_horizon_ms`` sets a new delete horizon; otherwise one the batch already has
    is kept, and a batch without one takes its first retained record's timestamp as base.
    """
    attributes = header.attributes
    if delete_horizon_ms is not None:
        base_ts, attributes = delete_horizon_ms, attributes | ATTR_DELETE_HORIZON
    elif attributes & ATTR_DELETE_HORIZON:
        base_ts = header.base_timestamp
    else:
        base_ts = records[0].create_timestamp
    body = bytearray()
    for record in records:
        inner = bytearray((record.attributes,))
        _write_varint(inner, record.create_timestamp - base_ts)
        inner += record.tail
        _write_varint(body, len(inner))
        body += inner
    if header.timestamp_type == 1:  # LogAppendTime: the batch's time is every record's
        max_ts = header.max_timestamp
    else:
        max_ts = max(r.create_timestamp for r in records)
    payload = _compress(header.compression, bytes(body))
    return _assemble(header, attributes, base_ts, max_ts, len(records), payload)


def empty_batch(header: BatchHeader) -> bytes:
    """Only the header: no records, no codec, no base timestamp, everything else kept."""
    attributes = header.attributes & ~(ATTR_COMPRESSION_MASK | ATTR_DELETE_HORIZON)
    return _assemble(header, attributes, NO_TIMESTAMP, header.max_timestamp, 0, b"")


def _assemble(
    header: BatchHeader, attributes: int, base_ts: int, max_ts: int, count: int, payload: bytes
) -> bytes:
    """``header``'s batch with new records: offsets, producer fields and leader epoch kept."""
    return _assemble_batch(
        attributes,
        header.last_offset_delta,
        base_ts,
        max_ts,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        count,
        payload,
        header.base_offset,
        header.partition_leader_epoch,
    )


def _decompress(codec: int, data: memoryview) -> bytes | memoryview:
    """The records of a stored batch (bounded as every decode of stored batches is;
    CorruptPayload and PayloadTooLarge are ValueErrors)."""
    if codec == COMPRESSION_NONE:
        return data
    return codecs.decompress(codec, data, DECODE_MAX_UNCOMPRESSED_BYTES)


def _compress(codec: int, data: bytes) -> bytes:
    return codecs.compress(codec, data)
