"""The connection's answer queue: FIFO, bounded (a put waits for room), a get waits for an
item, join waits for every task_done, and a cancelled waiter leaves it usable."""

from __future__ import annotations

import asyncio
import random

import pytest

from oncelog.broker.answer_queue import AnswerQueue


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_a_put_waits_for_room_and_a_get_for_an_item() -> None:
    async def scenario() -> None:
        queue: AnswerQueue[int] = AnswerQueue(2)
        await queue.put(1)
        await queue.put(2)
        third = asyncio.ensure_future(queue.put(3))
        await _turns()
        assert not third.done(), "a third put into a queue of two must wait"
        assert await queue.get() == 1
        await _turns()
        assert third.done()
        assert [await queue.get(), await queue.get()] == [2, 3]
        getter = asyncio.ensure_future(queue.get())
        await _turns()
        assert not getter.done(), "a get from an empty queue must wait"
        await queue.put(4)
        assert await asyncio.wait_for(getter, 1) == 4

    asyncio.run(scenario())


def test_join_waits_for_every_item_to_be_done() -> None:
    async def scenario() -> None:
        queue: AnswerQueue[str] = AnswerQueue(8)
        await asyncio.wait_for(queue.join(), 1)  # nothing put: at once
        for item in "abc":
            await queue.put(item)
        joiners = [asyncio.ensure_future(queue.join()) for _ in range(2)]
        for item in "abc":
            assert await queue.get() == item
            await _turns()
            assert not any(j.done() for j in joiners)
            queue.task_done()
        await asyncio.wait_for(asyncio.gather(*joiners), 1)
        with pytest.raises(ValueError):
            queue.task_done()

    asyncio.run(scenario())


def test_cancelled_waiters_leave_the_queue_usable() -> None:
    async def scenario() -> None:
        queue: AnswerQueue[int] = AnswerQueue(1)
        getter = asyncio.ensure_future(queue.get())
        await _turns()
        getter.cancel()
        await _turns()
        await queue.put(1)
        putter = asyncio.ensure_future(queue.put(2))
        await _turns()
        putter.cancel()
        await _turns()
        assert queue.get_nowait() == 1 and queue.empty()
        await asyncio.wait_for(queue.put(3), 1)
        assert await asyncio.wait_for(queue.get(), 1) == 3
        joiner = asyncio.ensure_future(queue.join())
        await _turns()
        joiner.cancel()
        queue.task_done()
        queue.task_done()
        await asyncio.wait_for(queue.join(), 1)
        with pytest.raises(IndexError):
            queue.get_nowait()

    asyncio.run(scenario())


def test_one_putter_and_one_getter_at_random_speeds() -> None:
    """A producer and a consumer task at random speeds: the consumer sees every item once,
    in order, the queue never holds more than its size, and join ends (asyncio.Queue run
    the same way is the reference the figures are checked against)."""

    async def run(queue: AnswerQueue[int] | asyncio.Queue[int], seed: int) -> list[int]:
        rng = random.Random(seed)
        pauses = [rng.randint(0, 3) for _ in range(600)]
        seen: list[int] = []
        most = 0

        async def putter() -> None:
            for i in range(300):
                await _turns(pauses[i])
                await queue.put(i)

        async def getter() -> None:
            nonlocal most
            for i in range(300):
                await _turns(pauses[300 + i])
                held = len(queue._items) if isinstance(queue, AnswerQueue) else queue.qsize()
                most = max(most, held)
                seen.append(await queue.get())
                queue.task_done()

        await asyncio.wait_for(asyncio.gather(putter(), getter(), queue.join()), 10)
        assert most <= 3
        return seen

    for seed in range(5):
        ours = asyncio.run(run(AnswerQueue(3), seed))
        theirs = asyncio.run(run(asyncio.Queue(3), seed))
        assert ours == theirs == list(range(300))


def test_a_second_waiting_getter_or_putter_fails_loudly() -> None:
    """One task of each kind waits at a time; a second would never be woken, so it is
    refused instead of left hanging."""

    async def scenario() -> None:
        queue: AnswerQueue[int] = AnswerQueue(1)
        first = asyncio.ensure_future(queue.get())
        await _turns()
        with pytest.raises(AssertionError, match="second task waits to get"):
            await asyncio.wait_for(queue.get(), 1)  # bounded: without the check it hangs
        await queue.put(1)
        assert await asyncio.wait_for(first, 1) == 1
        await queue.put(2)
        blocked = asyncio.ensure_future(queue.put(3))
        await _turns()
        with pytest.raises(AssertionError, match="second task waits to put"):
            await asyncio.wait_for(queue.put(4), 1)
        assert queue.get_nowait() == 2
        await asyncio.wait_for(blocked, 1)

    asyncio.run(scenario())
