"""The group coordinator: the pure shards of `oncelog.groups`, wired to `__consumer_offsets`,
parked requests and the clock.

One result per shard at a time: the shard decides, its records are appended (as a
transactional batch for TxnOffsetCommit) and fsynced, replayed, and only then are the
response and the answers to parked JoinGroup/SyncGroup requests sent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from oncelog.broker.coordinator_log import StoredMarker, read_records, write_records
from oncelog.broker.internal_topics import CONSUMER_OFFSETS, ensure_internal_topic
from oncelog.broker.load_once import LoadOnce
from oncelog.coordinator_partitions import partition_for
from oncelog.groups import GroupConfig, GroupCoordinatorShard, Result
from oncelog.groups.records import RecordDecodeError, UnknownRecordType
from oncelog.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker

log = logging.getLogger(__name__)

R = TypeVar("R")
MAX_TICK_S = 1.0


class GroupWriteFailed(Exception):
    """The records of a group operation could not be written; the client gets `code`."""

    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code.name)
        self.code = code


class GroupCoordinator:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._shards: dict[int, GroupCoordinatorShard] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._parked: dict[object, asyncio.Future[Any]] = {}
        self._loading = LoadOnce(self._load)
        self._ticker: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    @property
    def num_partitions(self) -> int:
        return self._broker.config.offsets_topic_num_partitions

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    # -- lifecycle -----------------------------------------------------------------------

    async def ready(self) -> None:
        """Create and load `__consumer_offsets` once; later calls return at once."""
        await self._loading.wait()

    def load_if_present(self) -> asyncio.Future[None] | None:
        if self._broker.topics.get(CONSUMER_OFFSETS) is None:
            return None
        return asyncio.ensure_future(self.ready())

    def _config(self) -> GroupConfig:
        config = self._broker.config
        return GroupConfig(
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
        )

    def _load(self) -> None:
        topic = ensure_internal_topic(
            self._broker.topics, CONSUMER_OFFSETS, self.num_partitions, self._broker.now_ms()
        )
        config = self._config()
        for partition in topic.partitions:
            shard = GroupCoordinatorShard(partition.index, config)
            for stored in read_records(partition):
                if isinstance(stored, StoredMarker):
                    shard.replay_transaction_marker(stored.producer_id, stored.committed)
                elif stored.key is not None:
                    try:
                        shard.replay(stored.offset, stored.producer_id, stored.key, stored.value)
                    except (UnknownRecordType, RecordDecodeError) as exc:
                        log.warning("skipping record %d of %r: %s", stored.offset, partition, exc)
            shard.loaded(self._broker.now_ms())
            self._shards[partition.index] = shard
            self._locks[partition.index] = asyncio.Lock()
        self._ticker = asyncio.ensure_future(self._run_timers())

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)

    # -- running operations ------------------------------------------------------------------

    async def run(
        self, group_id: str, operation: Callable[[GroupCoordinatorShard, int], Result[R]]
    ) -> R:
        """Run `operation(shard, now_ms)` on the group's shard; its response (waiting for
        a parked JoinGroup/SyncGroup to be answered)."""
        await self.ready()
        index = self.partition_of(group_id)
        response = await self._execute(index, operation)
        self._wake.set()  # a join or session may have set an earlier deadline
        return response

    async def run_parked(
        self, group_id: str, operation: Callable[[GroupCoordinatorShard, object, int], Result[R]]
    ) -> R:
        """Run a JoinGroup or SyncGroup, `operation(shard, request_id, now_ms)`, which the
        shard may park: then wait until a later operation or timer answers `request_id`."""
        request_id = object()
        parked: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._parked[request_id] = parked
        try:
            answer = await self.run(group_id, lambda shard, now: operation(shard, request_id, now))
            return answer if answer is not None else await parked
        finally:
            self._parked.pop(request_id, None)

    async def _execute(
        self, index: int, operation: Callable[[GroupCoordinatorShard, int], Result[R]]
    ) -> R:
        async with self._locks[index]:
            shard = self._shards[index]
            result = operation(shard, self._broker.now_ms())
            await self._write(index, shard, result)
            return result.response  # type: ignore[return-value]

    async def _write(self, index: int, shard: GroupCoordinatorShard, result: Result[Any]) -> None:
        if result.records:
            partition = self._broker.topics.partition(CONSUMER_OFFSETS, index)
            try:
                last = await write_records(
                    partition,
                    self._broker.flusher,
                    [r.encode() for r in result.records],
                    self._broker.now_ms(),
                    producer_id=result.producer_id,
                    producer_epoch=result.producer_epoch,
                    transactional=result.producer_id >= 0,
                )
            except KafkaError as exc:
                log.warning("group records not written to %r: %s", partition, exc)
                raise GroupWriteFailed(
                    exc.code
                    if exc.code in _CLIENT_WRITE_ERRORS
                    else ErrorCode.coordinator_not_available
                ) from exc
            shard.replay_result(result, last - len(result.records) + 1)
        for completion in result.completions:
            future = self._parked.pop(completion.request_id, None)
            if future is not None and not future.done():
                future.set_result(completion.response)
        for request_id in result.abandoned:
            self._parked.pop(request_id, None)  # Kafka leaves these to the client's timeout

    def complete_transaction(self, index: int, producer_id: int, committed: bool) -> None:
        """A marker reached `__consumer_offsets`-`index`: its pending offsets settle."""
        shard = self._shards.get(index)
        if shard is not None:
            shard.replay_transaction_marker(producer_id, committed)

    # -- timers ------------------------------------------------------------------------------

    async def _run_timers(self) -> None:
        """Session expiry, rebalance and join timeouts: tick each shard when it is due."""
        while True:
            deadlines = [d for s in self._shards.values() if (d := s.next_deadline()) is not None]
            delay = MAX_TICK_S
            if deadlines:
                delay = min(max((min(deadlines) - self._broker.now_ms()) / 1000, 0.0), MAX_TICK_S)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except TimeoutError:
                pass
            now = self._broker.now_ms()
            for index, shard in self._shards.items():
                deadline = shard.next_deadline()
                if deadline is not None and deadline <= now:
                    try:
                        await self._execute(index, lambda s, t: s.tick(t))
                    except GroupWriteFailed:
                        log.warning("group timers of partition %d could not be written", index)

    # -- admin -------------------------------------------------------------------------------

    @property
    def shards(self) -> dict[int, GroupCoordinatorShard]:
        return self._shards


_CLIENT_WRITE_ERRORS = frozenset(
    {ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced, ErrorCode.invalid_txn_state}
)
