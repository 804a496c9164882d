"""__consumer_offsets record formats (Kafka's schemas, byte for byte) and group placement."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oncelog.coordinator_partitions import java_string_hash, partition_for
from oncelog.groups.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordDecodeError,
    UnknownRecordType,
    decode_record,
    encode_key,
    encode_value,
)


def s16(s: str) -> bytes:
    return struct.pack(">h", len(s.encode())) + s.encode()


def test_offset_commit_bytes_are_kafkas() -> None:
    key = OffsetCommitKey("grp", "tp", 7)
    assert encode_key(key) == b"\x00\x01" + s16("grp") + s16("tp") + struct.pack(">i", 7)
    value = OffsetCommitValue(42, "md", 1000, leader_epoch=5)
    assert encode_value(value) == (
        b"\x00\x03" + struct.pack(">qi", 42, 5) + s16("md") + struct.pack(">q", 1000)
    )


def test_group_metadata_bytes_are_kafkas() -> None:
    member = MemberMetadata("m", "c", "h", 10, b"sub", b"asg", 30, None)
    value = GroupMetadataValue("consumer", 3, "range", "m", 99, (member,))
    expected = (
        b"\x00\x03"
        + s16("consumer")
        + struct.pack(">i", 3)
        + s16("range")
        + s16("m")
        + struct.pack(">q", 99)
        + struct.pack(">i", 1)
        + s16("m")
        + b"\xff\xff"
        + s16("c")
        + s16("h")
        + struct.pack(">ii", 30, 10)
        + struct.pack(">i", 3)
        + b"sub"
        + struct.pack(">i", 3)
        + b"asg"
    )
    assert encode_value(value) == expected
    assert encode_key(GroupMetadataKey("g")) == b"\x00\x02" + s16("g")


def test_older_value_versions_decode() -> None:
    key = encode_key(OffsetCommitKey("g", "t", 0))
    v0 = b"\x00\x00" + struct.pack(">q", 1) + s16("a") + struct.pack(">q", 2)
    v1 = b"\x00\x01" + struct.pack(">q", 1) + s16("a") + struct.pack(">qq", 2, 3)
    assert decode_record(key, v0).value == OffsetCommitValue(1, "a", 2)
    assert decode_record(key, v1).value == OffsetCommitValue(1, "a", 2, expire_timestamp=3)
    # value v1 is what Kafka writes for a commit with an explicit retention time
    assert encode_value(OffsetCommitValue(1, "a", 2, expire_timestamp=3)) == v1
    # GroupMetadataValue v0: no rebalance timeout, no state timestamp, no instance id
    gv0 = (
        b"\x00\x00"
        + s16("consumer")
        + struct.pack(">i", 1)
        + s16("range")
        + s16("m")
        + struct.pack(">i", 1)
        + s16("m")
        + s16("c")
        + s16("h")
        + struct.pack(">i", 10)
        + struct.pack(">i", 0)
        + struct.pack(">i", 0)
    )
    gv = decode_record(encode_key(GroupMetadataKey("g")), gv0).value
    assert gv == GroupMetadataValue(
        "consumer", 1, "range", "m", -1, (MemberMetadata("m", "c", "h", 10, b"", b"", -1, None),)
    )


def test_flexible_value_version_4_decodes() -> None:
    key = encode_key(OffsetCommitKey("g", "t", 0))
    v4 = (
        b"\x00\x04" + struct.pack(">qi", 9, 2) + b"\x03md" + struct.pack(">q", 5) + b"\x01\x07\x01z"
    )
    assert decode_record(key, v4).value == OffsetCommitValue(9, "md", 5, 2)


def test_tombstones_and_unknown_types() -> None:
    rec = decode_record(encode_key(OffsetCommitKey("g", "t", 1)), None)
    assert rec == CoordinatorRecord(OffsetCommitKey("g", "t", 1), None)
    with pytest.raises(UnknownRecordType):
        decode_record(b"\x00\x05" + s16("g"), None)  # a KIP-848 consumer group record
    with pytest.raises(RecordDecodeError):
        decode_record(b"\x00\x01" + s16("g"), None)  # truncated
    with pytest.raises(RecordDecodeError):
        decode_record(encode_key(GroupMetadataKey("g")) + b"x", None)  # trailing bytes
    with pytest.raises(RecordDecodeError):
        decode_record(encode_key(GroupMetadataKey("g")), b"\x00\x09")  # unknown version


text = st.text(max_size=20)
opt_text = st.none() | text
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)

offset_records = st.builds(
    CoordinatorRecord,
    st.builds(OffsetCommitKey, text, text, int32),
    st.none() | st.builds(OffsetCommitValue, int64, text, int64, int32, st.just(-1)),
)
members = st.builds(
    MemberMetadata,
    text,
    text,
    text,
    int32,
    st.binary(max_size=30),
    st.binary(max_size=30),
    int32,
    opt_text,
)
group_records = st.builds(
    CoordinatorRecord,
    st.builds(GroupMetadataKey, text),
    st.none()
    | st.builds(
        GroupMetadataValue,
        text,
        int32,
        opt_text,
        opt_text,
        int64,
        st.lists(members, max_size=4).map(tuple),
    ),
)


@given(offset_records | group_records)
def test_records_round_trip(record: CoordinatorRecord) -> None:
    assert decode_record(*record.encode()) == record


@given(st.binary(max_size=40), st.none() | st.binary(max_size=40))
def test_garbage_never_crashes_the_decoder(key: bytes, value: bytes | None) -> None:
    try:
        decode_record(key, value)
    except RecordDecodeError:
        pass


@pytest.mark.parametrize(
    ("s", "h"),
    [
        ("", 0),
        ("a", 97),
        ("Aa", 2112),
        ("BB", 2112),
        ("hello", 99162322),
        ("polygenelubricants", -(2**31)),  # Integer.MIN_VALUE: Utils.abs maps it to 0
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # surrogate pair: two UTF-16 code units
    ],
)
def test_java_string_hash(s: str, h: int) -> None:
    assert java_string_hash(s) == h


def test_group_partition_like_kafka() -> None:
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(Integer.MIN_VALUE) is 0
    assert partition_for("hello", 50) == 99162322 % 50
    # negative hashes are negated (Math.abs), not masked
    assert java_string_hash("my-group") == -1906497762
    assert partition_for("my-group", 50) == 1906497762 % 50 == 12
    assert (-1906497762 & 0x7FFFFFFF) % 50 != 12, "masking would pick another partition"
