"""The DescribeTransactions decoder that works around kio 0.6.5 (negative start times)."""

from __future__ import annotations

import datetime
from importlib.metadata import version

import pytest
from kio.serial.errors import OutOfBoundValue

from oncelog.protocol import codec
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.describe_transactions import (
    DESCRIBE_TRANSACTIONS_VERSION,
    DescribedTransaction,
    DescribeTransactionsDecodeError,
    decode_describe_transactions,
)
from oncelog.protocol.errors import ErrorCode

EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)
API = codec.api_codec(ApiKey.DESCRIBE_TRANSACTIONS, DESCRIBE_TRANSACTIONS_VERSION)


def _state(tid: str, start_ms: int, **fields: object) -> dict[str, object]:
    return {
        "error_code": ErrorCode.none,
        "transactional_id": tid,
        "transaction_state": "Empty",
        "transaction_timeout": 60_000,
        # as the broker writes it: -1 ms is a datetime one millisecond before the epoch
        "transaction_start_time": EPOCH + datetime.timedelta(milliseconds=start_ms),
        "producer_id": 7,
        "producer_epoch": 2,
        "topics": [],
        **fields,
    }


def _frame(*states: dict[str, object]) -> bytes:
    """A response frame as a client receives it (without the size prefix)."""
    framed = codec.encode_response(0x7E57, API, {"throttle_time": 0, "transaction_states": states})
    return framed[4:]


IDLE = _state("idle", -1)
OPEN = _state(
    "open",
    1_700_000_000_123,
    transaction_state="Ongoing",
    topics=[{"topic": "orders", "partitions": [2, 0]}, {"topic": "audit", "partitions": [1]}],
)
MISSING = _state("gone", -1, error_code=ErrorCode.transactional_id_not_found, producer_id=-1)


def test_kio_still_cannot_read_a_negative_start_time() -> None:
    """The reason for the workaround. When a kio upgrade reads this, drop
    oncelog.protocol.describe_transactions and use the codec."""
    assert version("kio") == "0.6.5"
    with pytest.raises(OutOfBoundValue, match="negative"):
        codec.decode_response(API, _frame(IDLE))


def test_the_workaround_reads_what_kio_cannot() -> None:
    correlation_id, entries = decode_describe_transactions(_frame(IDLE, OPEN, MISSING))
    assert correlation_id == 0x7E57
    assert entries == [
        DescribedTransaction(0, "idle", "Empty", 60_000, -1, 7, 2, {}),
        DescribedTransaction(
            0, "open", "Ongoing", 60_000, 1_700_000_000_123, 7, 2, {"orders": [2, 0], "audit": [1]}
        ),
        DescribedTransaction(
            ErrorCode.transactional_id_not_found, "gone", "Empty", 60_000, -1, -1, 2, {}
        ),
    ]


def test_it_agrees_with_kio_where_kio_can_read() -> None:
    _, (entry,) = decode_describe_transactions(_frame(OPEN))
    _, response = codec.decode_response(API, _frame(OPEN))
    (state,) = response.transaction_states
    assert entry.start_time_ms == int(
        (state.transaction_start_time - EPOCH) / datetime.timedelta(milliseconds=1)
    )
    assert entry.partitions == {t.topic: list(t.partitions) for t in state.topics}


def test_every_truncation_and_trailing_bytes_are_refused() -> None:
    frame = _frame(IDLE, OPEN)
    for end in range(len(frame)):
        with pytest.raises(DescribeTransactionsDecodeError):
            decode_describe_transactions(frame[:end])
    with pytest.raises(DescribeTransactionsDecodeError, match="1 bytes after"):
        decode_describe_transactions(frame + b"\0")
