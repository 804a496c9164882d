"""Reading DescribeTransactions responses, which kio cannot read (a workaround).

Kafka sends ``transaction_start_time`` -1 while an id has no transaction (state Empty) and in
every error entry, in a field the schema declares as a non-nullable int64 timestamp. kio
0.6.5 (the version pinned in pyproject.toml) refuses a negative value there ("Cannot parse
negative timestamp"), so its decoder fails on most real responses. Version 0 is small:
this module reads it with kio's own primitive readers, the timestamp as a plain int64. The
broker side is not affected (it writes the field as a datetime one millisecond before the
epoch, which kio encodes as -1).

``tests/protocol/test_describe_transactions.py`` checks that kio still refuses such a
response; when a kio upgrade reads it, that test fails and this module can go.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from kio.serial.errors import DecodeError
from kio.serial.readers import (
    read_compact_array_length,
    read_compact_string,
    read_int16,
    read_int32,
    read_int64,
    read_unsigned_varint,
)

__all__ = [
    "DESCRIBE_TRANSACTIONS_VERSION",
    "DescribeTransactionsDecodeError",
    "DescribedTransaction",
    "decode_describe_transactions",
]

T = TypeVar("T")

DESCRIBE_TRANSACTIONS_VERSION = 0  # the version this module reads (flexible, header v1)


class DescribeTransactionsDecodeError(ValueError):
    """The response does not fit DescribeTransactions v0."""


@dataclass(frozen=True, slots=True)
class DescribedTransaction:
    """One entry of a DescribeTransactions response, as sent (-1 where Kafka sends it)."""

    error_code: int
    transactional_id: str
    state: str  # the Kafka name, as TxnState.kafka_name
    timeout_ms: int
    start_time_ms: int  # -1: no transaction started
    producer_id: int
    producer_epoch: int
    partitions: dict[str, list[int]]  # topic -> partitions of the current transaction


def decode_describe_transactions(frame: bytes) -> tuple[int, list[DescribedTransaction]]:
    """Correlation id and entries of a DescribeTransactions v0 response frame (without its
    size prefix); DescribeTransactionsDecodeError if the bytes do not fit."""
    reader = _Reader(frame)
    try:
        correlation_id = reader.read(read_int32)
        reader.skip_tags()  # response header v1
        reader.read(read_int32)  # throttle time
        entries = [_entry(reader) for _ in range(reader.count())]
        reader.skip_tags()
    except (DecodeError, ValueError) as exc:  # kio's underflows; bad UTF-8
        raise DescribeTransactionsDecodeError(f"unreadable DescribeTransactions: {exc}") from exc
    if reader.pos != len(frame):
        raise DescribeTransactionsDecodeError(
            f"{len(frame) - reader.pos} bytes after the DescribeTransactions response"
        )
    return correlation_id, entries


def _entry(r: _Reader) -> DescribedTransaction:
    error_code, transactional_id = r.read(read_int16), r.read(read_compact_string)
    state = r.read(read_compact_string)
    timeout_ms, start_time_ms = r.read(read_int32), r.read(read_int64)
    producer_id, producer_epoch = r.read(read_int64), r.read(read_int16)
    partitions: dict[str, list[int]] = {}
    for _ in range(r.count()):
        topic = r.read(read_compact_string)
        partitions[topic] = [r.read(read_int32) for _ in range(r.count())]
        r.skip_tags()
    r.skip_tags()
    return DescribedTransaction(
        error_code,
        transactional_id,
        state,
        timeout_ms,
        start_time_ms,
        producer_id,
        producer_epoch,
        partitions,
    )


class _Reader:
    """A position in the frame, moved on by kio's primitive readers (each returns the value
    and how many bytes it took)."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def read(self, reader: Callable[[bytes, int], tuple[T, int]]) -> T:
        value, size = reader(self.data, self.pos)
        self.pos += size
        return value

    def count(self) -> int:
        """A compact array's length; a null array (never sent here) counts as empty."""
        return self.read(read_compact_array_length) or 0

    def skip_tags(self) -> None:
        for _ in range(self.read(read_unsigned_varint)):
            self.read(read_unsigned_varint)  # the tag
            self.pos += self.read(read_unsigned_varint)  # its size
