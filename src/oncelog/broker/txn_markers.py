"""Transaction markers written to the partitions this broker leads: what WriteTxnMarkers
does, for the transaction coordinator (in process on one node, and for the partitions it
leads itself in a cluster) and for the WriteTxnMarkers API.

A marker for ``__consumer_offsets`` goes through the group coordinator, which writes it
and settles the transaction's offsets once it is durable (Kafka 4's
``GroupCoordinator.completeTransaction``); every other marker is appended to its
partition here. Appends happen in the call to ``write``, so markers take effect in the order
they were asked for; all of them then share the fsyncs (and, in a cluster, the
replication to the ISR) that make them durable.

Markers for partitions other brokers lead travel by WriteTxnMarkers
(``oncelog.cluster.markers``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from oncelog.broker.internal_topics import CONSUMER_OFFSETS
from oncelog.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from oncelog.broker.durability import GroupCommitFlusher
    from oncelog.broker.partition import Partition
    from oncelog.broker.topics import TopicRegistry

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# (__consumer_offsets partition, producer id, producer epoch, committed, coordinator epoch)
CompleteOffsets = Callable[[int, int, int, bool, int], Awaitable[None]]

# The group coordinator's refusals, as WriteTxnMarkers reports them for __consumer_offsets
# (Kafka's KafkaApis): the transaction coordinator retries on the partition's new leader.
_OFFSETS_NOT_HERE = frozenset(
    {
        ErrorCode.coordinator_not_available,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.not_coordinator,
    }
)


class MarkedPartitions(Protocol):
    """Where markers go: the partitions this broker may write them to."""

    def writable(self, topic: str, index: int) -> Partition:
        """The partition, if a marker may be appended here now (KafkaError otherwise:
        UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS)."""

    def appended(self, partition: Partition) -> None:
        """A marker was appended (a cluster leader moves its high watermark)."""

    def wait_durable(self, partition: Partition, end_offset: int) -> Awaitable[None]:
        """Resolves once the offsets below ``end_offset`` are durable."""


class NodePartitions:
    """One node: every partition of the registry; durable once fsynced."""

    def __init__(self, topics: TopicRegistry, flusher: GroupCommitFlusher) -> None:
        self._topics = topics
        self._flusher = flusher

    def writable(self, topic: str, index: int) -> Partition:
        return self._topics.partition(topic, index)

    def appended(self, partition: Partition) -> None:
        pass

    def wait_durable(self, partition: Partition, end_offset: int) -> Awaitable[None]:
        return self._flusher.wait_durable(partition, end_offset)


class LocalMarkerWriter:
    """Writes COMMIT/ABORT markers to partitions this broker may write them to."""

    def __init__(
        self,
        partitions: MarkedPartitions,
        complete_offsets: CompleteOffsets,
        clock: Callable[[], int],
    ) -> None:
        self._partitions = partitions
        self._complete_offsets = complete_offsets
        self._clock = clock

    def write(
        self,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        coordinator_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> Coroutine[Any, Any, dict[TopicPartition, ErrorCode]]:
        """Write the marker to each partition now, in this call; await the result for the
        outcome per partition once each is durable (NONE, or the refusal:
        UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, INVALID_PRODUCER_EPOCH,
        TRANSACTION_COORDINATOR_FENCED, a storage error...).

        The appends happen in the call, not when a task first runs the coroutine: the
        transaction coordinator writes a transaction's markers in the step that finds its
        PREPARE record durable, so they are in the log before the EndTxn answer is written
        (which its handler now does in that same step, see server.py), and their fsyncs
        start a loop turn sooner."""
        outcomes: dict[TopicPartition, ErrorCode] = {}
        waits: dict[TopicPartition, Awaitable[None]] = {}
        now = self._clock()
        for topic, index in partitions:
            if topic == CONSUMER_OFFSETS:
                waits[topic, index] = asyncio.ensure_future(
                    self._complete_offsets(
                        index, producer_id, producer_epoch, committed, coordinator_epoch
                    )
                )
                continue
            try:
                partition = self._partitions.writable(topic, index)
                offset = partition.append_marker(
                    producer_id, producer_epoch, committed, coordinator_epoch, now
                )
            except KafkaError as exc:
                log.info(
                    "marker of producer %d refused by %s-%d: %s", producer_id, topic, index, exc
                )
                outcomes[topic, index] = exc.code
                continue
            except OSError as exc:
                log.warning("marker of producer %d on %s-%d: %s", producer_id, topic, index, exc)
                outcomes[topic, index] = ErrorCode.kafka_storage_error
                continue
            self._partitions.appended(partition)
            log.debug(
                "%s marker for producer %d epoch %d on %s-%d at offset %d",
                "COMMIT" if committed else "ABORT",
                producer_id,
                producer_epoch,
                topic,
                index,
                offset,
            )
            waits[topic, index] = self._partitions.wait_durable(partition, offset + 1)
        return _durable_outcomes(outcomes, waits)


async def _durable_outcomes(
    outcomes: dict[TopicPartition, ErrorCode], waits: dict[TopicPartition, Awaitable[None]]
) -> dict[TopicPartition, ErrorCode]:
    """``outcomes`` (the refused partitions) with each awaited partition's outcome."""
    for (topic, index), outcome in (await _settle_each(waits)).items():
        outcomes[topic, index] = _outcome(topic, index, outcome)
    return outcomes


async def _settle_each(
    waits: dict[TopicPartition, Awaitable[None]],
) -> dict[TopicPartition, BaseException | None]:
    """Each wait's outcome (None, or what it raised), as ``asyncio.gather(...,
    return_exceptions=True)`` gives them, but awaited one after the other: the task wakes
    one loop turn after the last wait ends, where gather takes two (its callback per
    wait, then its own future's wake-up of the task), and for one partition, the
    commonest transaction, it is a plain await. The waits run at once all the same (they
    are futures, or become tasks here); if this task is cancelled, so are they, as with
    gather."""
    futures = {key: asyncio.ensure_future(wait) for key, wait in waits.items()}
    task = asyncio.current_task()
    outcomes: dict[TopicPartition, BaseException | None] = {}
    try:
        for key, future in futures.items():
            try:
                await future
                outcomes[key] = None
            except asyncio.CancelledError as exc:
                if task is not None and task.cancelling():
                    raise
                outcomes[key] = exc  # the wait itself was cancelled, not this task
            except Exception as exc:
                outcomes[key] = exc
    except asyncio.CancelledError:
        for future in futures.values():
            future.cancel()
        raise
    return outcomes


def _outcome(topic: str, index: int, outcome: BaseException | None) -> ErrorCode:
    if outcome is None:
        return ErrorCode.none
    if isinstance(outcome, KafkaError):
        if topic == CONSUMER_OFFSETS and outcome.code in _OFFSETS_NOT_HERE:
            return ErrorCode.not_leader_or_follower
        return outcome.code
    log.warning("marker on %s-%d not made durable: %r", topic, index, outcome)
    return ErrorCode.kafka_storage_error
