"""The record scanner: each fault it names, and the C scanner against the Python one."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.protocol import record_scan
from oncelog.protocol.record_scan import Fault, scan_python

from .batch_forge import RecordSpec, padded_varint, records_body, varint


def both(records: bytes, count: int, need_keys: bool = False) -> record_scan.Scan:
    """Scan with both scanners; they must agree on everything."""
    reference = scan_python(records, count, need_keys)
    assert record_scan.native_scanner_loaded(), "the C scanner is not built"
    assert record_scan.scan(records, count, need_keys) == reference
    return reference


def test_native_scanner_is_built() -> None:
    """scripts/venv.sh builds it; the broker would fall back to Python, 500x slower."""
    assert record_scan.native_scanner_loaded()


def test_well_formed_records() -> None:
    specs = [
        RecordSpec(key=None, value=b"a", timestamp_delta=5),
        RecordSpec(key=b"k", value=None, timestamp_delta=-3, headers=[(b"h", None)]),
        RecordSpec(key=b"", value=b"", timestamp_delta=1 << 40, headers=[(b"", b"x")] * 3),
    ]
    found = both(records_body(specs), 3, need_keys=True)
    assert found == (Fault.OK, 3, 0, -3, 1 << 40, 0)
    assert both(records_body(specs[1:]), 2, need_keys=True).first_keyless == -1


def _faults() -> dict[str, tuple[bytes, int, Fault, int]]:
    one = RecordSpec().encode(0)
    long_one = RecordSpec(value=b"v" * 20).encode(0)
    return {
        "count above records": (long_one, 2, Fault.TRUNCATED, 1),
        "count beyond any size": (one, 2**31 - 1, Fault.COUNT_TOO_LARGE, 0),
        "trailing bytes": (one + b"\x00", 1, Fault.TRAILING_BYTES, 1),
        "negative record length": (varint(-5) + b"\x00" * 9, 1, Fault.BAD_RECORD_LENGTH, 0),
        "record longer than bytes": (RecordSpec(length_adjust=3).encode(0), 1, Fault.TRUNCATED, 0),
        "record shorter than fields": (
            RecordSpec(value=b"vv", length_adjust=-1).encode(0) + b"\x00",
            1,
            Fault.TRUNCATED,
            0,
        ),
        "fields shorter than record": (
            RecordSpec(length_adjust=2).encode(0) + b"\x00\x00",
            1,
            Fault.LENGTH_MISMATCH,
            0,
        ),
        "offset delta skips": (
            records_body([RecordSpec(), RecordSpec(offset_delta=2)]),
            2,
            Fault.OFFSET_DELTA,
            1,
        ),
        "six-byte int varint": (
            _raw(b"\x00" + varint(0) + padded_varint(0, 6) + b"\x01\x01\x00"),
            1,
            Fault.VARINT_TOO_LONG,
            0,
        ),
        "int varint over 32 bits": (
            _raw(b"\x00" + varint(0) + b"\x80\x80\x80\x80\x10" + b"\x01\x01\x00"),
            1,
            Fault.VARINT_TOO_LONG,
            0,
        ),
        "eleven-byte long varint": (
            _raw(b"\x00" + padded_varint(0, 11) + varint(0) + b"\x01\x01\x00"),
            1,
            Fault.VARINT_TOO_LONG,
            0,
        ),
        "ten-byte long varint over 64 bits": (
            _raw(b"\x00" + b"\x80" * 9 + b"\x02" + varint(0) + b"\x01\x01\x00"),
            1,
            Fault.VARINT_TOO_LONG,
            0,
        ),
        "key length -2": (
            _raw(b"\x00" + varint(0) + varint(0) + varint(-2) + b"\x01\x00"),
            1,
            Fault.BAD_FIELD_LENGTH,
            0,
        ),
        "negative header count": (
            _raw(b"\x00\x00\x00\x01\x01" + varint(-1)),
            1,
            Fault.BAD_HEADER_COUNT,
            0,
        ),
        "null header key": (
            RecordSpec(headers=[(None, b"v")]).encode(0),
            1,
            Fault.BAD_HEADER_KEY,
            0,
        ),
        "varint cut by the end": (b"\x80", 0, Fault.TRAILING_BYTES, 0),
    }


def _raw(fields: bytes) -> bytes:
    return varint(len(fields)) + fields


@pytest.mark.parametrize("case", sorted(_faults()))
def test_each_fault(case: str) -> None:
    records, count, fault, index = _faults()[case]
    found = both(records, count)
    assert (found.fault, found.record) == (fault, index), found


def test_a_valid_non_canonical_varint_is_read_as_kafka_reads_it() -> None:
    """0 written in two bytes is within the int limit: Kafka reads it, so do we."""
    fields = b"\x00" + varint(0) + padded_varint(0, 2) + b"\x01\x01\x00"
    assert both(_raw(fields), 1).fault == Fault.OK


record_specs = st.builds(
    RecordSpec,
    key=st.none() | st.binary(max_size=8),
    value=st.none() | st.binary(max_size=8),
    timestamp_delta=st.integers(-(2**40), 2**40),
    headers=st.lists(
        st.tuples(st.binary(max_size=4), st.none() | st.binary(max_size=4)), max_size=2
    ),
)


@settings(max_examples=400, deadline=None)
@given(specs=st.lists(record_specs, max_size=5), data=st.data())
def test_native_and_python_scanners_agree_on_mutations(
    specs: list[RecordSpec], data: st.DataObject
) -> None:
    body = bytearray(records_body(specs))
    for _ in range(data.draw(st.integers(0, 3))):
        if not body:
            break
        at = data.draw(st.integers(0, len(body) - 1))
        action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip":
            body[at] ^= data.draw(st.integers(1, 255))
        elif action == "cut":
            del body[at:]
        else:
            body[at:at] = data.draw(st.binary(min_size=1, max_size=3))
    count = data.draw(st.sampled_from([len(specs), len(specs) + 1, max(len(specs) - 1, 0)]))
    both(bytes(body), count, need_keys=data.draw(st.booleans()))


@settings(max_examples=300, deadline=None)
@given(garbage=st.binary(max_size=200), count=st.integers(-2, 40), keys=st.booleans())
def test_native_and_python_scanners_agree_on_garbage(
    garbage: bytes, count: int, keys: bool
) -> None:
    both(garbage, count, keys)
