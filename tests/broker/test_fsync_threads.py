"""FsyncThreads: the flusher's worker threads and their handoff to the event loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from oncelog.broker.fsync_threads import FsyncThreads

TIMEOUT_S = 30.0


def _job(threads: FsyncThreads, work: Callable[[], Any]) -> asyncio.Future[Any]:
    """``work`` submitted, its answer as a future of the running loop."""
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def answer(result: Any, error: BaseException | None) -> None:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    threads.submit(work, answer)
    return future


def _run(test: Callable[[FsyncThreads], Awaitable[None]], count: int) -> None:
    """Run ``test`` on a fresh loop with ``count`` threads, stopped after."""
    threads = FsyncThreads(count)
    try:
        asyncio.run(asyncio.wait_for(test(threads), TIMEOUT_S * 2))
    finally:
        threads.stop()


def test_a_job_runs_off_the_loop_and_answers_on_it() -> None:
    async def test(threads: FsyncThreads) -> None:
        ran_on = await _job(threads, threading.get_ident)
        assert ran_on != threading.get_ident()

    _run(test, 2)


def test_a_failing_job_raises_its_error_to_the_waiter() -> None:
    def fail() -> int:
        raise OSError(5, "Input/output error")

    async def test(threads: FsyncThreads) -> None:
        with pytest.raises(OSError, match="Input/output error"):
            await _job(threads, fail)
        assert await _job(threads, lambda: 7) == 7  # the thread survived its job's error

    _run(test, 1)


def test_jobs_run_concurrently_on_their_threads() -> None:
    """Two partitions' fsyncs overlap: the second runs while the first still blocks."""
    release = threading.Event()

    async def test(threads: FsyncThreads) -> None:
        blocked = _job(threads, lambda: release.wait(TIMEOUT_S))
        assert await _job(threads, lambda: "free") == "free"
        assert not blocked.done()
        release.set()
        assert await blocked is True

    try:
        _run(test, 2)
    finally:
        release.set()


def test_the_answer_is_called_on_the_loop_thread() -> None:
    async def test(threads: FsyncThreads) -> None:
        answered: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        threads.submit(
            lambda: None, lambda _result, _error: answered.set_result(threading.get_ident())
        )
        assert await answered == threading.get_ident()

    _run(test, 1)


def test_stop_ends_every_thread_after_the_queued_jobs() -> None:
    done: list[int] = []

    async def queue_jobs(threads: FsyncThreads) -> list[asyncio.Future[None]]:
        return [_job(threads, lambda i=i: done.append(i)) for i in range(5)]

    before = {t.name for t in threading.enumerate()}
    threads = FsyncThreads(3, name="fsync-stop-test")
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(queue_jobs(threads))
        threads.stop()
    finally:
        loop.close()
    assert sorted(done) == [0, 1, 2, 3, 4]
    left = {t.name for t in threading.enumerate()} - before
    assert not [name for name in left if name.startswith("fsync-stop-test")]


def test_a_job_after_stop_is_refused_not_left_waiting() -> None:
    threads = FsyncThreads(1, name="fsync-stopped-test")
    threads.stop()

    async def late_job() -> None:
        await _job(threads, lambda: None)

    with pytest.raises(RuntimeError, match="stopped"):
        asyncio.run(asyncio.wait_for(late_job(), 5))
