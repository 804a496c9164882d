"""Requests of one kind from this broker to another, batched (Kafka's
InterBrokerSendThread, one per destination): whatever is queued while a request is out
leaves together in the next one, and only one is in flight at a time.

A subclass says how queued entries become one request (``_batch``, ``_request``) and how
the response answers them (``_answer``). An entry the request could not carry (the broker
is not registered, the connection broke) is failed with a code its sender retries on.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from oncelog.cluster.peer import PeerError, PeerLink
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from oncelog.cluster.node import ClusterNode

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms


class Entry(Protocol):
    """One queued item, answered (or failed) exactly once."""

    def fail(self, code: ErrorCode) -> None: ...


E = TypeVar("E", bound=Entry)


class BatchingChannel(ABC, Generic[E]):
    """Sends ``api_key`` requests at ``version`` to broker ``broker_id``."""

    api_key: ApiKey
    version: int

    def __init__(self, node: ClusterNode, broker_id: int) -> None:
        self._node = node
        self.broker_id = broker_id
        self._queue: list[E] = []
        self._wake = asyncio.Event()
        self._link = PeerLink(
            node.cache,
            broker_id,
            f"broker-{node.broker_id}-{self.api_key.name.lower()}",
            node.peer_security,
        )
        self._task: asyncio.Task[None] | None = None

    def send(self, entry: E) -> None:
        self._queue.append(entry)
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for entry in self._queue:
            entry.fail(ErrorCode.not_leader_or_follower)
        self._queue.clear()
        self._link.close()

    # -- what a subclass decides -----------------------------------------------------------

    def _batch(self, queued: Sequence[E]) -> tuple[list[E], list[E]]:
        """The entries the next request carries, and those left for a later one."""
        return list(queued), []

    @abstractmethod
    def _request(self, batch: Sequence[E]) -> dict[str, Any]:
        """The request body carrying ``batch``."""

    @abstractmethod
    def _answer(self, batch: Sequence[E], response: Any) -> None:
        """Answer every entry of ``batch`` from the decoded ``response``."""

    # -- sending -------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                batch, self._queue = self._batch(self._queue)
                try:
                    await self._deliver(batch)
                except Exception:  # a bug, not the peer's answer: fail this batch only
                    log.exception("%s to broker %d", self.api_key.name, self.broker_id)
                    self._fail(batch, ErrorCode.unknown_server_error)

    async def _deliver(self, batch: list[E]) -> None:
        connection = self._link.connection()
        if connection is None:
            self._fail(batch, ErrorCode.not_leader_or_follower)
            return
        try:
            response = await connection.request(
                self.api_key, self.version, self._request(batch), REQUEST_TIMEOUT_S
            )
        except PeerError as exc:
            log.info("%s to broker %d failed: %s", self.api_key.name, self.broker_id, exc)
            self._fail(batch, ErrorCode.network_exception)
            return
        self._answer(batch, response)

    @staticmethod
    def _fail(batch: Sequence[E], code: ErrorCode) -> None:
        for entry in batch:
            entry.fail(code)


class Channels(Generic[E]):
    """One channel per destination broker, made on first use."""

    def __init__(self, node: ClusterNode, kind: type[BatchingChannel[E]]) -> None:
        self._node = node
        self._kind = kind
        self._channels: dict[int, BatchingChannel[E]] = {}

    def to(self, broker_id: int) -> BatchingChannel[E]:
        channel = self._channels.get(broker_id)
        if channel is None:
            channel = self._channels[broker_id] = self._kind(self._node, broker_id)
        return channel

    async def stop(self) -> None:
        for channel in self._channels.values():
            await channel.stop()
        self._channels.clear()
