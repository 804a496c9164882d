"""The memory pool for request bytes in flight (Kafka's `queued.max.request.bytes`).

A connection reserves a request's declared size from the pool before it reads the
request's body, and gives it back once the request has been handled. While the pool
cannot hold a frame, that connection reads nothing more: the client's bytes wait in the
kernel's socket buffers, not in the broker's memory. So however many connections declare
large frames and trickle them in, the broker holds at most the pool's capacity of request
bytes (and, for a moment, twice a frame while it is copied out of the read buffer).

Waiting reservations are granted whenever they fit, not strictly first come first served:
while a large frame waits for room, the small requests of well-behaved clients keep
flowing instead of queueing behind it. For the same reason frames larger than
SMALL_REQUEST_BYTES (1 MiB, the request size clients send by default) may fill the pool
only up to its last quarter (64 MiB at most): a few connections declaring huge frames
and trickling them in cannot take the room every other client needs. A frame too large
for what it may use is granted when nothing else is reserved, as Kafka's non-strict pool
lets one request exceed it, and is counted as the whole of what it may use: the last
quarter stays for small requests even then (counted at its size, a frame larger than
the pool trickling in would stop every other client until its read timed out). So the
broker holds at most the capacity, or one such frame and the last quarter.
"""

from __future__ import annotations

import asyncio

# librdkafka's message.max.bytes and the Java client's max.request.size default to ~1 MB.
SMALL_REQUEST_BYTES = 1024 * 1024
MAX_HEADROOM_BYTES = 64 * 1024 * 1024


class RequestMemoryPool:
    """Bytes reserved by requests being read or handled, bounded by `capacity`
    (None: unbounded, Kafka's -1)."""

    def __init__(self, capacity: int | None) -> None:
        self.capacity = capacity
        # kept for small requests: large frames may not reserve the last `headroom` bytes
        self.headroom = 0 if capacity is None else min(capacity // 4, MAX_HEADROOM_BYTES)
        self.reserved = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    def fits(self, size: int) -> bool:
        return self.capacity is None or self.reserved + self._charge(size) <= self._share(size)

    def try_reserve(self, size: int) -> bool:
        """Reserve `size` bytes if they fit now."""
        capacity = self.capacity
        # A frame of an unbounded pool, or a small one that fits it, is charged its own
        # size and its share is the whole pool (``_charge``, ``_share``): written out,
        # as every request but a large one comes here and a call costs more than the test.
        if capacity is None or (size <= SMALL_REQUEST_BYTES and size <= capacity):
            if capacity is not None and self.reserved + size > capacity:
                return False
            self.reserved += size
            return True
        if not self.fits(size):
            return False
        self.reserved += self._charge(size)
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
        capacity = self.capacity
        if capacity is None or (size <= SMALL_REQUEST_BYTES and size <= capacity):
            self.reserved -= size  # charged its own size: written out as in ``try_reserve``
        else:
            self.reserved -= self._charge(size)
        assert self.reserved >= 0, "released more request bytes than were reserved"
        if self._waiters:
            self._grant_waiters()

    def _grant_waiters(self) -> None:
        for entry in list(self._waiters):
            size, waiter = entry
            if not waiter.done() and self.fits(size):
                self._waiters.remove(entry)
                self.reserved += self._charge(size)
                waiter.set_result(None)

    def _share(self, size: int) -> int:
        """How much of the pool a frame of `size` may fill: small requests all of it,
        larger frames all but the headroom."""
        assert self.capacity is not None
        return self.capacity if size <= SMALL_REQUEST_BYTES else self.capacity - self.headroom

    def _charge(self, size: int) -> int:
        """What a frame of `size` counts for: its size, or its whole share if larger (a
        frame too large for its share is granted alone, see the module docstring)."""
        return size if self.capacity is None else min(size, self._share(size))

    @property
    def waiting(self) -> int:
        """Connections waiting for room."""
        return len(self._waiters)
