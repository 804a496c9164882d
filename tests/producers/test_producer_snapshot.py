"""Snapshot files: round trip, file naming and housekeeping, corruption detection."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from oncelog.producers.snapshot import (
    CorruptSnapshot,
    decode_snapshot,
    delete_snapshots_below,
    encode_snapshot,
    latest_snapshot_at_or_below,
    list_snapshots,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)
from oncelog.producers.state import (
    Append,
    BatchMetadata,
    Duplicate,
    ProducerStateEntry,
    ProducerStateManager,
)
from oncelog.protocol.record_batch import ATTR_TRANSACTIONAL, BatchHeader


def header(
    pid: int, seq: int, count: int, base_offset: int, *, epoch: int = 0, txn: bool = False
) -> BatchHeader:
    attributes = ATTR_TRANSACTIONAL if txn else 0
    return BatchHeader(
        base_offset,
        0,
        -1,
        2,
        0,
        attributes,
        count - 1,
        10 + base_offset,
        10 + base_offset,
        pid,
        epoch,
        seq,
        count,
    )


def sample_entries() -> list[ProducerStateEntry]:
    return [
        ProducerStateEntry(
            1,
            0,
            tuple(BatchMetadata(s, s + 4, s, s + 4, s) for s in range(10, 35, 5)),
            -1,
            34,
            None,
        ),
        ProducerStateEntry(2, 4, (BatchMetadata(0, 2, 35, 37, 45),), 7, 45, 35),
        ProducerStateEntry(3, 2, (), 9, 50, None),
    ]


def test_round_trip_keeps_every_field_and_all_five_batches() -> None:
    entries = sample_entries()
    assert decode_snapshot(encode_snapshot(entries)) == entries
    assert decode_snapshot(encode_snapshot([])) == []


def test_encoding_is_deterministic() -> None:
    entries = sample_entries()
    assert encode_snapshot(entries) == encode_snapshot(reversed(entries))


def test_restored_manager_still_answers_retries_of_older_batches() -> None:
    """Why all five batches are stored: Kafka's snapshot keeps one, so this retry would be
    OUT_OF_ORDER_SEQUENCE_NUMBER after a clean restart."""
    m = ProducerStateManager(decode_snapshot(encode_snapshot(sample_entries())))
    assert m.validate(header(1, 15, 5, 0)) == Duplicate(15, 19, 15)
    assert isinstance(m.validate(header(1, 35, 1, 0)), Append)
    assert m.first_unstable_offset() == 35


def test_write_read_list_and_delete(tmp_path: Path) -> None:
    m = ProducerStateManager(sample_entries())
    for offset in (0, 40, 120):
        path = write_snapshot(tmp_path, offset, m)
        assert path.name == f"{offset:020d}.snapshot"
    (tmp_path / "00000000000000000200.snapshot.tmp").write_bytes(b"half")
    (tmp_path / "00000000000000000000.log").write_bytes(b"")
    assert list_snapshots(tmp_path) == [0, 40, 120]
    assert read_snapshot(snapshot_path(tmp_path, 40)) == sample_entries()
    assert latest_snapshot_at_or_below(tmp_path, 119) == 40
    assert latest_snapshot_at_or_below(tmp_path, 120) == 120
    assert latest_snapshot_at_or_below(tmp_path, -1) is None
    assert delete_snapshots_below(tmp_path, 120) == [0, 40]
    assert list_snapshots(tmp_path) == [120]
    assert list_snapshots(tmp_path / "missing") == []


def test_every_flipped_byte_is_detected() -> None:
    data = encode_snapshot(sample_entries())
    for i in range(len(data)):
        damaged = bytearray(data)
        damaged[i] ^= 0xFF
        with pytest.raises(CorruptSnapshot):
            decode_snapshot(bytes(damaged))


def test_every_truncation_is_detected() -> None:
    data = encode_snapshot(sample_entries())
    for length in range(len(data)):
        with pytest.raises(CorruptSnapshot):
            decode_snapshot(data[:length])


def _with_crc(version: int, body: bytes) -> bytes:
    return struct.pack(">hI", version, crc32c.crc32c(body)) + body


def _v1_body(entries: list[ProducerStateEntry]) -> bytes:
    """A version-1 body (entry count, then the entries in order), as older brokers wrote."""
    body = struct.pack(">i", len(entries))
    for e in entries:
        txn = -1 if e.current_txn_first_offset is None else e.current_txn_first_offset
        body += struct.pack(
            ">qhiqqb",
            e.producer_id,
            e.producer_epoch,
            e.coordinator_epoch,
            e.last_timestamp,
            txn,
            len(e.batches),
        )
        for b in e.batches:
            body += struct.pack(
                ">iiqqq", b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp
            )
    return body


def test_version_1_snapshots_are_still_read() -> None:
    assert decode_snapshot(_with_crc(1, _v1_body(sample_entries()))) == sample_entries()


def test_structural_damage_with_a_valid_crc_is_detected() -> None:
    body = _v1_body(sample_entries())
    with pytest.raises(CorruptSnapshot, match="version"):
        decode_snapshot(_with_crc(99, encode_snapshot(sample_entries())[6:]))
    with pytest.raises(CorruptSnapshot, match="after the last entry"):
        decode_snapshot(_with_crc(1, body + b"\0"))
    with pytest.raises(CorruptSnapshot, match="truncated"):
        decode_snapshot(_with_crc(1, body[:-1]))
    six_batches = struct.pack(">i", 1) + struct.pack(">qhiqqb", 1, 0, 0, 0, -1, 6) + bytes(6 * 32)
    with pytest.raises(CorruptSnapshot, match="6 batches"):
        decode_snapshot(_with_crc(1, six_batches))
    v2 = encode_snapshot(sample_entries())[6:]
    with pytest.raises(CorruptSnapshot, match="truncated"):
        decode_snapshot(_with_crc(2, v2[:40]))


def test_corrupt_file_on_disk(tmp_path: Path) -> None:
    path = write_snapshot(tmp_path, 7, ProducerStateManager(sample_entries()))
    data = bytearray(path.read_bytes())
    data[-3] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptSnapshot):
        read_snapshot(path)


_i16, _i32, _i64 = (st.integers(-(2 ** (b - 1)), 2 ** (b - 1) - 1) for b in (16, 32, 64))
_batch = st.builds(BatchMetadata, _i32, _i32, _i64, _i64, _i64)
_entry = st.builds(
    ProducerStateEntry,
    _i64,
    _i16,
    st.lists(_batch, max_size=5).map(tuple),
    _i32,
    _i64,
    st.none() | st.integers(0, 2**63 - 1),
)


@given(st.lists(_entry, unique_by=lambda e: e.producer_id))
def test_round_trip_property(entries: list[ProducerStateEntry]) -> None:
    decoded = decode_snapshot(encode_snapshot(entries))
    assert decoded == sorted(entries, key=lambda e: e.producer_id)
