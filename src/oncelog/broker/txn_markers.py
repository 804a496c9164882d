"""Transaction markers written to the partitions this broker leads: what WriteTxnMarkers
does, for the transaction coordinator (in process on one node, and for the partitions it
leads itself in a cluster) and for the WriteTxnMarkers API.

A marker for ``__consumer_offsets`` goes through the group coordinator, which writes it
and settles the transaction's offsets once it is durable (Kafka 4's
``GroupCoordinator.completeTransaction``); every other marker is appended to its
partition here. Appends happen before the first await, so markers take effect in the order
they were asked for; all of them then share the fsyncs (and, in a cluster, the
replication to the ISR) that make them durable.

Markers for partitions other brokers lead travel by WriteTxnMarkers
(``oncelog.cluster.markers``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Protocol

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

    async def write(
        self,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        coordinator_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """Write the marker to each partition and wait until each is durable; the outcome
        per partition (NONE, or the refusal: UNKNOWN_TOPIC_OR_PARTITION,
        NOT_LEADER_OR_FOLLOWER, INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED, a
        storage error...)."""
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
        if len(waits) == 1:
            # One partition, nearly every transaction: its wait awaited as it is, without
            # the gathering future and the callbacks of gather (issue 12).
            [((topic, index), wait)] = waits.items()
            try:
                await wait
            except asyncio.CancelledError as exc:
                task = asyncio.current_task()
                if task is None or task.cancelling():
                    raise  # this write is cancelled, and its wait with it, as gather does
                outcomes[topic, index] = _outcome(topic, index, exc)  # the wait alone
            except Exception as exc:  # what gather(return_exceptions=True) would return
                outcomes[topic, index] = _outcome(topic, index, exc)
            else:
                outcomes[topic, index] = ErrorCode.none
            return outcomes
        done = await asyncio.gather(*waits.values(), return_exceptions=True)
        for (topic, index), outcome in zip(waits, done, strict=True):
            outcomes[topic, index] = _outcome(topic, index, outcome)
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
