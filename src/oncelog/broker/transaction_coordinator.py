"""The transaction coordinator: the pure shards of `oncelog.transactions`, wired to the
`__transaction_state` log, the partitions' markers and the clock.

Every request runs the same way: the shard decides (records to write, a response, markers
to send), the records are appended to the shard's `__transaction_state` partition and
fsynced, and only then are they replayed into the shard and the client answered. Markers
are written afterwards (WriteTxnMarkers semantics, in-process on one node); once every
participating partition holds its marker durably, the COMPLETE record is written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from oncelog.broker.coordinator_log import StoredRecord, read_records, write_records
from oncelog.broker.internal_topics import (
    CONSUMER_OFFSETS,
    TRANSACTION_STATE,
    ensure_internal_topic,
)
from oncelog.broker.load_once import LoadOnce
from oncelog.coordinator_partitions import partition_for
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.transactions.coordinator import (
    CoordinatorResult,
    MarkerRequest,
    TransactionCoordinatorShard,
    TxnResponse,
    append_error,
)
from oncelog.transactions.state import TopicPartition, TxnState

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.partition import Partition

log = logging.getLogger(__name__)

MARKER_RETRY_S = 0.5
# Marker refusals that mean the partition needs no marker from this coordinator: it was
# deleted, or a newer producer epoch or coordinator has written there since.
_FINAL_MARKER_ERRORS = frozenset(
    {
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.invalid_producer_epoch,
        ErrorCode.transaction_coordinator_fenced,
    }
)


class TransactionCoordinator:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._shards: dict[int, TransactionCoordinatorShard] = {}
        self._loading = LoadOnce(self._load)
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def num_partitions(self) -> int:
        return self._broker.config.transaction_state_log_num_partitions

    # -- lifecycle -----------------------------------------------------------------------

    async def ready(self) -> None:
        """Create and load `__transaction_state` once; later calls return at once."""
        await self._loading.wait()

    def load_if_present(self) -> asyncio.Future[None] | None:
        """At broker start: load the coordinator state if the topic exists."""
        if self._broker.topics.get(TRANSACTION_STATE) is None:
            return None
        return asyncio.ensure_future(self.ready())

    def _load(self) -> None:
        topic = ensure_internal_topic(
            self._broker.topics, TRANSACTION_STATE, self.num_partitions, self._broker.now_ms()
        )
        for partition in topic.partitions:
            shard = TransactionCoordinatorShard(partition.index, loading=True)
            for stored in read_records(partition):
                if isinstance(stored, StoredRecord) and stored.key is not None:
                    shard.replay(stored.key, stored.value)
            self._shards[partition.index] = shard
            for marker in shard.finish_loading():
                log.info(
                    "resuming %s of transactional id %r after restart",
                    "commit" if marker.committed else "abort",
                    marker.transactional_id,
                )
                self._spawn(self._write_markers(shard, partition, marker))
        self._spawn(self._run_timeouts())

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, coroutine: object) -> None:
        task = asyncio.ensure_future(coroutine)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _shard_of(self, transactional_id: str) -> tuple[TransactionCoordinatorShard, Partition]:
        index = partition_for(transactional_id, self.num_partitions)
        return self._shards[index], self._broker.topics.partition(TRANSACTION_STATE, index)

    # -- requests ------------------------------------------------------------------------

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> TxnResponse:
        await self.ready()
        shard, partition = self._shard_of(transactional_id)
        allocator = self._broker.producer_ids
        assert allocator is not None
        result = shard.init_producer_id(
            transactional_id,
            timeout_ms,
            producer_id,
            producer_epoch,
            now_ms=self._broker.now_ms(),
            allocate_producer_id=allocator.allocate,
            max_timeout_ms=self._broker.config.transaction_max_timeout_ms,
        )
        return await self._run(shard, partition, result)

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> TxnResponse:
        await self.ready()
        shard, partition = self._shard_of(transactional_id)
        result = shard.add_partitions(
            transactional_id, producer_id, producer_epoch, partitions, self._broker.now_ms()
        )
        return await self._run(shard, partition, result)

    async def add_offsets(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> TxnResponse:
        await self.ready()
        await self._broker.groups.ready()
        shard, partition = self._shard_of(transactional_id)
        offsets_partition = (CONSUMER_OFFSETS, self._broker.groups.partition_of(group_id))
        result = shard.add_offsets(
            transactional_id,
            producer_id,
            producer_epoch,
            group_id,
            offsets_partition,
            self._broker.now_ms(),
        )
        return await self._run(shard, partition, result)

    async def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> TxnResponse:
        await self.ready()
        shard, partition = self._shard_of(transactional_id)
        result = shard.end_txn(
            transactional_id, producer_id, producer_epoch, commit, self._broker.now_ms()
        )
        return await self._run(shard, partition, result)

    def check_write(
        self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str, index: int
    ) -> None:
        """KIP-890 part 1: a transactional batch must belong to the producer's ongoing
        transaction and to a partition added to it."""
        if not self._loading.done:
            raise KafkaError(
                ErrorCode.invalid_txn_state,
                f"transactional id {transactional_id!r} has no transaction",
            )
        shard, _ = self._shard_of(transactional_id)
        metadata = shard.get(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            raise KafkaError(
                ErrorCode.invalid_producer_id_mapping,
                f"producer {producer_id} is not {transactional_id!r}'s",
            )
        if producer_epoch < metadata.producer_epoch:
            raise KafkaError(
                ErrorCode.invalid_producer_epoch,
                f"epoch {producer_epoch} is older than {metadata.producer_epoch}",
            )
        if metadata.state is not TxnState.ONGOING or (topic, index) not in metadata.partitions:
            raise KafkaError(
                ErrorCode.invalid_txn_state,
                f"{topic}-{index} was not added to {transactional_id!r}'s transaction",
            )

    # -- the write path ---------------------------------------------------------------------

    async def _run(
        self, shard: TransactionCoordinatorShard, partition: Partition, result: CoordinatorResult
    ) -> TxnResponse:
        if result.records:
            try:
                await write_records(
                    partition, self._broker.flusher, result.records, self._broker.now_ms()
                )
            except KafkaError as exc:
                shard.write_failed(result)
                log.warning("could not write to %r: %s", partition, exc)
                return TxnResponse(append_error(exc.code))
            shard.apply(result)
        for marker in result.markers:
            self._spawn(self._write_markers(shard, partition, marker))
        return result.response or TxnResponse(ErrorCode.none)

    async def _write_markers(
        self, shard: TransactionCoordinatorShard, log_partition: Partition, marker: MarkerRequest
    ) -> None:
        """Write the marker to every participant until each holds it durably, then complete.

        A partition that refuses the marker as stale (a newer producer epoch or coordinator
        already wrote there) or that was deleted is done with; any other failure is retried,
        so no participant is left with an open transaction holding its LSO back.
        """
        remaining = set(marker.partitions)
        while remaining:
            written = []
            for topic, index in sorted(remaining):
                try:
                    target = self._broker.topics.partition(topic, index)
                    offset = target.append_marker(
                        marker.producer_id,
                        marker.producer_epoch,
                        marker.committed,
                        marker.coordinator_epoch,
                        self._broker.now_ms(),
                    )
                except KafkaError as exc:
                    if exc.code not in _FINAL_MARKER_ERRORS:
                        log.warning("marker for %s-%d failed (%s); retrying", topic, index, exc)
                        continue
                    log.info("marker for %s-%d not needed: %s", topic, index, exc)
                    remaining.discard((topic, index))
                    continue
                except OSError as exc:
                    log.warning("marker for %s-%d failed (%s); retrying", topic, index, exc)
                    continue
                if topic == CONSUMER_OFFSETS:
                    self._broker.groups.complete_transaction(
                        index, marker.producer_id, marker.committed
                    )
                written.append(
                    (topic, index, self._broker.flusher.wait_durable(target, offset + 1))
                )
            for topic, index, durable in written:
                try:
                    await durable
                except KafkaError as exc:  # appended but not fsynced: the next round retries it
                    log.warning("marker for %s-%d not durable (%s)", topic, index, exc)
                    continue
                remaining.discard((topic, index))
            if remaining:
                await asyncio.sleep(MARKER_RETRY_S)
        result = shard.complete(marker.transactional_id, self._broker.now_ms(), marker)
        await self._run(shard, log_partition, result)

    # -- timers ------------------------------------------------------------------------------

    async def _run_timeouts(self) -> None:
        """Abort transactions past their timeout (fencing the producer); expire idle ids."""
        config = self._broker.config
        abort_every_s = config.transaction_abort_timed_out_transaction_cleanup_interval_ms / 1000
        expire_every_ms = config.transaction_remove_expired_transaction_cleanup_interval_ms
        next_expiry_ms = self._broker.now_ms() + expire_every_ms
        while True:
            await asyncio.sleep(abort_every_s)
            now = self._broker.now_ms()
            for index, shard in self._shards.items():
                partition = self._broker.topics.partition(TRANSACTION_STATE, index)
                for result in shard.abort_timed_out(now):
                    for marker in result.markers:
                        log.info("transactional id %r timed out: aborting", marker.transactional_id)
                    await self._run(shard, partition, result)
                if now >= next_expiry_ms:
                    result = shard.expire_transactional_ids(
                        now, config.transactional_id_expiration_ms
                    )
                    await self._run(shard, partition, result)
            if now >= next_expiry_ms:
                next_expiry_ms = now + expire_every_ms

    # -- admin -------------------------------------------------------------------------------

    @property
    def shards(self) -> dict[int, TransactionCoordinatorShard]:
        return self._shards
