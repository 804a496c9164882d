"""Records of the ``__transaction_state`` topic, in Kafka's byte format: bytes in, metadata out.

Key (``TransactionLogKey``, version 0, not flexible)::

    int16 version (0; Kafka 4 calls it the coordinator record type)   string transactional_id

Value (``TransactionLogValue``; version 0 plain, version 1 flexible)::

    int16 version
    int64 producer_id
    int16 producer_epoch
    int32 transaction_timeout_ms
    int8  transaction_status          (TxnState.id)
    [PartitionsSchema] partitions     (null while Empty; each: string topic, [int32] ids)
    int64 last_update_timestamp_ms
    int64 start_timestamp_ms
    tagged fields (v1 only): 0 previous_producer_id int64 (default -1),
                             1 next_producer_id int64 (default -1),
                             2 client_transaction_version int16 (default 0)

A null value is a tombstone: the id expired (``transactional.id.expiration.ms``).

We write version 1, as Kafka 4 does once ``transaction.version`` >= 1, and read both.
Kafka keeps ``lastProducerEpoch`` only in memory, so a KIP-360 InitProducerId retry after a
coordinator reload fails in Kafka. oncelog rebuilds state *only* from records (load and live
share one path), so it adds one oncelog-private tagged field, ``LAST_PRODUCER_EPOCH_TAG``
(int16, default -1, written only when not -1). Kafka's own reader skips unknown tags, so the
records stay readable by Kafka tools; a version-0 record loads with the last epoch at -1.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from oncelog.transactions.state import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
    TxnState,
)

__all__ = [
    "KEY_VERSION",
    "LAST_PRODUCER_EPOCH_TAG",
    "VALUE_VERSION",
    "TxnLogFormatError",
    "TxnRecord",
    "decode_key",
    "decode_record",
    "decode_value",
    "encode_key",
    "encode_value",
]

KEY_VERSION = 0
VALUE_VERSION = 1
LAST_PRODUCER_EPOCH_TAG = 1000  # oncelog-private, far from Kafka's tags (0-2 today)

_TAG_PREVIOUS_PRODUCER_ID = 0
_TAG_NEXT_PRODUCER_ID = 1
_TAG_CLIENT_TXN_VERSION = 2

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
# The fixed runs of a key and a value, packed in one call each (three values a transaction).
_KEY_HEAD = struct.Struct(">hh")  # version, id length
_VALUE_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, state
_VALUE_TIMES = struct.Struct(">qq")  # last update, start


class TxnLogFormatError(ValueError):
    """A ``__transaction_state`` record that cannot be decoded."""


@dataclass(frozen=True, slots=True)
class TxnRecord:
    """One decoded record: ``metadata`` is None for a tombstone."""

    transactional_id: str
    metadata: TransactionMetadata | None


# --- encoding ---


def encode_key(transactional_id: str) -> bytes:
    raw = transactional_id.encode()
    if len(raw) > 0x7FFF:
        raise ValueError(f"transactional id of {len(raw)} bytes is too long")
    return _KEY_HEAD.pack(KEY_VERSION, len(raw)) + raw


def encode_value(metadata: TransactionMetadata, version: int = VALUE_VERSION) -> bytes:
    """The value bytes of ``metadata``; version 0 drops the tagged fields."""
    if version not in (0, 1):
        raise ValueError(f"unsupported transaction log value version {version}")
    if metadata.state is TxnState.DEAD:
        raise ValueError("a Dead transactional id is written as a tombstone (null value)")
    flexible = version >= 1
    out = bytearray(
        _VALUE_HEAD.pack(
            version,
            metadata.producer_id,
            metadata.producer_epoch,
            metadata.txn_timeout_ms,
            metadata.state.id,
        )
    )
    if metadata.state is TxnState.EMPTY:
        _write_length(out, None, flexible)
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(metadata.partitions):
            by_topic.setdefault(topic, []).append(partition)
        _write_length(out, len(by_topic), flexible)
        for topic, ids in by_topic.items():
            _write_string(out, topic, flexible)
            _write_length(out, len(ids), flexible)
            out += struct.pack(f">{len(ids)}i", *ids)
            if flexible:
                _write_uvarint(out, 0)  # no tagged fields in PartitionsSchema
    out += _VALUE_TIMES.pack(metadata.txn_last_update_timestamp, metadata.txn_start_timestamp)
    if flexible:
        # Each tag: its number and length as uvarints (made once, below), then the value.
        tags: list[bytes] = []
        if metadata.previous_producer_id != NO_PRODUCER_ID:
            tags.append(_PREVIOUS_PRODUCER_ID_HEAD + _I64.pack(metadata.previous_producer_id))
        if metadata.next_producer_id != NO_PRODUCER_ID:
            tags.append(_NEXT_PRODUCER_ID_HEAD + _I64.pack(metadata.next_producer_id))
        if metadata.client_transaction_version != 0:
            tags.append(_CLIENT_TXN_VERSION_HEAD + _I16.pack(metadata.client_transaction_version))
        if metadata.last_producer_epoch != NO_PRODUCER_EPOCH:
            tags.append(_LAST_PRODUCER_EPOCH_HEAD + _I16.pack(metadata.last_producer_epoch))
        out.append(len(tags))  # at most four: a one-byte uvarint
        out += b"".join(tags)
    return bytes(out)


# --- decoding ---


def decode_key(key: bytes) -> str | None:
    """The transactional id, or None for a key version we do not know (Kafka skips such
    records with a warning: left over from an aborted upgrade)."""
    if len(key) >= _KEY_HEAD.size:  # a well-formed key in one unpack (every replay reads one)
        version, length = _KEY_HEAD.unpack_from(key)
        end = _KEY_HEAD.size + length
        if version == KEY_VERSION and _KEY_HEAD.size <= end <= len(key):
            try:
                return key[_KEY_HEAD.size : end].decode()
            except UnicodeDecodeError:
                pass  # the reader below says so
    reader = _Reader(key)
    version = reader.i16()
    if version != KEY_VERSION:
        return None
    tid = reader.string(flexible=False)
    if tid is None:
        raise TxnLogFormatError("transaction log key with a null transactional id")
    return tid


def decode_value(transactional_id: str, value: bytes | None) -> TransactionMetadata | None:
    """The metadata a value holds, None for a tombstone."""
    if value is None:
        return None
    reader = _Reader(value)
    version = reader.i16()
    if version not in (0, 1):
        raise TxnLogFormatError(f"unknown transaction log value version {version}")
    flexible = version >= 1
    producer_id = reader.i64()
    epoch = reader.i16()
    timeout = reader.i32()
    status = reader.i8()
    try:
        state = TxnState.from_id(status)
    except ValueError as exc:
        raise TxnLogFormatError(str(exc)) from None
    partitions: set[tuple[str, int]] = set()
    count = reader.length(flexible)
    for _ in range(max(count, 0)):
        topic = reader.string(flexible)
        if topic is None:
            raise TxnLogFormatError("null topic in transaction partitions")
        for _ in range(max(reader.length(flexible), 0)):
            partitions.add((topic, reader.i32()))
        if flexible:
            reader.skip_tags()
    last_update = reader.i64()
    start = reader.i64()
    previous_pid = next_pid = NO_PRODUCER_ID
    client_tv = 0
    last_epoch = NO_PRODUCER_EPOCH
    if flexible:
        for tag, data in reader.tags():
            sub = _Reader(data)
            if tag == _TAG_PREVIOUS_PRODUCER_ID:
                previous_pid = sub.i64()
            elif tag == _TAG_NEXT_PRODUCER_ID:
                next_pid = sub.i64()
            elif tag == _TAG_CLIENT_TXN_VERSION:
                client_tv = sub.i16()
            elif tag == LAST_PRODUCER_EPOCH_TAG:
                last_epoch = sub.i16()
    if reader.pos != len(value):
        raise TxnLogFormatError(
            f"{len(value) - reader.pos} trailing bytes after a transaction log value"
        )
    return TransactionMetadata(
        transactional_id=transactional_id,
        producer_id=producer_id,
        producer_epoch=epoch,
        txn_timeout_ms=timeout,
        state=state,
        previous_producer_id=previous_pid,
        next_producer_id=next_pid,
        last_producer_epoch=last_epoch,
        # Kafka ignores the partitions of an Empty record.
        partitions=frozenset() if state is TxnState.EMPTY else frozenset(partitions),
        txn_start_timestamp=start,
        txn_last_update_timestamp=last_update,
        client_transaction_version=client_tv,
    )


def decode_record(key: bytes, value: bytes | None) -> TxnRecord | None:
    """A whole record, or None for an unknown key version (to be skipped)."""
    tid = decode_key(key)
    if tid is None:
        return None
    return TxnRecord(tid, decode_value(tid, value))


# --- primitives ---


def _write_uvarint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _write_length(out: bytearray, n: int | None, flexible: bool) -> None:
    if flexible:
        _write_uvarint(out, 0 if n is None else n + 1)
    else:
        out += _I32.pack(-1 if n is None else n)


def _write_string(out: bytearray, s: str, flexible: bool) -> None:
    raw = s.encode()
    if flexible:
        _write_uvarint(out, len(raw) + 1)
    else:
        out += _I16.pack(len(raw))
    out += raw


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise TxnLogFormatError(
                f"transaction log record truncated: need {n} bytes at {self.pos}, "
                f"have {len(self.data) - self.pos}"
            )
        chunk = self.data[self.pos : end]
        self.pos = end
        return bytes(chunk)

    def i8(self) -> int:
        return int(_I8.unpack(self._take(1))[0])

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            byte = self._take(1)[0]
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 28:
                raise TxnLogFormatError("unsigned varint longer than 5 bytes")

    def length(self, flexible: bool) -> int:
        """An array length; -1 for null."""
        return self.uvarint() - 1 if flexible else self.i32()

    def string(self, flexible: bool) -> str | None:
        n = self.uvarint() - 1 if flexible else self.i16()
        if n < 0:
            return None
        try:
            return self._take(n).decode()
        except UnicodeDecodeError as exc:
            raise TxnLogFormatError(f"string is not UTF-8: {exc}") from None

    def tags(self) -> list[tuple[int, bytes]]:
        found = []
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            found.append((tag, self._take(self.uvarint())))
        return found

    def skip_tags(self) -> None:
        self.tags()


def _tag_head(tag: int, size: int) -> bytes:
    """A tagged field's number and size, as written before its value."""
    out = bytearray()
    _write_uvarint(out, tag)
    _write_uvarint(out, size)
    return bytes(out)


_PREVIOUS_PRODUCER_ID_HEAD = _tag_head(_TAG_PREVIOUS_PRODUCER_ID, 8)
_NEXT_PRODUCER_ID_HEAD = _tag_head(_TAG_NEXT_PRODUCER_ID, 8)
_CLIENT_TXN_VERSION_HEAD = _tag_head(_TAG_CLIENT_TXN_VERSION, 2)
_LAST_PRODUCER_EPOCH_HEAD = _tag_head(LAST_PRODUCER_EPOCH_TAG, 2)
