"""Say where a broker's shutdown is stuck, instead of being killed silently.

A clean stop takes milliseconds. One that hangs is killed by whoever waits for it (the
test harness after 30 s, systemd after its stop timeout), and the log then ends with
whatever the broker did last, which says nothing about what it was waiting for. So the
runner stops the broker under a watch: past ``stall_s`` it logs, for every task on the
event loop, the chain of coroutines the task is suspended in (where ``await`` waits), and
past twice that it dumps every thread's stack with faulthandler, which needs no event loop
(a loop blocked in a call would never run the first report).
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import sys
from collections.abc import Awaitable, Iterable
from types import CoroutineType, FrameType, GeneratorType
from typing import Any

log = logging.getLogger(__name__)

# Begins the report's log line: the test harness looks for it in a hung broker's log.
STALL_REPORT_MARK = "has not finished after"


def await_chain(awaitable: Any) -> list[str]:
    """Where ``awaitable`` (a coroutine or generator) is suspended: one ``function
    (file:line)`` per coroutine it is awaiting through, outermost first, ending with what
    the innermost one waits for when that is not a coroutine (a future, a task)."""
    chain: list[str] = []
    current = awaitable
    while current is not None:
        frame, awaited = _frame_and_awaited(current)
        if frame is None and awaited is None:
            if current is not awaitable:
                chain.append(f"waiting for {_awaited_name(current)}")
            break
        if frame is not None:
            chain.append(_where(frame))
        current = awaited
    return chain


def describe_tasks(tasks: Iterable[asyncio.Task[Any]]) -> str:
    """One block per task: its name, then its await chain, indented."""
    blocks = []
    for task in sorted(tasks, key=lambda t: t.get_name()):
        lines = [f"task {task.get_name()}:"]
        lines += [f"    {step}" for step in await_chain(task.get_coro())]
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


async def watched(stopping: Awaitable[None], what: str, stall_s: float) -> None:
    """Await ``stopping``; if it is not done after ``stall_s``, log every other task's
    await chain, and after ``2 * stall_s`` dump every thread's stack to stderr."""
    faulthandler.dump_traceback_later(2 * stall_s, exit=False, file=sys.stderr)
    report = asyncio.ensure_future(_report_after(what, stall_s))
    try:
        await stopping
    finally:
        faulthandler.cancel_dump_traceback_later()
        report.cancel()


async def _report_after(what: str, stall_s: float) -> None:
    await asyncio.sleep(stall_s)
    me = asyncio.current_task()
    others = [t for t in asyncio.all_tasks() if t is not me]
    log.warning(
        "%s %s %.2g s; where each task waits:\n%s",
        what,
        STALL_REPORT_MARK,
        stall_s,
        describe_tasks(others),
    )


def _frame_and_awaited(current: Any) -> tuple[FrameType | None, Any]:
    if isinstance(current, CoroutineType):
        return current.cr_frame, current.cr_await
    if isinstance(current, GeneratorType):
        return current.gi_frame, current.gi_yieldfrom
    return None, None


def _awaited_name(awaited: Any) -> str:
    # A C future's ``__await__`` iterator hides the future; what it waits for is the
    # coroutine above it (Event.wait, Queue.get, ...).
    return "a future" if type(awaited).__name__ == "FutureIter" else repr(awaited)


def _where(frame: FrameType) -> str:
    code = frame.f_code
    return f"{code.co_qualname} ({code.co_filename}:{frame.f_lineno})"
