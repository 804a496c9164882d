"""The cleaner's byte-rate limit, on a fake clock: how long it makes the caller wait."""

from __future__ import annotations

import sys

import pytest

from oncelog.storage.throttle import Throttler


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.waits: list[float] = []
        self.stop = False

    def clock(self) -> float:
        return self.now

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        self.now += seconds
        return self.stop


def throttler(fake: FakeTime, rate: float) -> Throttler:
    return Throttler(rate, fake.wait, fake.clock, check_interval_s=0.3)


def test_bytes_done_faster_than_the_limit_are_waited_for() -> None:
    fake = FakeTime()
    limit = throttler(fake, 1000.0)
    for _ in range(10):  # 1,000 bytes at once: the limit allows them in one second
        assert limit.done(100) is False
    # waited for in windows of the check interval; the last 100 bytes are not due yet
    assert fake.waits == [pytest.approx(0.3)] * 3
    fake.now += 0.5  # 400 bytes more, 0.5 s later: 500 in half a second, on time
    assert limit.done(400) is False
    assert fake.waits == [pytest.approx(0.3)] * 3


def test_the_whole_run_takes_as_long_as_the_limit_says() -> None:
    fake = FakeTime()
    limit = throttler(fake, 10_000.0)
    start = fake.now
    for _ in range(1000):  # 100,000 bytes, 1 ms of work each 100
        fake.now += 0.001
        limit.done(100)
    assert fake.now - start == pytest.approx(10.0, abs=0.35)


def test_a_short_burst_is_held_before_the_check_interval_has_passed() -> None:
    fake = FakeTime()
    limit = throttler(fake, 1000.0)
    limit.done(600)  # no time has passed at all: still worth 0.6 s at the limit
    assert fake.waits == [pytest.approx(0.6)]


def test_no_limit_never_waits() -> None:
    fake = FakeTime()
    for rate in (sys.float_info.max, float("inf")):
        limit = throttler(fake, rate)
        for _ in range(100):
            assert limit.done(10**9) is False
    assert fake.waits == []


def test_a_stop_during_the_wait_is_reported() -> None:
    fake = FakeTime()
    fake.stop = True
    assert throttler(fake, 1000.0).done(10_000) is True


@pytest.mark.parametrize("rate", [0.0, -1.0, float("nan")])
def test_a_rate_must_be_positive(rate: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        Throttler(rate, FakeTime().wait)
