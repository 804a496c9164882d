"""Threads that run the flusher's fsyncs for the event loop, handed off as cheaply as
Python allows.

A transaction waits for four or five fsyncs in turn (AddPartitionsToTxn's record, the
produced batch, PREPARE_COMMIT, the markers, COMPLETE_COMMIT), each on a worker thread.
``loop.run_in_executor`` costs about 60 Python calls on the event loop per handoff (callback
checks, a concurrent future chained to an asyncio one, the pool's locks and bookkeeping);
here a job is one ``SimpleQueue.put`` and its answer one ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any, TypeVar

T = TypeVar("T")

_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[[], Any]]


class FsyncThreads:
    """``count`` daemon threads taking jobs from one queue; ``stop`` ends them once the
    jobs queued before it are done, and refuses any later job (no thread would take it,
    and its waiter would wait for ever)."""

    def __init__(self, count: int, name: str = "fsync") -> None:
        self._stopped = False
        self._jobs: SimpleQueue[_Job | None] = SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}_{i}", daemon=True)
            for i in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def run(self, work: Callable[[], T]) -> asyncio.Future[T]:
        """``work()`` on a worker thread: a future of the running loop with its result or
        its exception. RuntimeError once stopped."""
        if self._stopped:
            raise RuntimeError("the fsync threads have stopped")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put((loop, future, work))
        return future

    def stop(self) -> None:
        self._stopped = True
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join()

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            loop, future, work = job
            try:
                result = work()
            except BaseException as exc:  # the waiter on the loop decides what it means
                _answer(loop, future, None, exc)
            else:
                _answer(loop, future, result, None)


def _answer(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    result: Any,
    error: BaseException | None,
) -> None:
    try:
        loop.call_soon_threadsafe(_settle, future, result, error)
    except RuntimeError:  # the loop is closed: nobody waits any more
        pass


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
