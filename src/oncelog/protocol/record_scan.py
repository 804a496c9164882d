"""One pass over the records of a v2 batch, checking their structure (the part of Kafka's
``DefaultRecord.readFrom`` and ``DefaultRecordBatch`` iterators that can fail).

Each record is::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint | key | valueLength varint | value |
    headerCount varint | (headerKeyLength varint | key | headerValueLength varint | value)*

Varints are zigzag; an int varint has at most 5 bytes and its value must fit in 32 bits, a
long varint at most 10 bytes and 64 bits. The scan reads exactly ``count`` records, each
exactly its declared length, and the records must end exactly where the bytes end. Record
``i`` must carry offset delta ``i``. The smallest possible record takes 7 bytes, so a count
the bytes cannot hold is refused before reading anything (a header claiming 2**31-1
records costs nothing).

The scan builds no object per record: the produce path runs it on every batch. The C
extension ``_record_scan`` (built by ``pip install``, from ``_record_scan.c``) does the
same several hundred times faster (13 us against 10 ms for 1,000 records of 1 KiB with a
header each, measured here); this module's Python scanner is the reference the C one is
tested against, and the fallback, with a warning, where the extension was not built.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from typing import NamedTuple

__all__ = ["SCANNER_ABI", "Fault", "Scan", "native_scanner_loaded", "scan", "scan_python"]

log = logging.getLogger(__name__)

SCANNER_ABI = 1  # bumped with every change of rules, in step with _record_scan.c
MIN_RECORD_BYTES = 7


class Fault(enum.IntEnum):
    """Why a scan stopped; ``Scan.value`` says what about (noted per fault)."""

    OK = 0
    TRUNCATED = 1  # value: position of the field (or record) that runs past its end
    VARINT_TOO_LONG = 2  # value: position of the varint
    BAD_RECORD_LENGTH = 3  # value: the length (negative, or below 6)
    LENGTH_MISMATCH = 4  # value: position of the record whose fields end early
    OFFSET_DELTA = 5  # value: the offset delta found
    BAD_FIELD_LENGTH = 6  # value: the key, value or header value length (below -1)
    BAD_HEADER_COUNT = 7  # value: the header count (negative)
    BAD_HEADER_KEY = 8  # value: the header key length (negative: null keys are invalid)
    TRAILING_BYTES = 9  # value: how many bytes follow the last record
    COUNT_TOO_LARGE = 10  # value: the declared count


class Scan(NamedTuple):
    """What one scan found. ``record`` is the index of the record at fault (``count`` for
    trailing bytes); the timestamp deltas span the records read; ``first_keyless`` is the
    first record without a key when keys were asked for, else -1."""

    fault: Fault
    record: int
    value: int
    min_timestamp_delta: int
    max_timestamp_delta: int
    first_keyless: int


class _Stop(Exception):
    def __init__(self, fault: Fault, value: int) -> None:
        self.fault = fault
        self.value = value


def _varint(buf: bytes, pos: int, end: int, max_bytes: int, bits: int) -> tuple[int, int]:
    start = pos
    z = 0
    for i in range(max_bytes):
        if pos >= end:
            raise _Stop(Fault.TRUNCATED, start)
        b = buf[pos]
        pos += 1
        shift = 7 * i
        part = b & 0x7F
        if shift + 7 > bits and part >> (bits - shift):
            raise _Stop(Fault.VARINT_TOO_LONG, start)
        z |= part << shift
        if not b & 0x80:
            return (z >> 1) ^ -(z & 1), pos
    raise _Stop(Fault.VARINT_TOO_LONG, start)


def _field(buf: bytes, pos: int, end: int, min_length: int, fault: Fault) -> tuple[int, int]:
    start = pos
    length, pos = _varint(buf, pos, end, 5, 32)
    if length < min_length:
        raise _Stop(fault, length)
    if length > end - pos:
        raise _Stop(Fault.TRUNCATED, start)
    return length, pos + max(length, 0)


def _record(buf: bytes, pos: int, end: int, index: int) -> tuple[int, int, int]:
    """(timestamp delta, key length, position after the record)."""
    start = pos
    length, pos = _varint(buf, pos, end, 5, 32)
    if length < MIN_RECORD_BYTES - 1:
        raise _Stop(Fault.BAD_RECORD_LENGTH, length)
    if length > end - pos:
        raise _Stop(Fault.TRUNCATED, start)
    record_end = pos + length
    pos += 1  # attributes: unused in v2
    timestamp_delta, pos = _varint(buf, pos, record_end, 10, 64)
    offset_delta, pos = _varint(buf, pos, record_end, 5, 32)
    if offset_delta != index:
        raise _Stop(Fault.OFFSET_DELTA, offset_delta)
    key_length, pos = _field(buf, pos, record_end, -1, Fault.BAD_FIELD_LENGTH)
    _, pos = _field(buf, pos, record_end, -1, Fault.BAD_FIELD_LENGTH)
    headers, pos = _varint(buf, pos, record_end, 5, 32)
    if headers < 0:
        raise _Stop(Fault.BAD_HEADER_COUNT, headers)
    for _ in range(headers):
        _, pos = _field(buf, pos, record_end, 0, Fault.BAD_HEADER_KEY)
        _, pos = _field(buf, pos, record_end, -1, Fault.BAD_FIELD_LENGTH)
    if pos != record_end:
        raise _Stop(Fault.LENGTH_MISMATCH, start)
    return timestamp_delta, key_length, record_end


def scan_python(records: bytes, count: int, need_keys: bool) -> Scan:
    """The reference scanner (see the module docstring for the rules)."""
    end = len(records)
    if count < 0 or count > end // MIN_RECORD_BYTES:
        return Scan(Fault.COUNT_TOO_LARGE, 0, count, 0, 0, -1)
    pos = 0
    min_ts = max_ts = 0
    keyless = -1
    index = 0
    try:
        for index in range(count):
            ts, key_length, pos = _record(records, pos, end, index)
            if index == 0 or ts < min_ts:
                min_ts = ts
            if index == 0 or ts > max_ts:
                max_ts = ts
            if need_keys and keyless < 0 and key_length < 0:
                keyless = index
        else:
            index = count
    except _Stop as stop:
        return Scan(stop.fault, index, stop.value, min_ts, max_ts, keyless)
    if pos != end:
        return Scan(Fault.TRAILING_BYTES, count, end - pos, min_ts, max_ts, keyless)
    return Scan(Fault.OK, count, 0, min_ts, max_ts, keyless)


NativeScan = Callable[[bytes | bytearray | memoryview, int, bool], tuple[int, ...]]


def _load_native() -> NativeScan | None:
    try:
        from oncelog.protocol import _record_scan  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        log.warning(
            "the native record scanner is not built (run `bash scripts/venv.sh`): produce "
            "validates records in pure Python, hundreds of times slower"
        )
        return None
    if _record_scan.SCANNER_ABI != SCANNER_ABI:
        log.warning(
            "the native record scanner is stale (ABI %d, expected %d; run `bash "
            "scripts/venv.sh`): produce validates records in pure Python",
            _record_scan.SCANNER_ABI,
            SCANNER_ABI,
        )
        return None
    native: NativeScan = _record_scan.scan
    return native


_native = _load_native()


def native_scanner_loaded() -> bool:
    return _native is not None


def scan(records: bytes | bytearray | memoryview, count: int, need_keys: bool) -> Scan:
    """Scan ``count`` records filling ``records`` exactly (native when built)."""
    if _native is not None:
        fault, record, value, min_ts, max_ts, keyless = _native(records, count, need_keys)
        return Scan(Fault(fault), record, value, min_ts, max_ts, keyless)
    return scan_python(bytes(records), count, need_keys)
