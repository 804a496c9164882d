"""The range reader's Arrow batches hold, row for row, what the client's messages say.

`to_record_batch` builds columns without a call per message where it can (the offsets of
a gapless run from its two ends, one timestamp type for the whole batch); each case here
compares it with the plain definition, one message at a time: a shortcut taken where it
does not hold shows up as a wrong row.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Message

from oncelog.spark.consume import ROWS_PER_BATCH, to_record_batch
from oncelog.spark.schema import arrow_schema

CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP = 1, 2, 0  # librdkafka's timestamp types
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _messages(
    offsets: Sequence[int],
    kinds: Sequence[int] = (CREATE_TIME,),
    keys: Sequence[bytes | None] = (b"k",),
    headers: Sequence[list[tuple[str, bytes]] | None] = (None,),
) -> list[Any]:
    """Messages at `offsets`; kinds, keys and headers repeat in turn."""
    return [
        Message(
            topic="t",
            partition=2,
            offset=offset,
            key=keys[i % len(keys)],
            value=b"value-%d" % offset,
            timestamp=(
                kinds[i % len(kinds)],
                -1 if kinds[i % len(kinds)] == NO_TIMESTAMP else 1_700_000_000_000 + 7 * i,
            ),
            headers=headers[i % len(headers)],
        )
        for i, offset in enumerate(offsets)
    ]


def _row(message: Any, include_headers: bool) -> dict[str, Any]:
    """One message as Spark's Kafka source gives it, field by field."""
    kind, millis = message.timestamp()
    row = {
        "key": message.key(),
        "value": message.value(),
        "topic": "t",
        "partition": 2,
        "offset": message.offset(),
        "timestamp": None if kind == NO_TIMESTAMP else EPOCH + timedelta(milliseconds=millis),
        "timestampType": None if kind == NO_TIMESTAMP else kind - 1,
    }
    if include_headers:
        row["headers"] = [{"key": k, "value": v} for k, v in message.headers() or ()]
    return row


CASES = {
    "gapless offsets": _messages(range(100, 100 + ROWS_PER_BATCH)),
    "one message": _messages([41]),
    "a commit marker's gap": _messages([*range(0, 10), *range(11, 20)]),
    # the two ends are n - 1 apart only if no offset is missing between them
    "a gap at the start": _messages([0, *range(2, 20)]),
    "a gap at the end": _messages([*range(0, 19), 20]),
    "compacted": _messages([3, 8, 9, 15, 100]),
    "more than a consume() batch": _messages(range(5, 5 + ROWS_PER_BATCH + 3)),
    "log-append time": _messages(range(50), kinds=[LOG_APPEND_TIME]),
    "no timestamps": _messages(range(50), kinds=[NO_TIMESTAMP]),
    "mixed timestamp types": _messages(range(50), kinds=[CREATE_TIME, NO_TIMESTAMP, 2]),
    "null keys": _messages(range(30), keys=[None, b"", b"k"]),
    "headers": _messages(range(30), headers=[None, [("h", b"1"), ("h", b"2")], [("e", b"")]]),
}


@pytest.mark.parametrize("include_headers", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_row_is_the_message_it_came_from(case: str, include_headers: bool) -> None:
    messages = CASES[case]
    batch = to_record_batch(messages, "t", 2, include_headers)
    assert batch.schema == arrow_schema(include_headers)
    assert batch.to_pylist() == [_row(m, include_headers) for m in messages]


def test_a_timestamp_whose_microseconds_overflow_is_refused_as_spark_refuses_it() -> None:
    (message,) = _messages([0])
    late = Message(topic="t", partition=2, offset=0, value=b"", timestamp=(CREATE_TIME, 2**62))
    assert to_record_batch([message], "t", 2, False).num_rows == 1
    with pytest.raises(pa.ArrowInvalid, match="out of bounds"):
        to_record_batch([late], "t", 2, False)
