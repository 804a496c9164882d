"""The answers a connection owes, in request order, between its reader and its responder.

What the server needs of ``asyncio.Queue`` (``put`` that waits for room, ``get`` that waits
for an item, ``task_done``/``join``, and emptying it when the connection ends), for one
task putting and one task getting, as the server has them. ``asyncio.Queue`` serves any
number of both: its put and get each go through five or six Python helpers and a wake-up
of a waiter list, about fifteen Python calls a request on the event loop, which every
request of every transaction pays (bench/txn_calls.py, issue 12). Here a put or a get is
one call and a deque operation.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class AnswerQueue(Generic[T]):
    """A FIFO of at most ``maxsize`` items for one putting and one getting task.

    A second task waiting in ``put`` (or in ``get``) while another does would never be
    woken: it fails an assertion instead; the server never has one. ``join`` may be
    awaited by any number of tasks.
    """

    def __init__(self, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be at least 1, not {maxsize}")
        self._items: deque[T] = deque()
        self._maxsize = maxsize
        self._unfinished = 0  # put and not yet task_done
        self._added: asyncio.Future[None] | None = None  # the getter waits for an item
        self._room: asyncio.Future[None] | None = None  # the putter waits for room
        self._joiners: list[asyncio.Future[None]] = []

    def empty(self) -> bool:
        return not self._items

    async def put(self, item: T) -> None:
        """Add ``item`` at the end, once fewer than ``maxsize`` items are queued."""
        while len(self._items) >= self._maxsize:
            assert self._room is None, "a second task waits to put"
            self._room = asyncio.get_running_loop().create_future()
            try:
                await self._room
            finally:
                self._room = None
        self._items.append(item)
        self._unfinished += 1
        added = self._added
        if added is not None and not added.done():
            added.set_result(None)

    async def get(self) -> T:
        """The first item, once there is one."""
        while not self._items:
            assert self._added is None, "a second task waits to get"
            self._added = asyncio.get_running_loop().create_future()
            try:
                await self._added
            finally:
                self._added = None
        return self._taken(self._items.popleft())

    def get_nowait(self) -> T:
        """The first item; IndexError if there is none."""
        return self._taken(self._items.popleft())

    def _taken(self, item: T) -> T:
        room = self._room
        if room is not None and not room.done():
            room.set_result(None)
        return item

    def task_done(self) -> None:
        """One item taken is dealt with; ``join`` returns once every item put is."""
        if self._unfinished <= 0:
            raise ValueError("task_done() called more times than there were items")
        self._unfinished -= 1
        if not self._unfinished:
            for joiner in self._joiners:
                if not joiner.done():
                    joiner.set_result(None)
            self._joiners.clear()

    async def join(self) -> None:
        """Wait until every item put so far is dealt with (``task_done``)."""
        if self._unfinished:
            joiner = asyncio.get_running_loop().create_future()
            self._joiners.append(joiner)
            await joiner
