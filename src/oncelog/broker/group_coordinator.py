"""The group coordinator: the pure shards of `oncelog.groups` on the coordinator runtime,
with parked JoinGroup/SyncGroup requests and the group timers.

One result per shard at a time (the runtime runs groups serially): the shard decides, its
records are appended (as a transactional batch for TxnOffsetCommit), made durable and
replayed, and only then are the response and the answers to parked JoinGroup/SyncGroup
requests sent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from oncelog.broker.coordinator_runtime import (
    CoordinatorError,
    CoordinatorLoader,
    CoordinatorRuntime,
    PartitionWriter,
)
from oncelog.broker.leadership import InternalTopic, LedCoordinator
from oncelog.groups import GroupConfig, GroupCoordinatorShard, Result
from oncelog.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

R = TypeVar("R")
MAX_TICK_S = 1.0


@dataclass(frozen=True, slots=True)
class OffsetExpiry:
    """``offsets.retention.minutes`` (in ms) and ``offsets.retention.check.interval.ms``."""

    retention_ms: int = 7 * 24 * 3_600_000
    check_interval_ms: int = 600_000


class GroupCoordinator(LedCoordinator[GroupCoordinatorShard]):
    """Groups and committed offsets of every `__consumer_offsets` partition this broker
    leads."""

    def __init__(
        self,
        writer: PartitionWriter,
        loader: CoordinatorLoader,
        topic: InternalTopic,
        clock: Callable[[], int],
        config: GroupConfig,
        *,
        expiry: OffsetExpiry | None = None,
    ) -> None:
        super().__init__(
            CoordinatorRuntime(
                topic.name,
                writer,
                loader,
                clock,
                lambda index, epoch: GroupCoordinatorShard(index, config),
                pipelined=False,
                on_loaded=lambda index, shard: shard.loaded(clock()),
                on_unloaded=self._on_unloaded,
            ),
            topic,
        )
        self._clock = clock
        # Parked JoinGroup/SyncGroup requests: request id -> (partition, answer).
        self._parked: dict[object, tuple[int, asyncio.Future[Any]]] = {}
        self._ticker: asyncio.Task[None] | None = None
        self._expirer: asyncio.Task[None] | None = None
        self._expiry = expiry or OffsetExpiry()
        self._wake = asyncio.Event()
        self._operations: set[asyncio.Future[Any]] = set()  # see _to_the_end

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """At broker start: the timers, and the partitions this broker leads."""
        self._ticker = asyncio.ensure_future(self._run_timers())
        self._expirer = asyncio.ensure_future(self._run_offset_expiry())
        await self._start_leading()

    async def stop(self) -> None:
        for task in (self._ticker, self._expirer):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._runtime.unload_all()
        operations = list(self._operations)
        for operation in operations:
            operation.cancel()
        await asyncio.gather(*operations, return_exceptions=True)

    def _on_unloaded(self, partition: int, shard: GroupCoordinatorShard) -> None:
        """Parked requests of the partition will not be answered here: NOT_COORDINATOR
        sends their members to the new coordinator."""
        for parked_partition, answer in list(self._parked.values()):
            if parked_partition == partition and not answer.done():
                answer.set_exception(CoordinatorError(ErrorCode.not_coordinator, "the group moved"))

    # -- running operations ------------------------------------------------------------------

    def shard_for(self, group_id: str) -> GroupCoordinatorShard:
        """The group's shard, to read (CoordinatorError if this broker does not coordinate
        it now)."""
        return self._runtime.shard(self.partition_of(group_id))

    async def locate(self, group_id: str) -> int:
        """The group's `__consumer_offsets` partition, once the topic exists."""
        await self.ready()
        return self.partition_of(group_id)

    async def run(
        self, group_id: str, operation: Callable[[GroupCoordinatorShard, int], Result[R]]
    ) -> R:
        """Run `operation(shard, now_ms)`, which always answers at once, on the group's
        shard; its response. CoordinatorError if it could not run or be written."""
        response = await self._run(group_id, operation)
        if response is None:  # only JoinGroup and SyncGroup park, and they use run_parked
            raise RuntimeError(f"group {group_id!r}: an operation that cannot park did")
        return response

    async def run_parked(
        self, group_id: str, operation: Callable[[GroupCoordinatorShard, object, int], Result[R]]
    ) -> R:
        """Run a JoinGroup or SyncGroup, `operation(shard, request_id, now_ms)`, which the
        shard may park: then wait until a later operation or timer answers `request_id`."""
        request_id = object()
        parked: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._parked[request_id] = (self.partition_of(group_id), parked)
        try:
            answer = await self._run(group_id, lambda shard, now: operation(shard, request_id, now))
            return answer if answer is not None else await parked
        finally:
            self._parked.pop(request_id, None)

    async def _run(
        self, group_id: str, operation: Callable[[GroupCoordinatorShard, int], Result[R]]
    ) -> R | None:
        await self.ready()
        answering = self._answer(self.partition_of(group_id), operation)
        return await self._to_the_end(answering)

    async def _answer(
        self, partition: int, operation: Callable[[GroupCoordinatorShard, int], Result[R]]
    ) -> R | None:
        response = await self._execute(partition, operation)
        self._wake.set()  # a join or session may have set an earlier deadline
        return response

    async def _execute(
        self, partition: int, operation: Callable[[GroupCoordinatorShard, int], Result[R]]
    ) -> R | None:
        """Write the operation's result through the runtime, then answer the parked
        requests it completes; its response (None while the caller's request is parked)."""
        result = await self._runtime.write(partition, operation)
        for event in result.events:
            log.info("%s-%d: %s", self._topic.name, partition, event)
        for completion in result.completions:
            parked = self._parked.pop(completion.request_id, None)
            if parked is not None and not parked[1].done():
                parked[1].set_result(completion.response)
        for request_id in result.abandoned:
            self._parked.pop(request_id, None)  # Kafka leaves these to the client's timeout
        return result.response

    async def complete_transaction(
        self,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        coordinator_epoch: int,
    ) -> None:
        """Write a transaction marker to `__consumer_offsets`-``partition``; once durable
        the producer's pending offsets there are committed or dropped."""
        await self._to_the_end(
            self._runtime.complete_transaction(
                partition, producer_id, producer_epoch, committed, coordinator_epoch
            )
        )

    async def _to_the_end(self, operation: Coroutine[Any, Any, R]) -> R:
        """``operation``'s outcome, the operation carried to its end even if the request
        awaiting it is cancelled (its client went away, so its connection's handlers are;
        a transaction coordinator that resigned stops its marker tasks).

        A group's writes are serial: each operation must see every earlier write of its
        partition replayed. An operation cancelled while its records wait for their fsync
        would release the partition before replaying them, and the members its result
        completes (a SyncGroup leader's assignment for the followers parked on it) would
        never be answered. The price is a task per group request, heartbeats included:
        on 2026-11-24 it added 20-50 µs of loop time to a heartbeat on an in-memory
        partition, 100 heartbeats at a time (60 µs one by one). ``stop`` cancels the
        tasks still running."""
        task = asyncio.ensure_future(operation)
        self._operations.add(task)
        task.add_done_callback(self._operation_done)
        return await asyncio.shield(task)

    def _operation_done(self, task: asyncio.Future[Any]) -> None:
        """Forget the task, and see its failure: a requester still waiting gets it too; one
        that went away cannot, so anything but a coordinator's refusal is logged here."""
        self._operations.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None and not isinstance(error, CoordinatorError):
            log.error("group operation failed", exc_info=error)

    # -- timers ------------------------------------------------------------------------------

    async def _run_timers(self) -> None:
        """Session expiry, rebalance and join timeouts: tick each shard when it is due."""
        while True:
            shards = self._runtime.shards
            deadlines = [d for s in shards.values() if (d := s.next_deadline()) is not None]
            delay = MAX_TICK_S
            if deadlines:
                delay = min(max((min(deadlines) - self._clock()) / 1000, 0.0), MAX_TICK_S)
            self._wake.clear()
            try:
                async with asyncio.timeout(delay):
                    await self._wake.wait()
            except TimeoutError:
                pass
            now = self._clock()
            for partition, shard in self._runtime.shards.items():
                deadline = shard.next_deadline()
                if deadline is not None and deadline <= now:
                    try:
                        await self._execute(partition, lambda s, t: s.tick(t))
                    except CoordinatorError as exc:
                        log.warning("group timers of partition %d: %s", partition, exc)

    # -- offset expiry -----------------------------------------------------------------------

    async def _run_offset_expiry(self) -> None:
        while True:
            await asyncio.sleep(self._expiry.check_interval_ms / 1000)
            await self.expire_offsets()

    async def expire_offsets(self) -> int:
        """One round of offset expiry over every loaded partition (Kafka's
        ``offsets.retention.check.interval.ms`` task); the number of offsets expired."""
        retention = self._expiry.retention_ms
        expired = 0
        for partition in list(self._runtime.shards):
            try:
                count = await self._execute(partition, lambda s, t: s.expire_offsets(t, retention))
            except CoordinatorError as exc:
                log.warning("offset expiry of partition %d: %s", partition, exc)
                continue
            expired += count or 0
        if expired:
            log.info("expired %d committed offset(s) older than %d ms", expired, retention)
        return expired
