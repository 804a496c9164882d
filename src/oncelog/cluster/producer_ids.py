"""Producer ids for a cluster broker: blocks reserved in ZooKeeper, the next one fetched
ahead.

Every block comes from a compare-and-set of ``/latest_producer_id_block`` (see
``ZooKeeperSession.allocate_producer_ids``), so no two brokers ever hand out the same id,
whatever crashes: a broker that dies loses what was left of its block, never reuses it.

The transaction coordinator decides InitProducerId synchronously, inside its pure shard,
so it cannot wait for ZooKeeper there. As Kafka's ``RPCProducerIdManager`` does, the next
block is fetched in the background once the current one is 90 % used, and a request that
finds no id at hand is answered COORDINATOR_LOAD_IN_PROGRESS (clients retry it) while the
block arrives. Request handlers call ``ready()`` first, so that answer is rare.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from oncelog.broker.coordinator_runtime import CoordinatorError
from oncelog.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

PREFETCH_AT = 0.9  # fetch the next block once this share of the current one is handed out

Reserve = Callable[[], Awaitable[tuple[int, int]]]


class ProducerIdBlocks:
    """Hands out the ids of blocks ``reserve()`` returns as (first, last)."""

    def __init__(self, reserve: Reserve) -> None:
        self._reserve = reserve
        self._next = 0
        self._last = -1  # nothing at hand
        self._block_size = 0
        self._ahead: tuple[int, int] | None = None
        self._fetching: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None

    @property
    def at_hand(self) -> int:
        """Ids that can be handed out without waiting for ZooKeeper."""
        ahead = 0 if self._ahead is None else self._ahead[1] - self._ahead[0] + 1
        return self._last - self._next + 1 + ahead

    def take(self) -> int:
        """The next id (CoordinatorError COORDINATOR_LOAD_IN_PROGRESS when none is at hand:
        a block is being fetched, the client retries)."""
        if self._next > self._last and self._ahead is not None:
            self._use(self._ahead)
            self._ahead = None
        if self._next > self._last:
            self._fetch()
            raise CoordinatorError(
                ErrorCode.coordinator_load_in_progress,
                "reserving a block of producer ids in ZooKeeper",
            )
        producer_id = self._next
        self._next += 1
        used = self._block_size - (self._last - self._next + 1)
        if self._ahead is None and used >= PREFETCH_AT * self._block_size:
            self._fetch()
        return producer_id

    async def ready(self) -> None:
        """Return once an id is at hand (CoordinatorError COORDINATOR_NOT_AVAILABLE if
        ZooKeeper could not give a block)."""
        while self.at_hand == 0:
            self._fetch()
            assert self._fetching is not None
            await asyncio.shield(self._fetching)
            if self.at_hand == 0 and self._failure is not None:
                raise CoordinatorError(
                    ErrorCode.coordinator_not_available,
                    f"could not reserve producer ids: {self._failure}",
                )

    async def stop(self) -> None:
        if self._fetching is not None:
            self._fetching.cancel()
            await asyncio.gather(self._fetching, return_exceptions=True)

    def _use(self, block: tuple[int, int]) -> None:
        self._next, self._last = block
        self._block_size = self._last - self._next + 1

    def _fetch(self) -> None:
        if self._fetching is None or self._fetching.done():
            self._fetching = asyncio.ensure_future(self._fetch_block())

    async def _fetch_block(self) -> None:
        try:
            block = await self._reserve()
        except Exception as exc:  # ZooKeeper unreachable, session lost: the next call retries
            log.warning("could not reserve a block of producer ids: %s", exc)
            self._failure = exc
            return
        self._failure = None
        log.info("producer ids %d..%d reserved in ZooKeeper", *block)
        if self._next > self._last:
            self._use(block)
        else:
            self._ahead = block
