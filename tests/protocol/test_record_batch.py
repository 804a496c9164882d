"""Record batch v2: header, CRC, produce validation, offsets, builder and decoder."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    HEADER_SIZE,
    InvalidRecordBatch,
    Record,
    assign_offsets,
    build_batch,
    build_control_batch,
    crc_is_valid,
    decode_records,
    describe_control,
    iter_stored_batches,
    parse_header,
    split_batches,
)


def batch(n: int = 3, **kw: object) -> bytes:
    return build_batch([Record(b"k%d" % i, b"v%d" % i) for i in range(n)], timestamp_ms=1000, **kw)  # type: ignore[arg-type]


def patched(data: bytes, fmt: str, at: int, value: int, *, fix_crc: bool = True) -> bytes:
    """``data`` with one field overwritten; the CRC recomputed unless told not to."""
    import crc32c

    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    if fix_crc:
        struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def refused(data: bytes, **kw: object) -> ErrorCode:
    with pytest.raises(InvalidRecordBatch) as info:
        split_batches(data, **kw)  # type: ignore[arg-type]
    return info.value.code


def test_header_round_trip() -> None:
    data = batch(5, producer_id=42, producer_epoch=3, base_sequence=7, transactional=True)
    h = parse_header(data)
    assert (h.magic, h.batch_length, h.size) == (2, len(data) - 12, len(data))
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (42, 3, 7)
    assert h.record_count == 5 and h.last_offset_delta == 4 and h.last_sequence == 11
    assert h.is_transactional and not h.is_control and h.has_producer_id
    assert h.compression == 0 and h.timestamp_type == 0
    assert parse_header(memoryview(b"xx" + data), 2) == h


def test_last_sequence_wraps() -> None:
    h = parse_header(batch(3, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2))
    assert h.last_sequence == 0
    assert parse_header(batch(3)).last_sequence == -1


def test_crc_detects_any_flipped_byte_after_the_crc() -> None:
    data = batch()
    assert crc_is_valid(data)
    for i in range(21, len(data)):
        flipped = bytearray(data)
        flipped[i] ^= 0x01
        assert not crc_is_valid(flipped)


def test_split_accepts_a_valid_batch() -> None:
    data = batch(producer_id=1, producer_epoch=0, base_sequence=0)
    [(header, view)] = split_batches(data)
    assert bytes(view) == data and header.record_count == 3


def test_split_refusals() -> None:
    data = batch()
    assert refused(b"") == ErrorCode.invalid_record
    assert refused(data + data) == ErrorCode.invalid_record
    assert len(split_batches(data + data, one_batch=False)) == 2
    assert refused(data[:-1]) == ErrorCode.corrupt_message  # torn
    assert refused(data + data[:5]) == ErrorCode.corrupt_message  # trailing partial
    assert refused(patched(data, ">b", 16, 1)) == ErrorCode.invalid_record  # magic 1
    assert (
        refused(patched(data, ">i", 8, 40, fix_crc=False)[: 12 + 40]) == ErrorCode.corrupt_message
    )
    flipped = bytearray(data)
    flipped[-1] ^= 0xFF
    assert refused(bytes(flipped)) == ErrorCode.corrupt_message
    assert refused(data, max_message_bytes=len(data) - 1) == ErrorCode.message_too_large
    assert refused(patched(data, ">h", 21, 5)) == ErrorCode.unsupported_compression_type
    assert refused(patched(data, ">i", 57, 4)) == ErrorCode.invalid_record  # count != delta+1
    assert refused(patched(patched(data, ">i", 57, 0), ">i", 23, -1)) == ErrorCode.invalid_record
    assert refused(patched(data, ">h", 21, ATTR_CONTROL)) == ErrorCode.invalid_record
    no_seq = batch(producer_id=5, producer_epoch=0, base_sequence=-1)
    assert refused(no_seq) == ErrorCode.invalid_record


def test_old_magic_message_set_is_invalid_record() -> None:
    # a v1 message: offset, size, crc, magic=1, attributes, timestamp, key -1, value -1
    message = struct.pack(">IbbqII", 0, 1, 0, 0, 0xFFFFFFFF, 0xFFFFFFFF)
    data = struct.pack(">qi", 0, len(message)) + message
    assert refused(data) == ErrorCode.invalid_record


def test_control_batches_are_refused_from_clients() -> None:
    marker = build_control_batch(
        True, producer_id=1, producer_epoch=0, coordinator_epoch=0, base_offset=0, timestamp_ms=1
    )
    assert refused(marker) == ErrorCode.invalid_record


def test_assign_offsets_keeps_crc() -> None:
    data = batch()
    out = assign_offsets(memoryview(data), 1234, leader_epoch=7)
    h = parse_header(out)
    assert (h.base_offset, h.partition_leader_epoch, h.crc) == (1234, 7, parse_header(data).crc)
    assert crc_is_valid(out) and out[HEADER_SIZE:] == data[HEADER_SIZE:]


def test_assign_offsets_log_append_time_recomputes_crc() -> None:
    out = assign_offsets(batch(), 10, log_append_time=99_999)
    h = parse_header(out)
    assert h.max_timestamp == 99_999 and h.attributes & ATTR_TIMESTAMP_TYPE
    assert crc_is_valid(out)
    assert {r.timestamp for r in decode_records(out)} == {99_999}
    assert [r.offset for r in decode_records(out)] == [10, 11, 12]


def test_iter_stored_batches_stops_at_torn_tail() -> None:
    a, b = batch(1), batch(2)
    stored = a + b + b[:30]
    assert [(p, h.record_count) for p, h in iter_stored_batches(stored)] == [(0, 1), (len(a), 2)]


def test_control_batch_markers() -> None:
    for commit, name in ((True, "COMMIT"), (False, "ABORT")):
        data = build_control_batch(
            commit,
            producer_id=9,
            producer_epoch=2,
            coordinator_epoch=5,
            base_offset=40,
            timestamp_ms=77,
        )
        h = parse_header(data)
        assert h.is_control and h.is_transactional and crc_is_valid(data)
        assert describe_control(data) == name
        [record] = decode_records(data)
        assert record.value == struct.pack(">hi", 0, 5)
        assert DefaultRecordBatch(data).is_control_batch
    assert describe_control(batch()) is None


def test_gzip_batch_decodes() -> None:
    import gzip

    import crc32c

    plain = batch(4)
    body = gzip.compress(plain[HEADER_SIZE:])
    out = bytearray(plain[:HEADER_SIZE] + body)
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">h", out, 21, 1)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    split_batches(bytes(out))
    assert [r.value for r in decode_records(out)] == [b"v0", b"v1", b"v2", b"v3"]


headers_st = st.lists(
    st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))), max_size=3
).map(tuple)
record_st = st.builds(
    Record,
    key=st.one_of(st.none(), st.binary(max_size=40)),
    value=st.one_of(st.none(), st.binary(max_size=300)),
    headers=headers_st,
    timestamp_ms=st.one_of(st.none(), st.integers(0, 2**41)),
)


@settings(max_examples=150, deadline=None)
@given(
    records=st.lists(record_st, min_size=1, max_size=8),
    base_offset=st.integers(0, 2**40),
    now=st.integers(0, 2**41),
)
def test_build_decode_round_trip_against_kafka_python(
    records: list[Record], base_offset: int, now: int
) -> None:
    data = build_batch(records, base_offset=base_offset, timestamp_ms=now)
    [(header, _)] = split_batches(data)
    stamps = [r.timestamp_ms if r.timestamp_ms is not None else now for r in records]
    assert header.max_timestamp == max(stamps)
    ours = decode_records(data)
    theirs = list(DefaultRecordBatch(data))
    assert DefaultRecordBatch(data).validate_crc()
    for i, (r, mine, ref) in enumerate(zip(records, ours, theirs, strict=True)):
        assert (mine.offset, mine.timestamp) == (base_offset + i, stamps[i])
        assert (mine.key, mine.value, mine.headers) == (r.key, r.value, r.headers)
        assert (ref.offset, ref.timestamp, ref.key, ref.value) == (
            mine.offset,
            mine.timestamp,
            mine.key,
            mine.value,
        )
        assert tuple(ref.headers) == mine.headers


def _kafka_python_batch(
    records: list[Record], now: int, producer_id: int, epoch: int, sequence: int, txn: bool
) -> bytes:
    """kafka-python's builder for the same records, offsets from 0 (an independent
    encoder: a read-back alone would accept a varint written in more bytes than needed)."""
    builder = DefaultRecordBatchBuilder(2, 0, txn, producer_id, epoch, sequence, 1 << 30)
    for i, record in enumerate(records):
        stamp = record.timestamp_ms if record.timestamp_ms is not None else now
        builder.append(i, stamp, record.key, record.value, list(record.headers))
    return bytes(builder.build())


def _without_leader_epoch(batch: bytes) -> bytes:
    """Bytes 12-15, the partition leader epoch: ours -1 until a log assigns it, kafka-python's
    0 (the CRC does not cover it)."""
    return batch[:12] + batch[16:]


@settings(max_examples=300, deadline=None)
@given(
    records=st.lists(record_st, min_size=1, max_size=6),
    now=st.integers(0, 2**41),
    producer=st.tuples(st.integers(-1, 2**40), st.integers(-1, 32767), st.integers(-1, 2**31 - 1)),
    txn=st.booleans(),
)
def test_build_batch_writes_kafka_pythons_bytes(
    records: list[Record], now: int, producer: tuple[int, int, int], txn: bool
) -> None:
    """Every byte but the leader epoch is kafka-python's: the first record without headers
    (record_batch._encode_record's short path) and varints from the table included."""
    producer_id, epoch, sequence = producer
    ours = build_batch(
        records,
        timestamp_ms=now,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        transactional=txn,
    )
    theirs = _kafka_python_batch(records, now, producer_id, epoch, sequence, txn)
    assert _without_leader_epoch(ours) == _without_leader_epoch(theirs)


@pytest.mark.parametrize("edge", [1022, 1023, 1024, 1025, 70_000])
def test_lengths_and_deltas_either_side_of_the_varint_table(edge: int) -> None:
    """Small varints come from a table (record_batch._SMALL_VARINTS), larger ones are
    computed: both sides of its bounds, positive and negative, as kafka-python writes
    them; the first record without headers, so the short path sees large sizes too."""
    now = 10**12
    records = [
        Record(b"k" * edge, b"v" * (edge - 1), (), now),
        Record(None, b"", (("h" * edge, b"x" * edge),), now - edge),  # delta -edge
        Record(b"", None, (), now + edge),  # delta +edge
    ]
    ours = build_batch(records, timestamp_ms=now)
    theirs = _kafka_python_batch(records, now, -1, -1, -1, False)
    assert _without_leader_epoch(ours) == _without_leader_epoch(theirs)
    assert [(r.key, r.value, r.headers) for r in decode_records(ours)] == [
        (r.key, r.value, r.headers) for r in records
    ]
