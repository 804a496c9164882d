"""Transaction markers written to this node's partitions: what WriteTxnMarkers does, for the
transaction coordinator (in process on one node) and for the WriteTxnMarkers API.

A marker for ``__consumer_offsets`` goes through the group coordinator, which writes it
and settles the transaction's offsets once it is durable (Kafka 4's
``GroupCoordinator.completeTransaction``); every other marker is appended to its
partition here. Appends happen before the first await, so markers take effect in the order
they were asked for; all of them then share the fsyncs that make them durable.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from oncelog.broker.internal_topics import CONSUMER_OFFSETS
from oncelog.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from oncelog.broker.durability import GroupCommitFlusher
    from oncelog.broker.topics import TopicRegistry

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# (__consumer_offsets partition, producer id, producer epoch, committed, coordinator epoch)
CompleteOffsets = Callable[[int, int, int, bool, int], Awaitable[None]]


class LocalMarkerWriter:
    """Writes COMMIT/ABORT markers to partitions of this node."""

    def __init__(
        self,
        topics: TopicRegistry,
        flusher: GroupCommitFlusher,
        complete_offsets: CompleteOffsets,
        clock: Callable[[], int],
    ) -> None:
        self._topics = topics
        self._flusher = flusher
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
        INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED, a storage error...)."""
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
                partition = self._topics.partition(topic, index)
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
            log.debug(
                "%s marker for producer %d epoch %d on %s-%d at offset %d",
                "COMMIT" if committed else "ABORT",
                producer_id,
                producer_epoch,
                topic,
                index,
                offset,
            )
            waits[topic, index] = self._flusher.wait_durable(partition, offset + 1)
        done = await asyncio.gather(*waits.values(), return_exceptions=True)
        for (topic, index), outcome in zip(waits, done, strict=True):
            if isinstance(outcome, KafkaError):
                outcomes[topic, index] = outcome.code
            elif isinstance(outcome, BaseException):
                log.warning("marker on %s-%d not made durable: %r", topic, index, outcome)
                outcomes[topic, index] = ErrorCode.kafka_storage_error
            else:
                outcomes[topic, index] = ErrorCode.none
        return outcomes
