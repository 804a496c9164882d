"""The request memory pool: reservations wait until they fit, whoever fits goes first."""

from __future__ import annotations

import asyncio

import pytest

from oncelog.broker.memory_pool import RequestMemoryPool


def run(coroutine: object) -> None:
    asyncio.run(coroutine)  # type: ignore[arg-type]


def test_reservations_up_to_the_capacity_are_granted_at_once() -> None:
    pool = RequestMemoryPool(100)
    assert pool.try_reserve(60) and pool.try_reserve(40)
    assert not pool.try_reserve(1)
    pool.release(40)
    assert pool.try_reserve(1) and pool.reserved == 61


def test_a_waiting_reservation_is_granted_once_enough_is_released() -> None:
    async def scenario() -> None:
        pool = RequestMemoryPool(100)
        await pool.reserve(70)
        waiting = asyncio.ensure_future(pool.reserve(50))
        await asyncio.sleep(0)
        assert not waiting.done() and pool.waiting == 1
        pool.release(10)
        await asyncio.sleep(0)
        assert not waiting.done(), "60 + 50 does not fit in 100"
        pool.release(60)
        await asyncio.wait_for(waiting, 1)
        assert pool.reserved == 50 and pool.waiting == 0

    run(scenario())


def test_small_reservations_pass_a_large_one_that_waits() -> None:
    """A large frame waiting for room does not hold up requests that fit."""

    async def scenario() -> None:
        pool = RequestMemoryPool(100)
        await pool.reserve(60)
        large = asyncio.ensure_future(pool.reserve(80))
        await asyncio.sleep(0)
        await asyncio.wait_for(pool.reserve(30), 1)  # fits beside the 60: granted now
        assert not large.done()
        pool.release(60)
        pool.release(30)
        await asyncio.wait_for(large, 1)

    run(scenario())


def test_a_frame_larger_than_the_pool_is_read_alone() -> None:
    async def scenario() -> None:
        pool = RequestMemoryPool(100)
        await pool.reserve(10)
        oversized = asyncio.ensure_future(pool.reserve(500))
        await asyncio.sleep(0)
        assert not oversized.done()
        pool.release(10)
        await asyncio.wait_for(oversized, 1)
        assert pool.reserved == 100, "counted as the whole pool"
        assert not pool.try_reserve(1)
        pool.release(500)
        assert pool.reserved == 0

    run(scenario())


def test_a_cancelled_wait_reserves_nothing() -> None:
    async def scenario() -> None:
        pool = RequestMemoryPool(100)
        await pool.reserve(100)
        waiting = asyncio.ensure_future(pool.reserve(50))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        pool.release(100)
        assert pool.reserved == 0 and pool.waiting == 0

    run(scenario())


def test_an_unbounded_pool_never_waits() -> None:
    pool = RequestMemoryPool(None)
    assert pool.try_reserve(10**12) and pool.try_reserve(10**12)


def test_large_frames_leave_the_last_quarter_to_small_requests() -> None:
    mib = 1024 * 1024
    pool = RequestMemoryPool(8 * mib)  # 2 MiB kept for requests of 1 MiB or less
    assert pool.try_reserve(5 * mib)
    assert not pool.try_reserve(2 * mib), "5 + 2 MiB of large frames would eat the headroom"
    assert pool.try_reserve(mib) and pool.try_reserve(mib) and pool.try_reserve(mib)
    assert pool.reserved == 8 * mib


def test_a_frame_larger_than_the_pool_leaves_the_last_quarter_to_small_requests() -> None:
    """Counted at its size, a 100 MiB frame trickling into an 8 MiB pool would stop
    every other request until its read timed out."""
    mib = 1024 * 1024
    pool = RequestMemoryPool(8 * mib)
    assert pool.try_reserve(100 * mib)  # alone: granted, counted as 6 MiB
    assert not pool.try_reserve(2 * mib), "no other large frame beside it"
    assert pool.try_reserve(mib) and pool.try_reserve(mib)
    assert not pool.try_reserve(1)
    pool.release(100 * mib)
    assert pool.reserved == 2 * mib
