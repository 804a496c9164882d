"""Which coordinator partitions this broker leads, and what the coordinators share around
their runtime.

On a single node this broker leads every partition of `__transaction_state` and
`__consumer_offsets`, at epoch 0: an internal topic is created when a client first looks
for a coordinator (as Kafka does) and every partition of it is loaded then, or at start if
the topic already exists. In a cluster the controller decides instead, and the broker tells
each coordinator with ``on_elected(partition, leader_epoch)`` and
``on_resigned(partition, leader_epoch)`` as leadership of those partitions moves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Generic, Protocol

from oncelog.broker.coordinator_runtime import CoordinatorRuntime, S
from oncelog.coordinator_partitions import partition_for

SINGLE_NODE_EPOCH = 0


class InternalTopic(Protocol):
    """The internal topic a coordinator keeps its state in."""

    @property
    def name(self) -> str: ...

    def partition_count(self) -> int:
        """The topic's partitions if it exists, else how many it will be created with."""

    def exists(self) -> bool:
        """Whether the topic has been created (before that, no state can be in it)."""


class LocalInternalTopic(InternalTopic, Protocol):
    """An internal topic of a single node, which the broker creates itself when needed (in
    a cluster the topic is created in ZooKeeper instead)."""

    async def ensure(self) -> int:
        """Create the topic if it is missing; its partition count."""


class SingleNodeLeadership:
    """Loads every partition of ``topic`` once, at epoch 0, with ``load(partition, epoch)``
    (the coordinator runtime's)."""

    def __init__(
        self, load: Callable[[int, int], Awaitable[None]], topic: LocalInternalTopic
    ) -> None:
        self._load = load
        self._topic = topic
        self._loaded: asyncio.Future[None] | None = None

    async def start(self) -> None:
        """At broker start: load the partitions if the topic exists."""
        if self._topic.exists():
            await self.ready()

    async def ready(self) -> None:
        """Create the topic if needed and load every partition; once. Concurrent callers
        wait for the same load."""
        if self._loaded is None:
            self._loaded = asyncio.ensure_future(self._load_all())
        if self._loaded.done():
            # Every coordinator request asks; once loaded, a shield (a new future and two
            # callbacks) per request is all it would cost (issue 12).
            self._loaded.result()  # raises what the load raised, as awaiting it would
            return
        await asyncio.shield(self._loaded)

    async def _load_all(self) -> None:
        for partition in range(await self._topic.ensure()):
            await self._load(partition, SINGLE_NODE_EPOCH)


class LedCoordinator(Generic[S]):
    """A coordinator whose shards live on a runtime, one per partition of ``topic`` this
    broker leads: on one node every partition (``lead_every_partition``: ``ready`` loads
    them), in a cluster those ``on_elected`` loads."""

    def __init__(self, runtime: CoordinatorRuntime[S], topic: InternalTopic) -> None:
        self._runtime = runtime
        self._topic = topic
        self._leadership: SingleNodeLeadership | None = None

    def lead_every_partition(self, topic: LocalInternalTopic) -> None:
        """One node: this broker leads every partition of ``topic`` (created on first need
        by ``ready``, loaded at start if it exists)."""
        self._leadership = SingleNodeLeadership(self._runtime.load, topic)

    @property
    def elected(self) -> bool:
        """Whether the partitions this broker coordinates are the controller's choice (a
        cluster: another broker may coordinate them next), not every partition of one
        node."""
        return self._leadership is None

    @property
    def num_partitions(self) -> int:
        return self._topic.partition_count()

    def partition_of(self, key: str) -> int:
        """The partition coordinating ``key`` (a group id, a transactional id)."""
        return partition_for(key, self.num_partitions)

    def offline(self, key: str) -> bool:
        """Whether ``key``'s partition is out on this broker after a storage failure (until
        a restart recovers it): nobody coordinates ``key`` now."""
        return self._runtime.failed(self.partition_of(key))

    @property
    def shards(self) -> Mapping[int, S]:
        """The shards of the partitions this broker coordinates now."""
        return self._runtime.shards

    @property
    def load_seconds(self) -> dict[int, float]:
        """How long each partition's last load took (coordinator load-time metrics)."""
        return self._runtime.load_seconds

    @property
    def skipped_records(self) -> int:
        """Records of the topic that loads could not read."""
        return self._runtime.skipped_records

    async def ready(self) -> None:
        """One node: create the topic if needed and coordinate every partition of it; later
        calls return at once. In a cluster the controller's elections do that."""
        if self._leadership is not None:
            await self._leadership.ready()

    async def _start_leading(self) -> None:
        if self._leadership is not None:
            await self._leadership.start()

    async def on_elected(self, partition: int, leader_epoch: int) -> None:
        """This broker leads ``partition`` at ``leader_epoch``: load it and coordinate what
        it holds, stamping ``leader_epoch`` as the coordinator epoch."""
        await self._runtime.load(partition, leader_epoch)

    def on_resigned(self, partition: int, leader_epoch: int | None) -> None:
        """Another broker leads ``partition`` at ``leader_epoch`` (None: the topic is
        gone): stop coordinating it; its requests get NOT_COORDINATOR."""
        self._runtime.unload(partition, leader_epoch)
