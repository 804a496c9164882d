"""The records of one fetched partition as Arrow columns, without a Python object per record.

A Fetch answer holds a partition's record batches as the broker stores them. This module
picks the records a consumer returns from them and hands them to the native decoder
(`oncelog.spark._columns`), which copies keys, values, offsets and timestamps straight
into Arrow buffers. Which records a consumer returns follows Kafka's consumer
(`CompletedFetch.nextFetchedRecord`, Kafka 4.x):

- batches wholly below the fetch position are skipped, and records below it in the first
  batch (a fetch returns whole batches from the one holding the position);
- control batches (transaction markers) are never returned;
- under read_committed, the answer lists the aborted transactions overlapping the fetch
  (first offset, producer id). Once a batch's last offset reaches an aborted
  transaction's first offset, that producer's transactional batches are skipped until its
  ABORT marker;
- records from offset `end` on are left for the next range.

The position after a batch is its last offset + 1, markers and skipped batches included,
so a range that ends on a marker ends when the marker is fetched. Only whole v2 batches
are read: a torn last batch (the answer's size limit) is fetched again next time.
Batches the log cleaner rewrote are read too: a record's offset is its batch's base plus
its own offset delta (compaction leaves gaps), and the position after a batch is its last
offset + 1 even when its last records were removed (KAFKA-5443).

The batch header's layout and the codecs are `oncelog.protocol.record_batch`'s and
`oncelog.protocol.compression`'s, which import nothing of kio (Spark's Python workers are
kept free of it: tests/spark/test_spark_worker_imports.py, tests/protocol/test_kio_free.py).
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pyarrow as pa

from oncelog.protocol.compression import decompress
from oncelog.protocol.record_batch import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    DECODE_MAX_UNCOMPRESSED_BYTES,
    HEADER_FIELDS,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
)
from oncelog.spark.schema import KAFKA_TIMESTAMP, SPARK_TIMESTAMP

try:  # built by `pip install` from _columns.c; without it the reader uses librdkafka
    from oncelog.spark import _columns  # type: ignore[attr-defined,unused-ignore]
except ImportError:
    _columns = None
# Bumped with every change of the decoder's arguments, with _columns.c's own: a stale
# build (another ABI) is not used, the reader then reads through librdkafka.
COLUMNS_ABI = 2
_native_columns: Callable[[list[Any]], tuple[Any, ...]] | None = (
    _columns.columns if getattr(_columns, "COLUMNS_ABI", None) == COLUMNS_ABI else None
)

_CONTROL_KEY = struct.Struct(">hh")  # version, type
_ABORT = 0

# One batch for the native decoder: (records, count, base offset, last offset delta, base
# timestamp, max timestamp, LogAppendTime?, lowest offset wanted, offset past the highest
# wanted). A record's offset is the base plus its own delta: the log cleaner leaves gaps.
Part = tuple[bytes | memoryview, int, int, int, int, int, bool, int, int]


def native_columns_loaded() -> bool:
    return _native_columns is not None


class _Batch(NamedTuple):
    """The fields of a batch header this module uses, and where its records are."""

    base_offset: int
    next_offset: int
    attributes: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    record_count: int
    records: memoryview


def _batches(view: memoryview) -> list[_Batch]:
    """The whole v2 batches at the start of `view`: up to a torn or non-v2 one."""
    batches, at, size = [], 0, len(view)
    while size - at >= HEADER_SIZE:
        (base, length, _epoch, magic, _crc, attributes, last_delta, base_ts, max_ts, pid,
         _producer_epoch, _sequence, count) = HEADER_FIELDS.unpack_from(view, at)  # fmt: skip
        end = at + LOG_OVERHEAD + length
        if magic != MAGIC_V2 or length < MIN_BATCH_LENGTH or end > size:
            break
        records = view[at + HEADER_SIZE : end]
        batches.append(
            _Batch(base, base + last_delta + 1, attributes, base_ts, max_ts, pid, count, records)
        )
        at = end
    return batches


@dataclass
class Selection:
    """What one fetched partition gave: the parts to decode and where the next fetch
    starts. `position` is unchanged when nothing could be read (no whole v2 batch)."""

    parts: list[Part] = field(default_factory=list)
    position: int = 0


def select(
    records: bytes | memoryview,
    position: int,
    end: int,
    aborted: Sequence[tuple[int, int]] | None,
) -> Selection:
    """The records of `records` (one partition's record batches) at or after `position`
    and below `end`. `aborted` is the answer's aborted transactions as (first offset,
    producer id) under read_committed, None under read_uncommitted."""
    pending = sorted(aborted) if aborted is not None else []
    aborted_producers: set[int] = set()
    chosen = Selection(position=position)
    for batch in _batches(memoryview(records)):
        if chosen.position >= end:
            break
        if batch.next_offset <= chosen.position:
            continue
        if batch.base_offset >= end:  # nothing of the range lies in between
            chosen.position = end
            break
        control = bool(batch.attributes & ATTR_CONTROL)
        if aborted is not None and batch.producer_id >= 0:
            while pending and pending[0][0] <= batch.next_offset - 1:
                aborted_producers.add(heapq.heappop(pending)[1])
            if control:
                if _is_abort_marker(batch):
                    aborted_producers.discard(batch.producer_id)
            elif batch.attributes & ATTR_TRANSACTIONAL and batch.producer_id in aborted_producers:
                chosen.position = batch.next_offset
                continue
        if not control:
            chosen.parts.append(_part(batch, chosen.position, end))
        chosen.position = batch.next_offset
    return chosen


def _is_abort_marker(batch: _Batch) -> bool:
    """A transaction marker's first record's key is a version and a type (0: ABORT)."""
    key = _Columns(*_decode([_part(batch, batch.base_offset, batch.base_offset + 1)])).keys
    return len(key) >= _CONTROL_KEY.size and _CONTROL_KEY.unpack_from(key)[1] == _ABORT


def _part(batch: _Batch, low: int, high: int) -> Part:
    records: bytes | memoryview = batch.records
    codec = batch.attributes & ATTR_COMPRESSION_MASK
    if codec:
        records = decompress(codec, records, DECODE_MAX_UNCOMPRESSED_BYTES)
    return (
        records,
        batch.record_count,
        batch.base_offset,
        batch.next_offset - batch.base_offset - 1,
        batch.base_timestamp,
        batch.max_timestamp,
        bool(batch.attributes & ATTR_TIMESTAMP_TYPE),
        low,
        high,
    )


class _Columns(NamedTuple):
    """The native decoder's answer: Arrow buffers of `rows` records."""

    rows: int
    offsets: bytes  # int64 each
    timestamps: bytes  # int64 milliseconds each
    timestamp_types: bytes  # int32 each: 0 CreateTime, 1 LogAppendTime (Spark's)
    key_validity: bytes  # a bit per record, set when the key is not null
    key_nulls: int
    key_offsets: bytes  # int32, rows + 1 of them
    keys: bytes
    value_validity: bytes
    value_nulls: int
    value_offsets: bytes
    values: bytes


def _decode(parts: list[Part]) -> tuple[Any, ...]:
    assert _native_columns is not None, "checked by native_columns_loaded()"
    return _native_columns(parts)


def _binary(rows: int, validity: bytes, nulls: int, offsets: bytes, data: bytes) -> pa.Array:
    buffers = [pa.py_buffer(validity) if nulls else None, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.binary(), rows, buffers, nulls)


def arrow_batch(parts: list[Part], topic: str, partition: int, schema: pa.Schema) -> pa.RecordBatch:
    """The source's rows of `parts`, decoded natively (ValueError on malformed records)."""
    c = _Columns(*_decode(parts))
    n = c.rows
    return pa.RecordBatch.from_arrays(
        [
            _binary(n, c.key_validity, c.key_nulls, c.key_offsets, c.keys),
            _binary(n, c.value_validity, c.value_nulls, c.value_offsets, c.values),
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(c.offsets)]),
            # Arrow's cast refuses microseconds that overflow, as Spark's source does
            pa.Array.from_buffers(KAFKA_TIMESTAMP, n, [None, pa.py_buffer(c.timestamps)]).cast(
                SPARK_TIMESTAMP
            ),
            pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(c.timestamp_types)]),
        ],
        schema=schema,
    )
