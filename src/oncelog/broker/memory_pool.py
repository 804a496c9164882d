"""The memory pool for request bytes in flight (Kafka's `queued.max.request.bytes`).

A connection reserves a request's declared size from the pool before it reads the
request's body, and gives it back once the request has been handled. While the pool
cannot hold a frame, that connection reads nothing more: the client's bytes wait in the
kernel's socket buffers, not in the broker's memory. So however many connections declare
large frames and trickle them in, the broker holds at most the pool's capacity of request
bytes (and, for a moment, twice a frame while it is copied out of the read buffer).

Waiting reservations are granted whenever they fit, not strictly first come first served:
while a large frame waits for room, the small requests of well-behaved clients keep
flowing instead of queueing behind it. A frame larger than the whole pool is granted when
nothing else is reserved, as Kafka's non-strict pool lets one request exceed it.
"""

from __future__ import annotations

import asyncio


class RequestMemoryPool:
    """Bytes reserved by requests being read or handled, bounded by `capacity`
    (None: unbounded, Kafka's -1)."""

    def __init__(self, capacity: int | None) -> None:
        self.capacity = capacity
        self.reserved = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    def fits(self, size: int) -> bool:
        return self.capacity is None or self.reserved + size <= self.capacity or not self.reserved

    def try_reserve(self, size: int) -> bool:
        """Reserve `size` bytes if they fit now."""
        if not self.fits(size):
            return False
        self.reserved += size
        return True

    async def reserve(self, size: int) -> None:
        """Reserve `size` bytes, waiting until they fit."""
        if self.try_reserve(size):
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((size, waiter))
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.release(size)  # granted just as the wait was cancelled
            else:
                self._waiters.remove((size, waiter))
            raise

    def release(self, size: int) -> None:
        self.reserved -= size
        assert self.reserved >= 0, "released more request bytes than were reserved"
        self._grant_waiters()

    def _grant_waiters(self) -> None:
        for entry in list(self._waiters):
            size, waiter = entry
            if not waiter.done() and self.fits(size):
                self._waiters.remove(entry)
                self.reserved += size
                waiter.set_result(None)

    @property
    def waiting(self) -> int:
        """Connections waiting for room."""
        return len(self._waiters)
