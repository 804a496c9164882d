"""Threads that run whole flushes for the event loop, handed off as cheaply as Python
allows: the flusher's while the file cache is crowded (durability.py; otherwise its
fsyncs run on threads that never take the GIL, _fsync_pool.c).

A transaction waits for four or five fsyncs in turn (AddPartitionsToTxn's record, the
produced batch, PREPARE_COMMIT, the markers, COMPLETE_COMMIT), each on a worker thread.
``loop.run_in_executor`` costs about 60 Python calls on the event loop per handoff (callback
checks, a concurrent future chained to an asyncio one, the pool's locks and bookkeeping);
here a job is one ``SimpleQueue.put`` and its answer one ``call_soon_threadsafe`` of the
caller's callback itself. A future's answer costs one more turn of the event loop (a
future's done-callbacks and a task's wake-up are each scheduled with ``call_soon``): with
16 transactional producers that turn took 0.35-0.38 ms at the median and 0.9-1.1 ms at p90
(scratch timestamps, 2026-11-24 10:00 UTC, a quiet machine).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any

# Called on the loop with the job's result, or with its exception (the result then None).
Answer = Callable[[Any, BaseException | None], None]

_Job = tuple[asyncio.AbstractEventLoop, Callable[[], Any], Answer]


class FsyncThreads:
    """``count`` daemon threads taking jobs from one queue; ``stop`` ends them once the
    jobs queued before it are done, and refuses any later job (no thread would take it,
    and its caller would wait for ever)."""

    def __init__(self, count: int, name: str = "fsync") -> None:
        self._stopped = False
        self._jobs: SimpleQueue[_Job | None] = SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}_{i}", daemon=True)
            for i in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, work: Callable[[], Any], answer: Answer) -> None:
        """Run ``work()`` on a worker thread, then ``answer(result, None)`` or
        ``answer(None, exception)`` on the running loop, in the loop turn that sees the
        thread's wake-up. RuntimeError once stopped."""
        if self._stopped:
            raise RuntimeError("the fsync threads have stopped")
        self._jobs.put((asyncio.get_running_loop(), work, answer))

    def stop(self) -> None:
        self._stopped = True
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join()

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            loop, work, answer = job
            try:
                result = work()
            except BaseException as exc:  # the caller on the loop decides what it means
                _call(loop, answer, None, exc)
            else:
                _call(loop, answer, result, None)


def _call(
    loop: asyncio.AbstractEventLoop, answer: Answer, result: Any, error: BaseException | None
) -> None:
    try:
        loop.call_soon_threadsafe(answer, result, error)
    except RuntimeError:  # the loop is closed: nobody waits any more
        pass
