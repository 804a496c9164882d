"""Transaction markers in a cluster: written where each participating partition is led.

The transaction coordinator hands a transaction's marker to ``ClusterMarkerWriter``, which
splits its partitions by their current leader (from the metadata cache): the ones this
broker leads are written here (``LocalMarkerWriter`` over ``LeaderPartitions``: acks=all,
so durable once the ISR holds them), the others travel by WriteTxnMarkers to their leader
(Kafka's TransactionMarkerChannelManager). A partition with no live leader is answered
NOT_LEADER_OR_FOLLOWER at once. Whatever fails comes back as a per-partition code, and the
coordinator retries what is not done, asking the metadata again, so a marker follows its
partition when leadership moves.

Whether a partition was deleted is this broker's metadata's call, as in Kafka: a partition
missing from it needs no marker (UNKNOWN_TOPIC_OR_PARTITION, which the coordinator takes as
final), while UNKNOWN_TOPIC_OR_PARTITION from the leader (its metadata may lag behind ours
for a new topic) is retried like NOT_LEADER_OR_FOLLOWER.

Each marker carries the coordinator epoch (the leader epoch of the coordinator's
``__transaction_state`` partition): a partition refuses a marker from a coordinator epoch
older than one that already wrote there (TRANSACTION_COORDINATOR_FENCED).

**One channel per destination broker**, one request in flight on it: markers of every
transaction queued while a request is out go together in the next one, so a busy
coordinator sends few, large requests.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from oncelog.broker.txn_markers import LocalMarkerWriter, TopicPartition
from oncelog.cluster.peer_channel import BatchingChannel, Channels
from oncelog.cluster.zookeeper import NO_LEADER
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from oncelog.broker.partition import Partition
    from oncelog.cluster.node import ClusterNode
    from oncelog.cluster.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS_VERSION = 1
MAX_MARKERS_PER_REQUEST = 500


class LeaderPartitions:
    """The partitions a cluster broker leads, as marker targets: acks=all (NOT_ENOUGH_REPLICAS
    before the append with too small an ISR; durable once every ISR member holds the
    marker and this broker fsynced it)."""

    def __init__(self, node: ClusterNode) -> None:
        self._node = node

    @property
    def replicas(self) -> ReplicaManager:
        """This broker's replica manager (NOT_LEADER_OR_FOLLOWER before it has joined)."""
        if self._node.replicas is None:
            raise KafkaError(ErrorCode.not_leader_or_follower, "not part of the cluster yet")
        return self._node.replicas

    def writable(self, topic: str, index: int) -> Partition:
        partition = self.replicas.leader_partition(topic, index)
        self.replicas.check_min_insync(partition)
        return partition

    def appended(self, partition: Partition) -> None:
        self.replicas.after_leader_append(partition)

    def wait_durable(self, partition: Partition, end_offset: int) -> Awaitable[None]:
        return self.replicas.wait_committed(partition, end_offset)


@dataclass(eq=False, slots=True)
class _Queued:
    """One transaction's marker for the partitions one broker leads."""

    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    partitions: tuple[TopicPartition, ...]
    answer: asyncio.Future[dict[TopicPartition, ErrorCode]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    def as_request(self) -> dict[str, Any]:
        topics: dict[str, list[int]] = {}
        for topic, index in self.partitions:
            topics.setdefault(topic, []).append(index)
        return {
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "transaction_result": self.committed,
            "topics": [{"name": t, "partition_indexes": p} for t, p in topics.items()],
            "coordinator_epoch": self.coordinator_epoch,
        }

    def answered(self, codes: dict[TopicPartition, ErrorCode]) -> None:
        if not self.answer.done():
            self.answer.set_result(
                {tp: codes.get(tp, ErrorCode.unknown_server_error) for tp in self.partitions}
            )

    def fail(self, code: ErrorCode) -> None:
        self.answered(dict.fromkeys(self.partitions, code))


class MarkerChannel(BatchingChannel[_Queued]):
    """WriteTxnMarkers to one broker."""

    api_key = ApiKey.WRITE_TXN_MARKERS
    version = WRITE_TXN_MARKERS_VERSION

    def _batch(self, queued: Sequence[_Queued]) -> tuple[list[_Queued], list[_Queued]]:
        """At most one marker per producer (a response lists them by producer id), up to
        MAX_MARKERS_PER_REQUEST."""
        batch: list[_Queued] = []
        rest: list[_Queued] = []
        producers: set[int] = set()
        for marker in queued:
            if len(batch) < MAX_MARKERS_PER_REQUEST and marker.producer_id not in producers:
                batch.append(marker)
                producers.add(marker.producer_id)
            else:
                rest.append(marker)
        return batch, rest

    def _request(self, batch: Sequence[_Queued]) -> dict[str, Any]:
        return {"markers": [m.as_request() for m in batch]}

    def _answer(self, batch: Sequence[_Queued], response: Any) -> None:
        answered = {result.producer_id: result for result in response.markers}
        for marker in batch:
            result = answered.get(marker.producer_id)
            if result is None:
                marker.fail(ErrorCode.unknown_server_error)
                continue
            marker.answered(
                {
                    (topic.name, p.partition_index): ErrorCode(p.error_code)
                    for topic in result.topics
                    for p in topic.partitions
                }
            )


def _retried_if_unknown(code: ErrorCode) -> ErrorCode:
    """A leader that does not know a partition our metadata holds lags behind it: retry."""
    if code == ErrorCode.unknown_topic_or_partition:
        return ErrorCode.not_leader_or_follower
    return code


class ClusterMarkerWriter:
    """The transaction coordinator's MarkerWriter in a cluster (see the module docstring)."""

    def __init__(self, node: ClusterNode, local: LocalMarkerWriter) -> None:
        self._node = node
        self._local = local
        self._channels = Channels(node, MarkerChannel)

    async def write(
        self,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        coordinator_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        by_leader: dict[int, list[TopicPartition]] = {}
        outcomes: dict[TopicPartition, ErrorCode] = {}
        for topic, index in partitions:
            if index not in self._node.cache.partitions_of(topic):
                outcomes[topic, index] = ErrorCode.unknown_topic_or_partition  # deleted
                continue
            state = self._node.cache.states.get((topic, index))
            leader = NO_LEADER if state is None else state.leader
            by_leader.setdefault(leader, []).append((topic, index))
        outcomes.update(
            dict.fromkeys(by_leader.pop(NO_LEADER, []), ErrorCode.not_leader_or_follower)
        )
        mine = by_leader.pop(self._node.broker_id, [])
        waits: list[Awaitable[dict[TopicPartition, ErrorCode]]] = []
        if mine:
            waits.append(
                self._local.write(producer_id, producer_epoch, committed, coordinator_epoch, mine)
            )
        for broker_id, theirs in sorted(by_leader.items()):
            queued = _Queued(
                producer_id, producer_epoch, committed, coordinator_epoch, tuple(theirs)
            )
            self._channels.to(broker_id).send(queued)
            waits.append(queued.answer)
        for answered in await asyncio.gather(*waits):
            outcomes.update({tp: _retried_if_unknown(code) for tp, code in answered.items()})
        return outcomes

    async def stop(self) -> None:
        await self._channels.stop()
