"""``__transaction_state`` records: byte layouts checked by hand, and round trips."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oncelog.transactions.log_records import (
    LAST_PRODUCER_EPOCH_TAG,
    TxnLogFormatError,
    decode_key,
    decode_record,
    decode_value,
    encode_key,
    encode_value,
)
from oncelog.transactions.state import TransactionMetadata, TxnState

S = TxnState


def test_key_layout() -> None:
    assert encode_key("tx") == b"\x00\x00\x00\x02tx"
    assert decode_key(encode_key("héllo")) == "héllo"
    assert decode_key(b"\x00\x01\x00\x02tx") is None  # unknown key version: skipped


def test_value_v0_layout() -> None:
    m = TransactionMetadata(
        "t",
        5,
        2,
        60000,
        S.ONGOING,
        partitions=frozenset({("b", 1), ("a", 0), ("a", 3)}),
        txn_start_timestamp=10,
        txn_last_update_timestamp=20,
    )
    expected = (
        struct.pack(">hqhib", 0, 5, 2, 60000, 1)
        + struct.pack(">i", 2)
        + struct.pack(">h", 1)
        + b"a"
        + struct.pack(">iii", 2, 0, 3)
        + struct.pack(">h", 1)
        + b"b"
        + struct.pack(">ii", 1, 1)
        + struct.pack(">qq", 20, 10)
    )
    assert encode_value(m, version=0) == expected


def test_value_v1_layout_empty() -> None:
    m = TransactionMetadata(
        "t", 5, 0, 1000, S.EMPTY, previous_producer_id=5, txn_last_update_timestamp=20
    )
    expected = (
        struct.pack(">hqhib", 1, 5, 0, 1000, 0)
        + b"\x00"  # null compact array (Empty)
        + struct.pack(">qq", 20, -1)
        + b"\x01"
        + b"\x00\x08"
        + struct.pack(">q", 5)  # one tag: previous producer id
    )
    assert encode_value(m) == expected


def test_value_v1_layout_two_topics_and_every_tag() -> None:
    """Compact arrays of several topics and partitions (one pack per topic), and all four
    tags in ascending order, the private one last (tag 1000: e8 07)."""
    m = TransactionMetadata(
        "t",
        5,
        4,
        1000,
        S.ONGOING,
        previous_producer_id=4,
        next_producer_id=9,
        last_producer_epoch=3,
        partitions=frozenset({("b", 1), ("a", 0), ("a", 3), ("a", 7)}),
        txn_start_timestamp=1,
        txn_last_update_timestamp=2,
        client_transaction_version=2,
    )
    expected = (
        struct.pack(">hqhib", 1, 5, 4, 1000, 1)
        + b"\x03"  # two topics
        + b"\x02a\x04"  # "a", three partitions
        + struct.pack(">iii", 0, 3, 7)
        + b"\x00"  # no tags in the topic's entry
        + b"\x02b\x02"
        + struct.pack(">i", 1)
        + b"\x00"
        + struct.pack(">qq", 2, 1)
        + b"\x04"  # four tags
        + b"\x00\x08"
        + struct.pack(">q", 4)
        + b"\x01\x08"
        + struct.pack(">q", 9)
        + b"\x02\x02"
        + struct.pack(">h", 2)
        + b"\xe8\x07\x02"
        + struct.pack(">h", 3)
    )
    assert encode_value(m) == expected
    assert decode_value("t", expected) == m


def test_v1_tags_including_private_last_epoch() -> None:
    m = TransactionMetadata(
        "t",
        5,
        4,
        1000,
        S.COMPLETE_ABORT,
        previous_producer_id=4,
        next_producer_id=9,
        last_producer_epoch=3,
        client_transaction_version=2,
        txn_start_timestamp=1,
        txn_last_update_timestamp=2,
    )
    raw = encode_value(m)
    assert raw.endswith(b"\xe8\x07\x02" + struct.pack(">h", 3))  # tag 1000 = e8 07, size 2
    assert LAST_PRODUCER_EPOCH_TAG == 1000
    assert decode_value("t", raw) == m
    # version 0 has no tags: the extra fields fall back to their defaults
    back = decode_value("t", encode_value(m, version=0))
    assert back is not None
    assert (back.previous_producer_id, back.last_producer_epoch, back.next_producer_id) == (
        -1,
        -1,
        -1,
    )


def test_unknown_tags_are_skipped() -> None:
    m = TransactionMetadata("t", 5, 0, 1000, S.EMPTY, txn_last_update_timestamp=3)
    raw = encode_value(m)
    assert raw.endswith(b"\x00")
    patched = raw[:-1] + b"\x01\x07\x02zz"  # tag 7, 2 bytes
    assert decode_value("t", patched) == m


def test_tombstone_and_record() -> None:
    assert decode_value("t", None) is None
    rec = decode_record(encode_key("t"), None)
    assert rec is not None and rec.transactional_id == "t" and rec.metadata is None
    assert decode_record(b"\x00\x05\x00\x01t", b"junk") is None


def test_dead_is_never_a_value() -> None:
    with pytest.raises(ValueError):
        encode_value(TransactionMetadata("t", 1, 0, 1, S.DEAD))


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x00\x02" + b"\x00" * 30,  # unknown version
        struct.pack(">hqhib", 0, 1, 0, 1, 9) + struct.pack(">i", -1) + b"\x00" * 16,  # status 9
        struct.pack(">hqhib", 0, 1, 0, 1, 1) + struct.pack(">i", 1),  # truncated
        struct.pack(">hqhib", 0, 1, 0, 1, 0) + struct.pack(">i", -1) + b"\x00" * 17,  # trailing
    ],
)
def test_malformed_values(raw: bytes) -> None:
    with pytest.raises(TxnLogFormatError):
        decode_value("t", raw)


def test_partitions_of_empty_are_ignored() -> None:
    m = TransactionMetadata("t", 1, 0, 1, S.COMPLETE_COMMIT, txn_last_update_timestamp=1)
    raw = bytearray(encode_value(m, version=0))
    raw[2 + 8 + 2 + 4] = 0  # status -> Empty, the (empty) array stays
    back = decode_value("t", bytes(raw))
    assert back is not None and back.state is S.EMPTY and back.partitions == frozenset()


STORED_STATES = [s for s in S if s is not S.DEAD]
metadata_st = st.builds(
    lambda tid, pid, epoch, last, prev, timeout, state, parts, start, upd, nxt, tv: (
        TransactionMetadata(
            tid,
            pid,
            epoch,
            timeout,
            state,
            previous_producer_id=prev,
            next_producer_id=nxt,
            last_producer_epoch=last,
            partitions=frozenset() if state is S.EMPTY else frozenset(parts),
            txn_start_timestamp=start,
            txn_last_update_timestamp=upd,
            client_transaction_version=tv,
        )
    ),
    st.text(min_size=1, max_size=20),
    st.integers(0, 2**63 - 1),
    st.integers(0, 32767),
    st.integers(-1, 32767),
    st.integers(-1, 2**63 - 1),
    st.integers(1, 2**31 - 1),
    st.sampled_from(STORED_STATES),
    st.sets(st.tuples(st.text(min_size=1, max_size=10), st.integers(0, 2**31 - 1)), max_size=6),
    st.integers(-1, 2**62),
    st.integers(-1, 2**62),
    st.integers(-1, 2**63 - 1),
    st.integers(0, 2),
)


@given(metadata_st)
def test_round_trip_v1(m: TransactionMetadata) -> None:
    assert decode_value(m.transactional_id, encode_value(m)) == m
    assert decode_key(encode_key(m.transactional_id)) == m.transactional_id


@given(metadata_st)
def test_round_trip_v0_keeps_the_v0_fields(m: TransactionMetadata) -> None:
    back = decode_value(m.transactional_id, encode_value(m, version=0))
    assert back is not None
    assert (
        back.producer_id,
        back.producer_epoch,
        back.txn_timeout_ms,
        back.state,
        back.partitions,
        back.txn_start_timestamp,
        back.txn_last_update_timestamp,
    ) == (
        m.producer_id,
        m.producer_epoch,
        m.txn_timeout_ms,
        m.state,
        m.partitions,
        m.txn_start_timestamp,
        m.txn_last_update_timestamp,
    )


@given(st.binary(max_size=80))
def test_garbage_never_crashes_otherwise(raw: bytes) -> None:
    try:
        decode_value("t", raw)
    except TxnLogFormatError:
        pass
