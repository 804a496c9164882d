"""ListOffsets while a new leader's high watermark lags behind its epoch's start (KIP-207):
OFFSET_NOT_AVAILABLE only where the high watermark would be the answer, as Kafka's
`Partition.fetchOffsetForTimestamp` decides; the earliest offset and a fetchable match are
answered meanwhile."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from oncelog.broker.handlers.list_offsets import EARLIEST, LATEST, MAX_TIMESTAMP, resolve
from oncelog.protocol.errors import ErrorCode, KafkaError

LAGGING = KafkaError(ErrorCode.offset_not_available, "high watermark below the epoch's start")


def partition(by_timestamp: dict[int, tuple[int, int]], max_found: tuple[int, int]) -> Any:
    """A partition with records 0..99 of which 0..59 are below the high watermark (and the
    LSO), the log starting at 10."""
    log = SimpleNamespace(
        offset_for_timestamp=lambda ts: by_timestamp.get(ts), max_timestamp=lambda: max_found
    )
    return SimpleNamespace(log=log, high_watermark=60, last_stable_offset=60, log_start_offset=10)


def test_the_latest_offset_waits_for_the_high_watermark() -> None:
    p = partition({}, (-1, -1))
    assert resolve(p, LATEST, committed=False) == (-1, 60)
    with pytest.raises(KafkaError) as raised:
        resolve(p, LATEST, committed=False, lagging=LAGGING)
    assert raised.value.code == ErrorCode.offset_not_available


def test_the_earliest_offset_is_answered_meanwhile() -> None:
    assert resolve(partition({}, (-1, -1)), EARLIEST, committed=True, lagging=LAGGING) == (-1, 10)


def test_a_fetchable_match_is_answered_meanwhile() -> None:
    p = partition({1_000: (42, 1_001)}, (1_500, 55))
    assert resolve(p, 1_000, committed=True, lagging=LAGGING) == (1_001, 42)
    assert resolve(p, MAX_TIMESTAMP, committed=False, lagging=LAGGING) == (1_500, 55)


@pytest.mark.parametrize(
    ("wanted", "by_timestamp", "max_found"),
    [
        (1_000, {1_000: (70, 1_002)}, (-1, -1)),  # a match past the high watermark
        (2_000, {}, (-1, -1)),  # no match at all
        (MAX_TIMESTAMP, {}, (1_900, 80)),  # the max timestamp past the high watermark
    ],
)
def test_a_lookup_without_a_fetchable_match_waits(
    wanted: int, by_timestamp: dict[int, tuple[int, int]], max_found: tuple[int, int]
) -> None:
    p = partition(by_timestamp, max_found)
    assert resolve(p, wanted, committed=False) == (-1, -1)
    with pytest.raises(KafkaError) as raised:
        resolve(p, wanted, committed=False, lagging=LAGGING)
    assert raised.value.code == ErrorCode.offset_not_available
