"""The records of ``__consumer_offsets``, in Kafka's own byte formats.

Every record is a key and a value, each prefixed by an int16 version (Kafka's
``CoordinatorRecordSerde``); a null value is a tombstone. The key's version names the record
type (Kafka's ``GroupCoordinatorRecordSerde``):

- 0 and 1: ``OffsetCommitKey`` (group, topic, partition); Kafka 4 writes version 1.
  ``OffsetCommitValue`` versions 0-4; Kafka 4 writes version 3 (offset, leader epoch, metadata,
  commit timestamp), or version 1 when the commit carried a retention time.
- 2: ``GroupMetadataKey`` (group). ``GroupMetadataValue`` versions 0-4; Kafka 4 writes
  version 3 (protocol type, generation, protocol, leader, current state timestamp, members).
- 3 and above: the consumer (KIP-848) and share group records. We never write them; the
  decoder raises :class:`UnknownRecordType` so a loader can skip them, as Kafka's loader does.

Versions 4 of both values are flexible (compact strings, tagged fields): decoded, never
written, exactly as Kafka 4 does today. Schemas: ``group-coordinator/src/main/resources/
common/message/{OffsetCommit,GroupMetadata}{Key,Value}.json``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "GROUP_METADATA_KEY_VERSION",
    "GROUP_METADATA_VALUE_VERSION",
    "OFFSET_COMMIT_KEY_VERSION",
    "OFFSET_COMMIT_VALUE_VERSION",
    "CoordinatorRecord",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadata",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "RecordDecodeError",
    "UnknownRecordType",
    "decode_key",
    "decode_record",
    "decode_value",
    "encode_key",
    "encode_value",
]

OFFSET_COMMIT_KEY_VERSION = 1
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSION = 3
_FLEXIBLE_VALUE_VERSION = 4


class RecordDecodeError(ValueError):
    """The bytes are not a record of the type and version they claim."""


class UnknownRecordType(RecordDecodeError):
    """A key version (record type) we do not know, such as KIP-848 consumer group records."""

    def __init__(self, record_type: int) -> None:
        self.record_type = record_type
        super().__init__(f"unknown __consumer_offsets record type {record_type}")


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    """The key of a committed offset record in ``__consumer_offsets``."""

    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    """The value of a committed offset record (a tombstone deletes the offset)."""

    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = -1
    expire_timestamp: int = -1  # only version 1 carries it (OffsetCommit v2-v4 retention time)


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    """The key of a group metadata record in ``__consumer_offsets``."""

    group: str


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """One member in a group metadata record."""

    member_id: str
    client_id: str
    client_host: str
    session_timeout: int
    subscription: bytes
    assignment: bytes
    rebalance_timeout: int = -1
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    """The group metadata record: the group's generation, protocol, leader and members
    (a tombstone deletes the group)."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadata, ...] = ()


Key = OffsetCommitKey | GroupMetadataKey
Value = OffsetCommitValue | GroupMetadataValue


@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    """One ``__consumer_offsets`` record; ``value`` None is a tombstone."""

    key: Key
    value: Value | None

    def __post_init__(self) -> None:
        expected = (
            OffsetCommitValue if isinstance(self.key, OffsetCommitKey) else GroupMetadataValue
        )
        if self.value is not None and not isinstance(self.value, expected):
            raise TypeError(f"{type(self.key).__name__} needs a {expected.__name__} value")

    def encode(self) -> tuple[bytes, bytes | None]:
        """(key bytes, value bytes or None) as the log stores them."""
        return encode_key(self.key), None if self.value is None else encode_value(self.value)


# --- encoding ---


class _Writer:
    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def int16(self, v: int) -> None:
        self._parts.append(struct.pack(">h", v))

    def int32(self, v: int) -> None:
        self._parts.append(struct.pack(">i", v))

    def int64(self, v: int) -> None:
        self._parts.append(struct.pack(">q", v))

    def string(self, s: str | None) -> None:
        if s is None:
            self.int16(-1)
            return
        data = s.encode()
        if len(data) > 0x7FFF:
            raise ValueError(f"string of {len(data)} bytes is too long for an int16 length")
        self.int16(len(data))
        self._parts.append(data)

    def bytes_(self, b: bytes) -> None:
        self.int32(len(b))
        self._parts.append(bytes(b))

    def getvalue(self) -> bytes:
        return b"".join(self._parts)


def encode_key(key: Key) -> bytes:
    w = _Writer()
    if isinstance(key, OffsetCommitKey):
        w.int16(OFFSET_COMMIT_KEY_VERSION)
        w.string(key.group)
        w.string(key.topic)
        w.int32(key.partition)
    else:
        w.int16(GROUP_METADATA_KEY_VERSION)
        w.string(key.group)
    return w.getvalue()


