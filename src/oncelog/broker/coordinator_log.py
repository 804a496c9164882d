"""Coordinator state in an internal topic of this node: the coordinator runtime's partition
writer and loader.

A coordinator (transactions, groups) turns each request into records; the records are
appended to its partition of an internal topic and the answer waits until they are on
disk. At load the same records are read back and replayed, so the state a coordinator
rebuilds is exactly what it had acknowledged.

A record that cannot be read back (a batch whose records do not decode, a key or value its
coordinator cannot parse) is skipped with a warning and counted: one bad record in an
internal partition must not stop the broker from starting, or take every other group and
transactional id of that partition down with it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from oncelog.broker.coordinator_runtime import NO_PRODUCER, Clock, CoordinatorShard, LoadReport
from oncelog.broker.internal_topics import ensure_internal_topic
from oncelog.protocol.record_batch import (
    BatchHeader,
    Record,
    build_batch,
    control_marker,
    decode_records,
    iter_stored_batches,
)

if TYPE_CHECKING:
    from oncelog.broker.durability import GroupCommitFlusher
    from oncelog.broker.partition import Partition
    from oncelog.broker.topics import TopicRegistry

log = logging.getLogger(__name__)

LOAD_PROGRESS_INTERVAL_S = 10.0  # a long load says how far it got this often
READ_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """A key/value record of an internal partition, with the producer that wrote it."""

    offset: int
    key: bytes | None
    value: bytes | None
    producer_id: int
    transactional: bool


@dataclass(frozen=True, slots=True)
class StoredMarker:
    """A transaction marker in an internal partition (transactional offset commits end so)."""

    offset: int
    producer_id: int
    committed: bool


@dataclass(frozen=True, slots=True)
class UnreadableBatch:
    """A stored batch whose records could not be decoded; `reason` says why."""

    base_offset: int
    last_offset: int
    reason: str


class InternalTopicLog:
    """One internal topic of this node (``__transaction_state``, ``__consumer_offsets``) as
    the coordinator runtime sees it: a partition writer, a loader, and the topic itself
    (created on first need with ``configured_partitions``; an existing topic keeps its
    count, as in Kafka)."""

    def __init__(
        self,
        topics: TopicRegistry,
        flusher: GroupCommitFlusher,
        name: str,
        configured_partitions: int,
        clock: Clock,
    ) -> None:
        self._topics = topics
        self._flusher = flusher
        self.name = name
        self._configured_partitions = configured_partitions
        self._clock = clock

    # -- the topic ------------------------------------------------------------------------

    def exists(self) -> bool:
        return self._topics.get(self.name) is not None

    def partition_count(self) -> int:
        topic = self._topics.get(self.name)
        return self._configured_partitions if topic is None else len(topic.partitions)

    async def ensure(self) -> int:
        """Create the topic if it is missing; its partition count."""
        topic = await ensure_internal_topic(
            self._topics, self.name, self._configured_partitions, self._clock()
        )
        return len(topic.partitions)

    def _partition(self, index: int) -> Partition:
        return self._topics.partition(self.name, index)

    # -- PartitionWriter -------------------------------------------------------------------

    def append(
        self,
        partition: int,
        records: Sequence[tuple[bytes, bytes | None]],
        now_ms: int,
        *,
        producer_id: int = NO_PRODUCER,
        producer_epoch: int = -1,
    ) -> int:
        target = self._partition(partition)
        with offline_on_io_error(target):
            return append_coordinator_records(target, records, now_ms, producer_id, producer_epoch)

    def append_marker(
        self,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        coordinator_epoch: int,
        now_ms: int,
    ) -> int:
        target = self._partition(partition)
        with offline_on_io_error(target):
            return target.append_marker(
                producer_id, producer_epoch, committed, coordinator_epoch, now_ms
            )

    def wait_durable(self, partition: int, end_offset: int) -> Awaitable[None]:
        return self._flusher.wait_durable(self._partition(partition), end_offset)

    # -- CoordinatorLoader -----------------------------------------------------------------

    async def load(self, partition: int, shard: CoordinatorShard) -> LoadReport:
        return replay_partition(self._partition(partition), shard)


class offline_on_io_error:  # named as the context manager it is (as contextlib.suppress)
    """Around a coordinator's append: an ``OSError`` takes the partition's log offline until
    the restart, also when the log cut the failed write back and could have stayed online.
    The coordinator runtime cannot tell what such a write left, so it treats the partition
    as out until the restart (broker/coordinator_runtime.py); an offline log is what a
    cluster moves to another replica (Kafka takes the log directory offline on any I/O
    error), so the coordinator moves with it instead of staying out on this broker.

    A class, not a generator context manager, and no factory function before it: it wraps
    every coordinator record and marker appended (issue 12: Python calls per transaction)."""

    __slots__ = ("partition",)

    def __init__(self, partition: Partition) -> None:
        self.partition = partition

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, error: object, traceback: object) -> None:
        if isinstance(error, OSError):
            self.partition.take_offline(f"a coordinator write failed: {error}")


def append_coordinator_records(
    partition: Partition,
    records: Sequence[tuple[bytes, bytes | None]],
    now_ms: int,
    producer_id: int = NO_PRODUCER,
    producer_epoch: int = -1,
) -> int:
    """Append a coordinator's records to ``partition`` as one batch (transactional when
    ``producer_id`` is set); the offset of the last record."""
    batch = build_batch(
        [Record(key, value) for key, value in records],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=producer_id != NO_PRODUCER,
        timestamp_ms=now_ms,
    )
    return partition.append_from_coordinator(batch, now_ms).last_offset


def replay_partition(source: Partition, shard: CoordinatorShard) -> LoadReport:
    """Replay ``source`` into ``shard``, from its log start to its log end. A record the
    shard cannot apply (a record type it does not model, a value that does not parse) is
    skipped with a warning: one bad record must not take every other group or
    transactional id down."""
    replayed = skipped = 0
    end = source.log.log_end_offset
    last_report = time.monotonic()
    for stored in read_records(source):
        if time.monotonic() - last_report >= LOAD_PROGRESS_INTERVAL_S:
            last_report = time.monotonic()
            at = stored.base_offset if isinstance(stored, UnreadableBatch) else stored.offset
            log.info("%r: loading, at offset %d of %d", source, at, end)
        if isinstance(stored, UnreadableBatch):
            skipped += stored.last_offset - stored.base_offset + 1
            log.warning(
                "%r: skipping unreadable batch at offsets %d..%d: %s",
                source,
                stored.base_offset,
                stored.last_offset,
                stored.reason,
            )
            continue
        try:
            if isinstance(stored, StoredMarker):
                shard.replay_end_transaction_marker(stored.producer_id, stored.committed)
            elif stored.key is not None:
                shard.replay(stored.offset, stored.producer_id, stored.key, stored.value)
        except Exception as exc:
            skipped += 1
            log.warning("%r: skipping record %d: %s", source, stored.offset, _describe(exc))
            continue
        replayed += 1
    return LoadReport(replayed, skipped)


def read_records(partition: Partition) -> Iterator[StoredRecord | StoredMarker | UnreadableBatch]:
    """Every record and transaction marker of `partition`, from its log start, in order;
    a batch whose records cannot be decoded comes as one `UnreadableBatch`."""
    offset = partition.log_start_offset
    end = partition.log.log_end_offset
    while offset < end:
        chunk = partition.log.read(offset, READ_CHUNK_BYTES)
        if not chunk:
            break
        for position, header in iter_stored_batches(chunk):
            batch = memoryview(chunk)[position : position + header.size]
            try:
                contents = _batch_contents(batch, header)
            except Exception as exc:  # any decoding failure: the batch is unreadable
                yield UnreadableBatch(header.base_offset, header.last_offset, _describe(exc))
            else:
                yield from contents
            offset = header.next_offset


def _batch_contents(batch: memoryview, header: BatchHeader) -> list[StoredRecord | StoredMarker]:
    """A batch decoded whole, before anything of it is replayed: all or nothing."""
    if header.is_control:
        marker = control_marker(batch)
        if marker is None:
            return []
        return [StoredMarker(header.base_offset, header.producer_id, marker[0])]
    return [
        StoredRecord(
            record.offset, record.key, record.value, header.producer_id, header.is_transactional
        )
        for record in decode_records(batch)
    ]


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"
