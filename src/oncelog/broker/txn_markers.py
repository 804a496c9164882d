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
from collections.abc import Awaitable, Callable, Generator, Iterable
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
    ) -> MarkerOutcomes:
        """Write the marker to each partition now, in this call; await the result for the
        outcome per partition once each is durable (NONE, or the refusal:
        UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, INVALID_PRODUCER_EPOCH,
        TRANSACTION_COORDINATOR_FENCED, a storage error...), or close it to cancel the
        waits.

        The appends to data partitions happen in the call, not when a task first awaits
        the result: the transaction coordinator asks for a transaction's markers in the
        step that finds its PREPARE record durable, so on one node they are in the log
        before the EndTxn answer is written (which its handler does in that same step, see
        server.py), and their fsyncs start a loop turn sooner. A ``__consumer_offsets``
        marker is the group coordinator's to write: its task, started here, writes it a
        turn later."""
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
        return _DurableOutcomes(outcomes, waits)


class MarkerOutcomes(Protocol):
    """What a marker write returns: awaited, the outcome per partition; closed before
    that, whatever it waits for is given up (a coroutine is one)."""

    def __await__(self) -> Generator[Any, None, dict[TopicPartition, ErrorCode]]: ...

    def close(self) -> None: ...


class _DurableOutcomes:
    """The outcome per partition of markers already appended: the refusals, and each
    wait's outcome once it ends.

    The waits are awaited one after the other, not gathered: the awaiting task wakes one
    loop turn after the last wait ends, where ``asyncio.gather`` takes two (its callback
    per wait, then its own future's wake-up of the task), and one partition, the
    commonest transaction, is a plain await. They run at once all the same: each is a
    future, or becomes a task here, at once, so none is left unawaited. Cancelling the
    awaiting task, or closing this before it is awaited (a marker task cancelled before
    its first step), cancels them, as gather would."""

    def __init__(
        self, refused: dict[TopicPartition, ErrorCode], waits: dict[TopicPartition, Awaitable[None]]
    ) -> None:
        self._refused = refused
        self._waits = {key: asyncio.ensure_future(wait) for key, wait in waits.items()}

    def __await__(self) -> Generator[Any, None, dict[TopicPartition, ErrorCode]]:
        return self._outcomes().__await__()

    def close(self) -> None:
        _give_up(self._waits.values())

    async def _outcomes(self) -> dict[TopicPartition, ErrorCode]:
        outcomes = dict(self._refused)
        task = asyncio.current_task()
        try:
            for (topic, index), future in self._waits.items():
                try:
                    await future
                    outcomes[topic, index] = ErrorCode.none
                except asyncio.CancelledError as exc:
                    if task is not None and task.cancelling():
                        raise
                    outcomes[topic, index] = _outcome(topic, index, exc)  # the wait's own
                except Exception as exc:
                    outcomes[topic, index] = _outcome(topic, index, exc)
        except asyncio.CancelledError:
            _give_up(self._waits.values())
            raise
        return outcomes


def _give_up(waits: Iterable[asyncio.Future[None]]) -> None:
    """Cancel the waits still running; take the exceptions of those that failed, so none
    is reported as never retrieved."""
    for future in waits:
        if not future.done():
            future.cancel()
        elif not future.cancelled():
            future.exception()


def _outcome(topic: str, index: int, outcome: BaseException | None) -> ErrorCode:
    if outcome is None:
        return ErrorCode.none
    if isinstance(outcome, KafkaError):
        if topic == CONSUMER_OFFSETS and outcome.code in _OFFSETS_NOT_HERE:
            return ErrorCode.not_leader_or_follower
        return outcome.code
    log.warning("marker on %s-%d not made durable: %r", topic, index, outcome)
    return ErrorCode.kafka_storage_error
