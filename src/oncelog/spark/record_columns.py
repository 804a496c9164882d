"""The records of one fetched partition as Arrow columns, without a Python object per record.

A Fetch response holds a partition's record batches as the broker stores them. This module
picks the records a consumer returns from them and hands them to the native decoder
(`_record_scan.columns`), which copies keys, values, offsets and timestamps straight into
Arrow buffers. Which records a consumer returns follows Kafka's consumer
(`CompletedFetch.nextFetchedRecord`, Kafka 4.x):

- batches wholly below the fetch position are skipped, and records below it in the first
  batch (a fetch returns whole batches from the one holding the position);
- control batches (transaction markers) are never returned;
- under read_committed, the response lists the aborted transactions overlapping the fetch
  (producer id, first offset). Once a batch's last offset reaches an aborted
  transaction's first offset, that producer's transactional batches are skipped until its
  ABORT marker; records from offset `end` on are left for the next range.

The position after a batch is its last offset + 1, markers and skipped batches included,
so a range that ends on a marker ends when the marker is fetched.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pyarrow as pa

from oncelog.protocol import compression, record_batch
from oncelog.protocol.record_batch import HEADER_SIZE, BatchHeader

try:  # built by `pip install` from _record_scan.c; without it the reader uses librdkafka
    from oncelog.protocol import _record_scan  # type: ignore[attr-defined]
except ImportError:
    _record_scan = None
# None too when the extension is stale (built before it had `columns`)
_native_columns: Callable[[list[Any]], tuple[Any, ...]] | None = getattr(
    _record_scan, "columns", None
)

_MILLIS, _MICROS = pa.timestamp("ms", tz="UTC"), pa.timestamp("us", tz="UTC")
# the most a compressed batch may inflate to (Kafka's consumer has no bound; the broker's
# own decoder uses the same one)
_MAX_UNCOMPRESSED = record_batch.DECODE_MAX_UNCOMPRESSED_BYTES

# One batch for the native decoder: (records, count, base offset, base timestamp, max
# timestamp, LogAppendTime?, lowest offset wanted, offset past the highest wanted).
Part = tuple[bytes | memoryview, int, int, int, int, bool, int, int]


def native_columns_loaded() -> bool:
    return _native_columns is not None


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
    and below `end`. `aborted` is the response's aborted transactions as (first offset,
    producer id) under read_committed, None under read_uncommitted."""
    view = memoryview(records)
    pending = sorted(aborted) if aborted is not None else []
    heapq.heapify(pending)
    aborted_producers: set[int] = set()
    chosen = Selection(position=position)
    for at, header in record_batch.iter_stored_batches(view):
        if chosen.position >= end:
            break
        if header.next_offset <= chosen.position:
            continue
        if header.base_offset >= end:  # nothing of the range lies in between
            chosen.position = end
            break
        if aborted is not None and header.has_producer_id:
            while pending and pending[0][0] <= header.last_offset:
                aborted_producers.add(heapq.heappop(pending)[1])
            if header.is_control:
                if _is_abort_marker(view[at : at + header.size]):
                    aborted_producers.discard(header.producer_id)
            elif header.is_transactional and header.producer_id in aborted_producers:
                chosen.position = header.next_offset
                continue
        if not header.is_control:
            chosen.parts.append(_part(view, at, header, chosen.position, end))
        chosen.position = header.next_offset
    return chosen


def _is_abort_marker(batch: memoryview) -> bool:
    marker = record_batch.control_marker(batch)
    return marker is not None and not marker[0]


def _part(view: memoryview, at: int, header: BatchHeader, low: int, high: int) -> Part:
    body: bytes | memoryview = view[at + HEADER_SIZE : at + header.size]
    if header.compression != record_batch.COMPRESSION_NONE:
        body = compression.decompress(header.compression, body, _MAX_UNCOMPRESSED)
    return (
        body,
        header.record_count,
        header.base_offset,
        header.base_timestamp,
        header.max_timestamp,
        header.timestamp_type == 1,
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


def _binary(rows: int, validity: bytes, nulls: int, offsets: bytes, data: bytes) -> pa.Array:
    buffers = [pa.py_buffer(validity) if nulls else None, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.binary(), rows, buffers, nulls)


def to_record_batch(
    parts: list[Part], topic: str, partition: int, schema: pa.Schema
) -> pa.RecordBatch:
    """The source's rows of `parts`, decoded natively (ValueError on malformed records)."""
    assert _native_columns is not None, "checked by native_columns_loaded()"
    c = _Columns(*_native_columns(parts))
    n = c.rows
    return pa.RecordBatch.from_arrays(
        [
            _binary(n, c.key_validity, c.key_nulls, c.key_offsets, c.keys),
            _binary(n, c.value_validity, c.value_nulls, c.value_offsets, c.values),
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(c.offsets)]),
            # Arrow's cast refuses microseconds that overflow, as Spark's source does
            pa.Array.from_buffers(_MILLIS, n, [None, pa.py_buffer(c.timestamps)]).cast(_MICROS),
            pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(c.timestamp_types)]),
        ],
        schema=schema,
    )
