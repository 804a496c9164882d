"""Record batches for the fuzzer: damaged ones to send, and a strict checker to judge them.

:func:`damage` turns a valid v2 batch into one of the kinds a fuzzer or a buggy client
sends (issue 8 found each of these acknowledged): garbage with a correct CRC, a record count
above or below the records present, an overlong varint inside a record, a compressed batch
whose payload is garbage, a truncated batch, a wrong magic, a client control batch...

:func:`defect` is the judge, written here from the v2 format and Kafka's LogValidator rules
rather than taken from the broker: a batch it finds a defect in must never be acknowledged
nor stored. It is deliberately narrower than Kafka (it checks structure, not producer
state), so that anything it flags is malformed beyond doubt. Compressed payloads are checked
when cramjam (the broker's codec library) is installed; without it a compressed batch is
judged by its header alone.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from dataclasses import dataclass

import crc32c

HEADER_SIZE = 61
_LENGTH_OFFSET = 8
_MAGIC_OFFSET = 16
_CRC_OFFSET = 17
_ATTRIBUTES_OFFSET = 21
_LAST_OFFSET_DELTA_OFFSET = 23
_PRODUCER_ID_OFFSET = 43
_BASE_SEQUENCE_OFFSET = 53
_COUNT_OFFSET = 57
_CODEC_MASK = 0x07
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_HEADER = struct.Struct(">qiibIhiqqqhii")


@dataclass(frozen=True, slots=True)
class Damaged:
    kind: str
    data: bytes


# -- the judge --------------------------------------------------------------------------------


def defect(records: bytes, *, from_client: bool = True) -> str | None:
    """Why Kafka would refuse this produce `records` field, or None if it is well formed.

    With `from_client` False the batch is judged as stored: control batches are the
    broker's own transaction markers (WriteTxnMarkers writes them) and are allowed.
    """
    if len(records) < HEADER_SIZE:
        return f"{len(records)} bytes: shorter than a batch header"
    (
        _base_offset,
        length,
        _epoch,
        magic,
        crc,
        attributes,
        last_offset_delta,
        _base_ts,
        _max_ts,
        producer_id,
        _producer_epoch,
        base_sequence,
        count,
    ) = _HEADER.unpack_from(records)
    if magic != 2:
        return f"magic {magic}"
    if length != len(records) - 12:
        return f"batch length {length} for {len(records) - 12} bytes (one batch per partition)"
    if crc32c.crc32c(records[_ATTRIBUTES_OFFSET:]) != crc:
        return "CRC mismatch"
    if attributes & _CONTROL and from_client:
        return "a control batch from a client"
    if count <= 0 or last_offset_delta + 1 != count:
        return f"count {count} with last offset delta {last_offset_delta}"
    # A marker carries whatever producer the WriteTxnMarkers request named, and no sequence.
    if producer_id >= 0 and base_sequence < 0 and not attributes & _CONTROL:
        return f"producer {producer_id} with sequence {base_sequence}"
    if attributes & _TRANSACTIONAL and producer_id < 0 and not attributes & _CONTROL:
        return "transactional without a producer id"
    codec = attributes & _CODEC_MASK
    body = records[HEADER_SIZE:]
    if codec:
        if codec > 4:
            return f"compression codec {codec}"
        inflated = _decompress(codec, body)
        if inflated is None:
            return None  # cramjam not installed: the header is all we can judge
        if isinstance(inflated, str):
            return inflated
        body = inflated
    return _records_defect(body, count)


def _records_defect(body: bytes, count: int) -> str | None:
    reader = _Reader(body)
    try:
        for index in range(count):
            length = reader.varint()
            start = reader.pos
            if length < 0 or start + length > len(body):
                return f"record {index}: length {length} past the end"
            reader.take(1)  # attributes
            reader.varlong()  # timestamp delta
            reader.varint()  # offset delta
            for _ in range(2):  # key, value
                size = reader.varint()
                if size < -1:
                    return f"record {index}: key or value length {size}"
                reader.take(max(size, 0))
            headers = reader.varint()
            if headers < 0:
                return f"record {index}: {headers} headers"
            for _ in range(headers):
                key_size = reader.varint()
                if key_size < 0:
                    return f"record {index}: header key length {key_size}"
                reader.take(key_size)
                value_size = reader.varint()
                if value_size < -1:
                    return f"record {index}: header value length {value_size}"
                reader.take(max(value_size, 0))
            if reader.pos != start + length:
                return f"record {index}: {reader.pos - start} bytes for a length of {length}"
    except _Short as exc:
        return str(exc)
    if reader.pos != len(body):
        return f"{len(body) - reader.pos} bytes after the {count} records the header counts"
    return None


def values(batch: bytes) -> list[bytes | None]:
    """The record values of an uncompressed batch the judge accepts, in order."""
    problem = defect(batch)
    if problem is not None or batch[_ATTRIBUTES_OFFSET + 1] & _CODEC_MASK:
        raise ValueError(f"cannot read values: {problem or 'compressed'}")
    (count,) = struct.unpack_from(">i", batch, _COUNT_OFFSET)
    reader = _Reader(batch[HEADER_SIZE:])
    out: list[bytes | None] = []
    for _ in range(count):
        reader.varint()  # length
        reader.take(1)  # attributes
        reader.varlong()  # timestamp delta
        reader.varint()  # offset delta
        key_size = reader.varint()
        reader.take(max(key_size, 0))
        value_size = reader.varint()
        start = reader.pos
        reader.take(max(value_size, 0))
        out.append(None if value_size < 0 else reader.data[start : reader.pos])
        for _ in range(reader.varint()):  # headers
            reader.take(reader.varint())
            reader.take(max(reader.varint(), 0))
    return out


class _Short(Exception):
    pass


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, size: int) -> None:
        if self.pos + size > len(self.data):
            raise _Short(f"record data cut short at byte {self.pos}")
        self.pos += size

    def varint(self) -> int:
        return self._zigzag(5)

    def varlong(self) -> int:
        return self._zigzag(10)

    def _zigzag(self, max_bytes: int) -> int:
        value = 0
        for shift_index in range(max_bytes):
            if self.pos >= len(self.data):
                raise _Short(f"varint cut short at byte {self.pos}")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << (7 * shift_index)
            if not byte & 0x80:
                return (value >> 1) ^ -(value & 1)
        raise _Short(f"a varint longer than {max_bytes} bytes")


def _decompress(codec: int, body: bytes) -> bytes | str | None:
    """The inflated records, a defect, or None when cramjam is not installed."""
    try:
        import cramjam
    except ImportError:
        return None
    try:
        if codec == 1:
            return bytes(cramjam.gzip.decompress(body))
        if codec == 2:
            return bytes(_snappy_java(cramjam, body))
        if codec == 3:
            return bytes(cramjam.lz4.decompress(body))  # the LZ4 frame format
        return bytes(cramjam.zstd.decompress(body))
    except Exception as exc:  # cramjam raises its own DecompressionError, ValueError...
        return f"compressed payload does not inflate: {exc}"


def _snappy_java(cramjam: object, body: bytes) -> bytes:
    """Kafka's snappy is xerial's framing (a magic header, then sized blocks) or raw."""
    snappy = cramjam.snappy  # type: ignore[attr-defined]
    if not body.startswith(b"\x82SNAPPY\x00"):
        return bytes(snappy.decompress_raw(body))
    pos, out = 16, bytearray()
    while pos < len(body):
        (size,) = struct.unpack_from(">i", body, pos)
        out += snappy.decompress_raw(body[pos + 4 : pos + 4 + size])
        pos += 4 + size
    return bytes(out)


# -- damage -----------------------------------------------------------------------------------


def _with_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, _CRC_OFFSET, crc32c.crc32c(bytes(batch[_ATTRIBUTES_OFFSET:])))
    return bytes(batch)


def _relength(batch: bytearray) -> bytearray:
    struct.pack_into(">i", batch, _LENGTH_OFFSET, len(batch) - 12)
    return batch


def _garbage_body(batch: bytes, rng: random.Random) -> bytes:
    out = bytearray(batch[:HEADER_SIZE]) + rng.randbytes(max(len(batch) - HEADER_SIZE, 8))
    return _with_crc(_relength(out))


def _flipped_body(batch: bytes, rng: random.Random) -> bytes:
    out = bytearray(batch)
    for _ in range(rng.randint(1, 3)):
        out[rng.randrange(HEADER_SIZE, len(out))] ^= 1 << rng.randrange(8)
    return _with_crc(out)


def _bad_crc(batch: bytes, rng: random.Random) -> bytes:
    out = bytearray(batch)
    out[rng.randrange(HEADER_SIZE, len(out))] ^= 0xFF
    return bytes(out)


def _count(batch: bytes, rng: random.Random) -> bytes:
    out = bytearray(batch)
    (count,) = struct.unpack_from(">i", out, _COUNT_OFFSET)
    new = rng.choice((count + 1, count + 1000, 2**31 - 1, max(count - 1, 0), 0, -1))
    struct.pack_into(">i", out, _COUNT_OFFSET, new)
    if rng.random() < 0.7:  # usually consistent with the count, so only the records disagree
        struct.pack_into(">i", out, _LAST_OFFSET_DELTA_OFFSET, new - 1)
    return _with_crc(out)


def _last_offset_delta(batch: bytes, rng: random.Random) -> bytes:
    out = bytearray(batch)
    struct.pack_into(">i", out, _LAST_OFFSET_DELTA_OFFSET, rng.choice((-1, 2**31 - 1, 7)))
    return _with_crc(out)


def _overlong_varint(batch: bytes, rng: random.Random) -> bytes:
    """The first record's key length written as a six-byte varint."""
    out = bytearray(batch[:HEADER_SIZE])
    record = b"\x00" + b"\x00" + b"\x00" + b"\xff\xff\xff\xff\xff\x01" + b"\x02v" + b"\x00"
    out += bytes([len(record) << 1]) + record
    struct.pack_into(">i", out, _COUNT_OFFSET, 1)
    struct.pack_into(">i", out, _LAST_OFFSET_DELTA_OFFSET, 0)
    return _with_crc(_relength(out))


