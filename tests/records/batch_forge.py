"""Hand-built record batches, right or wrong in exactly one way.

Written from Kafka's format description (DefaultRecordBatch / DefaultRecord), not with
oncelog's builder, so a test of the validator never checks oncelog against itself. The
CRC is always right (unless a test breaks it itself): every batch here gets past the
header checks and reaches the record validation.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

import cramjam
import crc32c

from oncelog.protocol.errors import ErrorCode

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_HEADER = struct.Struct(">qiibIhiqqqhii")
_XERIAL = struct.pack(">8sii", b"\x82SNAPPY\x00", 1, 1)


def varint(value: int) -> bytes:
    """Zigzag varint, shortest form."""
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def padded_varint(value: int, size: int) -> bytes:
    """Zigzag varint stretched to ``size`` bytes with continuation bytes (overlong when
    ``size`` passes the type's limit: 5 bytes for ints, 10 for longs)."""
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    for _ in range(size - 1):
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z & 0x7F)
    return bytes(out)


def field_bytes(data: bytes | None) -> bytes:
    return varint(-1) if data is None else varint(len(data)) + data


@dataclass
class RecordSpec:
    """One record; ``raw_fields`` replaces everything after the length when set."""

    key: bytes | None = b"k"
    value: bytes | None = b"v"
    timestamp_delta: int = 0
    offset_delta: int | None = None  # None: its index
    headers: Sequence[tuple[bytes | None, bytes | None]] = ()
    raw_fields: bytes | None = None
    length_adjust: int = 0

    def encode(self, index: int) -> bytes:
        if self.raw_fields is not None:
            body = self.raw_fields
        else:
            delta = index if self.offset_delta is None else self.offset_delta
            body = (
                b"\x00"
                + varint(self.timestamp_delta)
                + varint(delta)
                + field_bytes(self.key)
                + field_bytes(self.value)
                + varint(len(self.headers))
                + b"".join(
                    (varint(-1) if k is None else field_bytes(k)) + field_bytes(v)
                    for k, v in self.headers
                )
            )
        return varint(len(body) + self.length_adjust) + body


def records_body(specs: Sequence[RecordSpec]) -> bytes:
    return b"".join(spec.encode(i) for i, spec in enumerate(specs))


def compress(codec: str, data: bytes, *, snappy_framing: str = "xerial") -> bytes:
    if codec == "none":
        return data
    if codec == "gzip":
        return bytes(cramjam.gzip.compress(data))
    if codec == "snappy":
        raw = bytes(cramjam.snappy.compress_raw(data))
        if snappy_framing == "raw":
            return raw
        return _XERIAL + struct.pack(">i", len(raw)) + raw
    if codec == "lz4":
        return bytes(cramjam.lz4.compress(data))
    if codec == "zstd":
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(codec)


@dataclass
class BatchSpec:
    """Header fields of a forged batch; None fields are derived from the records."""

    records: Sequence[RecordSpec] = field(default_factory=lambda: [RecordSpec()])
    codec: str = "none"
    base_timestamp: int = 1_700_000_000_000
    max_timestamp: int | None = None
    max_timestamp_skew: int = 0  # added to the derived max timestamp
    record_count: int | None = None
    last_offset_delta: int | None = None
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    attributes_extra: int = 0
    payload: bytes | None = None  # replaces the (compressed) records entirely
    trailing: bytes = b""  # appended to the uncompressed records before compression

    def build(self) -> bytes:
        count = len(self.records) if self.record_count is None else self.record_count
        last_delta = count - 1 if self.last_offset_delta is None else self.last_offset_delta
        deltas = [r.timestamp_delta for r in self.records] or [0]
        max_ts = self.max_timestamp
        if max_ts is None:
            max_ts = self.base_timestamp + max(deltas) + self.max_timestamp_skew
        payload = self.payload
        if payload is None:
            payload = compress(self.codec, records_body(self.records) + self.trailing)
        attributes = CODECS[self.codec] | self.attributes_extra
        return forge(
            payload,
            attributes=attributes,
            last_offset_delta=last_delta,
            base_timestamp=self.base_timestamp,
            max_timestamp=max_ts,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=self.base_sequence,
            record_count=count,
        )


def forge(
    payload: bytes,
    *,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    record_count: int,
) -> bytes:
    out = bytearray(_HEADER.size) + payload
    _HEADER.pack_into(
        out,
        0,
        0,
        len(out) - 12,
        -1,
        2,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    )
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def bomb(codec: str, inflated_bytes: int) -> bytes:
    """A batch whose payload is small but inflates to ``inflated_bytes`` of zeros."""
    zeros = b"\x00" * inflated_bytes
    return BatchSpec(codec=codec, payload=compress(codec, zeros)).build()


def _raw(fields: bytes) -> RecordSpec:
    return RecordSpec(raw_fields=fields)


def malformed_kinds() -> dict[str, tuple[BatchSpec, ErrorCode]]:
    """Each kind of malformed records the fuzzer got acknowledged (issue 8) and a few
    more, with the error Kafka answers; fresh specs (callers set codec and timestamp)."""
    return {
        "record count above records present": (
            BatchSpec(records=[RecordSpec(value=b"v" * 30)] * 3, record_count=5),
            ErrorCode.invalid_record,
        ),
        "record count 2**31-1": (BatchSpec(record_count=2**31 - 1), ErrorCode.invalid_record),
        "record count below records present": (
            BatchSpec(records=[RecordSpec()] * 3, record_count=2),
            ErrorCode.invalid_record,
        ),
        "overlong int varint (offset delta, 6 bytes)": (
            BatchSpec(records=[_raw(b"\x00" + varint(0) + padded_varint(0, 6) + b"\x01\x01\x00")]),
            ErrorCode.invalid_record,
        ),
        "overlong long varint (timestamp delta, 11 bytes)": (
            BatchSpec(records=[_raw(b"\x00" + padded_varint(0, 11) + varint(0) + b"\x01\x01\x00")]),
            ErrorCode.invalid_record,
        ),
        "record length past the batch": (
            BatchSpec(records=[RecordSpec(length_adjust=40)]),
            ErrorCode.invalid_record,
        ),
        "bytes after the last record": (BatchSpec(trailing=b"\x00\x00"), ErrorCode.invalid_record),
        "offset deltas not consecutive": (
            BatchSpec(records=[RecordSpec(), RecordSpec(offset_delta=5)]),
            ErrorCode.invalid_record,
        ),
        "null header key": (
            BatchSpec(records=[RecordSpec(headers=[(None, b"x")])]),
            ErrorCode.invalid_record,
        ),
        "maxTimestamp not the records' largest": (
            BatchSpec(records=[RecordSpec(timestamp_delta=7)], max_timestamp_skew=-8),
            ErrorCode.invalid_record,
        ),
        "garbage records": (
            BatchSpec(payload=None, records=[_raw(bytes(range(200, 256)) * 3)]),
            ErrorCode.invalid_record,
        ),
    }