def encode_value(value: Value) -> bytes:
    """The version Kafka 4 writes: OffsetCommitValue 3 (1 with an expire timestamp),
    GroupMetadataValue 3."""
    w = _Writer()
    if isinstance(value, OffsetCommitValue):
        if value.expire_timestamp != -1:
            w.int16(1)
            w.int64(value.offset)
            w.string(value.metadata)
            w.int64(value.commit_timestamp)
            w.int64(value.expire_timestamp)
        else:
            w.int16(OFFSET_COMMIT_VALUE_VERSION)
            w.int64(value.offset)
            w.int32(value.leader_epoch)
            w.string(value.metadata)
            w.int64(value.commit_timestamp)
        return w.getvalue()
    w.int16(GROUP_METADATA_VALUE_VERSION)
    w.string(value.protocol_type)
    w.int32(value.generation)
    w.string(value.protocol)
    w.string(value.leader)
    w.int64(value.current_state_timestamp)
    w.int32(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        w.int32(m.rebalance_timeout)
        w.int32(m.session_timeout)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
    return w.getvalue()


# --- decoding ---


class _Reader:
    def __init__(self, data: bytes, flexible: bool = False) -> None:
        self._data = memoryview(data)
        self._pos = 0
        self.flexible = flexible

    def _take(self, n: int) -> memoryview:
        if n < 0 or self._pos + n > len(self._data):
            raise RecordDecodeError(f"record truncated: needs {n} bytes at position {self._pos}")
        chunk = self._data[self._pos : self._pos + n]
        self._pos += n
        return chunk

    def int16(self) -> int:
        return int(struct.unpack(">h", self._take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self._take(4))[0])

    def int64(self) -> int:
        return int(struct.unpack(">q", self._take(8))[0])

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            b = self._take(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 28:
                raise RecordDecodeError("varint longer than 5 bytes")

    def nullable_string(self) -> str | None:
        n = self.uvarint() - 1 if self.flexible else self.int16()
        if n < 0:
            return None
        try:
            return bytes(self._take(n)).decode()
        except UnicodeDecodeError as e:
            raise RecordDecodeError(f"string is not UTF-8: {e}") from None

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise RecordDecodeError("null where the schema has a non-nullable string")
        return s

    def bytes_(self) -> bytes:
        n = self.uvarint() - 1 if self.flexible else self.int32()
        if n < 0:
            raise RecordDecodeError("null where the schema has non-nullable bytes")
        return bytes(self._take(n))

    def array_len(self) -> int:
        n = self.uvarint() - 1 if self.flexible else self.int32()
        if n < 0:
            raise RecordDecodeError("null where the schema has a non-nullable array")
        return n

    def tagged_fields(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()  # tag
                self._take(self.uvarint())

    def done(self) -> None:
        if self._pos != len(self._data):
            raise RecordDecodeError(f"{len(self._data) - self._pos} bytes left after the record")


def decode_key(data: bytes) -> Key:
    r = _Reader(data)
    record_type = r.int16()
    key: Key
    if record_type in (0, 1):
        key = OffsetCommitKey(r.string(), r.string(), r.int32())
    elif record_type == 2:
        key = GroupMetadataKey(r.string())
    else:
        raise UnknownRecordType(record_type)
    r.done()
    return key


def decode_value(key: Key, data: bytes) -> Value:
    r = _Reader(data)
    version = r.int16()
    if not 0 <= version <= _FLEXIBLE_VALUE_VERSION:
        raise RecordDecodeError(f"unknown {type(key).__name__} value version {version}")
    r.flexible = version >= _FLEXIBLE_VALUE_VERSION
    value: Value
    if isinstance(key, OffsetCommitKey):
        offset = r.int64()
        leader_epoch = r.int32() if version >= 3 else -1
        metadata = r.string()
        commit_ts = r.int64()
        expire_ts = r.int64() if version == 1 else -1
        value = OffsetCommitValue(offset, metadata, commit_ts, leader_epoch, expire_ts)
    else:
        protocol_type = r.string()
        generation = r.int32()
        protocol = r.nullable_string()
        leader = r.nullable_string()
        state_ts = r.int64() if version >= 2 else -1
        members = []
        for _ in range(r.array_len()):
            member_id = r.string()
            instance_id = r.nullable_string() if version >= 3 else None
            client_id = r.string()
            client_host = r.string()
            rebalance_timeout = r.int32() if version >= 1 else -1
            session_timeout = r.int32()
            subscription = r.bytes_()
            assignment = r.bytes_()
            r.tagged_fields()
            members.append(
                MemberMetadata(
                    member_id,
                    client_id,
                    client_host,
                    session_timeout,
                    subscription,
                    assignment,
                    rebalance_timeout,
                    instance_id,
                )
            )
        value = GroupMetadataValue(
            protocol_type, generation, protocol, leader, state_ts, tuple(members)
        )
    r.tagged_fields()
    r.done()
    return value


def decode_record(key: bytes, value: bytes | None) -> CoordinatorRecord:
    """Decode one stored record; raises :class:`UnknownRecordType` for record types we do not
    model and :class:`RecordDecodeError` for damaged bytes."""
    k = decode_key(key)
    return CoordinatorRecord(k, None if value is None else decode_value(k, value))