def _compressed_garbage(batch: bytes, rng: random.Random) -> bytes:
    out = bytearray(batch[:HEADER_SIZE]) + rng.randbytes(rng.choice((1, 16, 200)))
    (attributes,) = struct.unpack_from(">h", out, _ATTRIBUTES_OFFSET)
    attributes = (attributes & ~_CODEC_MASK) | rng.randint(1, 4)
    struct.pack_into(">h", out, _ATTRIBUTES_OFFSET, attributes)
    return _with_crc(_relength(out))


def _truncated(batch: bytes, rng: random.Random) -> bytes:
    return batch[: rng.randrange(0, len(batch))]


def _magic(batch: bytes, rng: random.Random) -> bytes:
    out = bytearray(batch)
    out[_MAGIC_OFFSET] = rng.choice((0, 1, 3, 0xFF))
    return bytes(out)


def _control(batch: bytes, rng: random.Random) -> bytes:
    out = bytearray(batch)
    (attributes,) = struct.unpack_from(">h", out, _ATTRIBUTES_OFFSET)
    struct.pack_into(">h", out, _ATTRIBUTES_OFFSET, attributes | _CONTROL | _TRANSACTIONAL)
    return _with_crc(out)


def _producer_fields(batch: bytes, rng: random.Random) -> bytes:
    """Producer id, epoch and sequence of every sort: some coherent, some not."""
    out = bytearray(batch)
    producer_id = rng.choice((-1, 0, 2**62, 2**63 - 1))
    epoch = rng.choice((-1, 0, 32767))
    sequence = rng.choice((-1, 0, 2**31 - 2, 2**31 - 1))
    struct.pack_into(">qhi", out, _PRODUCER_ID_OFFSET, producer_id, epoch, sequence)
    return _with_crc(out)


def _two_batches(batch: bytes, rng: random.Random) -> bytes:
    return batch + batch


def _length_field(batch: bytes, rng: random.Random) -> bytes:
    out = bytearray(batch)
    struct.pack_into(">i", out, _LENGTH_OFFSET, rng.choice((0, 48, len(batch), 2**31 - 1, -1)))
    return bytes(out)


DAMAGES: dict[str, Callable[[bytes, random.Random], bytes]] = {
    "garbage-body": _garbage_body,
    "flipped-body": _flipped_body,
    "bad-crc": _bad_crc,
    "count": _count,
    "last-offset-delta": _last_offset_delta,
    "overlong-varint": _overlong_varint,
    "compressed-garbage": _compressed_garbage,
    "truncated": _truncated,
    "magic": _magic,
    "control": _control,
    "producer-fields": _producer_fields,
    "two-batches": _two_batches,
    "length-field": _length_field,
    "empty": lambda batch, rng: b"",
}


def damage(batch: bytes, rng: random.Random) -> Damaged:
    kind = rng.choice(sorted(DAMAGES))
    return Damaged(kind, DAMAGES[kind](batch, rng))
