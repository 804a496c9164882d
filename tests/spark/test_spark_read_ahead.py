"""A write task's input read ahead: the same batches in the same order, the input's error
where it happened, at most the bound held, and nothing read after the task gave up."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pyarrow as pa
import pytest

from oncelog.spark.read_ahead import ReadAhead

WAIT_S = 10.0  # the most a test waits for the helper thread to get somewhere
SETTLE_S = 0.2  # how long a test gives the helper to read more than it may


def _batch(i: int, size: int = 1000) -> pa.RecordBatch:
    return pa.record_batch([pa.array([b"%d" % i + b"x" * size], pa.binary())], names=["value"])


class _Source:
    """Batches 0..n-1 (then `error`, if any), counting how many were taken."""

    def __init__(self, n: int, error: Exception | None = None, size: int = 1000) -> None:
        self.n = n
        self.error = error
        self.size = size
        self.taken = 0

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for i in range(self.n):
            self.taken += 1
            yield _batch(i, self.size)
        if self.error is not None:
            raise self.error

    def wait_taken(self, count: int) -> None:
        deadline = time.monotonic() + WAIT_S
        while self.taken < count:
            assert time.monotonic() < deadline, f"only {self.taken} of {count} batches taken"
            time.sleep(0.005)


def _values(batches: Iterator[pa.RecordBatch]) -> list[bytes]:
    return [v for batch in batches for v in batch.column(0).to_pylist()]


def test_the_batches_come_in_order_and_all_of_them() -> None:
    source = _Source(50)
    assert _values(ReadAhead(iter(source), 3000)) == _values(iter(_Source(50)))


def test_an_empty_input_ends_at_once() -> None:
    assert list(ReadAhead(iter(_Source(0)), 3000)) == []


def test_the_inputs_error_is_raised_after_the_batches_before_it() -> None:
    ahead = ReadAhead(iter(_Source(3, error=ValueError("the JVM went away"))), 1 << 20)
    assert len([next(ahead) for _ in range(3)]) == 3
    with pytest.raises(ValueError, match="the JVM went away"):
        next(ahead)


@pytest.mark.parametrize(("limit", "held_at_most"), [(2500, 2), (1 << 30, 10)])
def test_at_most_the_bound_is_held_ahead(limit: int, held_at_most: int) -> None:
    """Batches of about 1,000 bytes: under a 2,500-byte bound the thread holds two and
    waits with the third in hand; the unbounded control takes all ten."""
    source = _Source(10)
    ahead = ReadAhead(iter(source), limit)
    source.wait_taken(min(held_at_most + 1, 10))
    time.sleep(SETTLE_S)
    assert source.taken == min(held_at_most + 1, 10)
    assert len(_values(ahead)) == 10  # and the rest follows as the task takes them


def test_a_batch_larger_than_the_bound_is_read_alone() -> None:
    source = _Source(4, size=10_000)
    assert len(_values(ReadAhead(iter(source), 2500))) == 4


def test_after_close_the_thread_reads_no_further_batch() -> None:
    source = _Source(10)
    ahead = ReadAhead(iter(source), 2500)
    source.wait_taken(3)  # two held, the third waiting for room
    ahead.close()
    next(ahead)  # room for the third: it is dropped, not held, and nothing more is read
    time.sleep(SETTLE_S)
    assert source.taken == 3
    assert not any(t.name == "oncelog-sink-input" and t.is_alive() for t in threading.enumerate())
