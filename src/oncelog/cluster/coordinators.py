"""The transaction and group coordinators of a cluster broker: their internal topics
replicated like any other, each partition coordinated by the broker that leads it.

- **The topics** (``__transaction_state``, ``__consumer_offsets``) are created in ZooKeeper
  by the first FindCoordinator that needs one (Kafka's ``getOrCreateInternalTopic``), with
  ``transaction.state.log.replication.factor`` / ``offsets.topic.replication.factor`` and,
  for the transaction log, ``min.insync.replicas`` = ``transaction.state.log.min.isr``.
  With fewer live brokers than the replication factor the creation is refused and
  FindCoordinator answers COORDINATOR_NOT_AVAILABLE, as Kafka does.
- **A write** (``ReplicatedInternalTopic``, the runtime's PartitionWriter) is an acks=all
  append to the partition this broker leads: NOT_ENOUGH_REPLICAS before it if the ISR is
  too small, durable once every ISR member holds it and this broker fsynced it. A broker
  that no longer leads (or cannot confirm its ZooKeeper session) gets
  NOT_LEADER_OR_FOLLOWER, which the runtime answers as NOT_COORDINATOR.
- **A load** waits until the new leader's high watermark reaches its log end before it
  replays: a coordinator must never act on a record the ISR does not hold (a PrepareCommit
  only the dead leader's log had would otherwise be completed here, then vanish with this
  leader's own death and be aborted by the next: half committed, half aborted).
- **The handover** (``CoordinatorHandover``) listens to the replica manager's leadership
  changes and loads (``on_elected``, the leader epoch becoming the coordinator epoch) or
  unloads (``on_resigned``) the coordinator partition.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from oncelog.broker.coordinator_log import (
    append_coordinator_records,
    offline_on_io_error,
    replay_partition,
)
from oncelog.broker.coordinator_runtime import NO_PRODUCER, CoordinatorShard, LoadReport
from oncelog.broker.internal_topics import (
    CONSUMER_OFFSETS,
    TRANSACTION_STATE,
    internal_topic_configs,
)
from oncelog.cluster.markers import ClusterMarkerWriter, LeaderPartitions
from oncelog.cluster.txn_verification import TxnVerifier
from oncelog.cluster.zookeeper import BrokerRegistration
from oncelog.coordinator_partitions import partition_for
from oncelog.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker
    from oncelog.broker.config import BrokerConfig
    from oncelog.broker.partition import Partition
    from oncelog.broker.txn_markers import LocalMarkerWriter
    from oncelog.cluster.node import ClusterNode
    from oncelog.cluster.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

# How long FindCoordinator waits, after creating an internal topic, for its partitions to
# get leaders before answering (the client would otherwise retry at once).
CREATED_TOPIC_WAIT_S = 3.0
LEASE_POLL_S = 0.05  # how often a coordinator load asks whether the lease holds again


@dataclass(frozen=True, slots=True)
class InternalTopicSpec:
    """How a cluster creates one internal topic."""

    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str]


def internal_topic_specs(config: BrokerConfig) -> dict[str, InternalTopicSpec]:
    """Both internal topics as this broker would create them (Kafka's keys)."""
    txn_configs = {
        **internal_topic_configs(TRANSACTION_STATE, config),
        "min.insync.replicas": str(config.transaction_state_log_min_isr),
        "unclean.leader.election.enable": "false",
    }
    return {
        TRANSACTION_STATE: InternalTopicSpec(
            TRANSACTION_STATE,
            config.transaction_state_log_num_partitions,
            config.transaction_state_log_replication_factor,
            txn_configs,
        ),
        CONSUMER_OFFSETS: InternalTopicSpec(
            CONSUMER_OFFSETS,
            config.offsets_topic_num_partitions,
            config.offsets_topic_replication_factor,
            internal_topic_configs(CONSUMER_OFFSETS, config),
        ),
    }


# -- finding the coordinator -----------------------------------------------------------------


async def find_coordinator(
    node: ClusterNode, spec: InternalTopicSpec, key: str
) -> BrokerRegistration:
    """The live broker leading the partition of ``spec``'s topic that coordinates ``key``,
    creating the topic first if it does not exist yet (KafkaError
    COORDINATOR_NOT_AVAILABLE while there is none)."""
    if spec.name not in node.cache.topics:
        await _create(node, spec)
    assignment = node.cache.topics.get(spec.name)
    if assignment is None:
        raise KafkaError(ErrorCode.coordinator_not_available, f"{spec.name} is being created")
    partition = partition_for(key, len(assignment.replicas))
    leader = node.cache.live_leader(spec.name, partition)
    if leader is None:
        raise KafkaError(
            ErrorCode.coordinator_not_available,
            f"{spec.name}-{partition} has no live leader at the moment",
        )
    return leader


async def _create(node: ClusterNode, spec: InternalTopicSpec) -> None:
    try:
        await node.topic_admin.create(
            spec.name,
            spec.partitions,
            spec.replication_factor,
            dict(spec.configs),
            internal=True,
        )
    except KafkaError as exc:
        if exc.code == ErrorCode.topic_already_exists:
            return  # another broker created it first
        raise KafkaError(
            ErrorCode.coordinator_not_available,
            f"cannot create {spec.name} yet: {exc.message}",
        ) from exc
    await node.topic_admin.wait_for_leaders(spec.name, CREATED_TOPIC_WAIT_S)


# -- the coordinator runtime's writer and loader -----------------------------------------------


class ReplicatedInternalTopic:
    """One internal topic of a cluster as the coordinator runtime sees it: its partition
    count, a PartitionWriter and a CoordinatorLoader over the partitions this broker leads."""

    def __init__(self, node: ClusterNode, spec: InternalTopicSpec) -> None:
        self._node = node
        self.name = spec.name
        self._configured_partitions = spec.partitions
        self._leaders = LeaderPartitions(node)  # acks=all, as the markers on led partitions

    def partition_count(self) -> int:
        assignment = self._node.cache.topics.get(self.name)
        return self._configured_partitions if assignment is None else len(assignment.replicas)

    def exists(self) -> bool:
        return self.name in self._node.cache.topics

    def _led(self, index: int) -> Partition:
        return self._leaders.replicas.leader_partition(self.name, index)

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
        led = self._leaders.writable(self.name, partition)
        with offline_on_io_error(led):  # its on_offline moves the leadership
            last = append_coordinator_records(led, records, now_ms, producer_id, producer_epoch)
        self._leaders.appended(led)
        return last

    def append_marker(
        self,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        coordinator_epoch: int,
        now_ms: int,
    ) -> int:
        led = self._leaders.writable(self.name, partition)
        with offline_on_io_error(led):
            offset = led.append_marker(
                producer_id, producer_epoch, committed, coordinator_epoch, now_ms
            )
        self._leaders.appended(led)
        return offset

    def wait_durable(self, partition: int, end_offset: int) -> Awaitable[None]:
        return self._leaders.wait_durable(self._led(partition), end_offset)

    # -- CoordinatorLoader -----------------------------------------------------------------

    async def _lease_confirmed(self) -> None:
        """Wait (one session timeout at most) until this broker's ZooKeeper lease holds. A
        broker elected right after registering may find it lapsed for a moment: the lease
        counts from before the wait for its previous session to expire, and opening its
        replicas can keep the loop from renewing it. A load refused then would never be
        tried again while this broker leads the partition (seen in the cluster CTP kill
        loop: both coordinators of a loop unloaded for minutes)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._node.lease.timeout_s
        while not self._node.holds_lease() and loop.time() < deadline:
            await asyncio.sleep(LEASE_POLL_S)

    async def load(self, partition: int, shard: CoordinatorShard) -> LoadReport:
        """Replay the partition once the ISR holds all of it (see the module docstring)."""
        await self._lease_confirmed()
        led = self._led(partition)
        end = led.log.log_end_offset
        if led.high_watermark < end:
            log.info(
                "%s-%d: waiting for the high watermark (%d) to reach the log end (%d)",
                self.name,
                partition,
                led.high_watermark,
                end,
            )
            await self._leaders.replicas.wait_high_watermark(led, end)
        return replay_partition(led, shard)


# -- following leadership ---------------------------------------------------------------------


class Coordinator(Protocol):
    """The leadership seam of the transaction and group coordinators (``LedCoordinator``)."""

    def on_elected(self, partition: int, leader_epoch: int) -> Coroutine[Any, Any, None]: ...

    def on_resigned(self, partition: int, leader_epoch: int | None) -> None: ...


class CoordinatorHandover:
    """Loads a coordinator partition where it becomes led and unloads it where leadership
    ends: ``coordinators`` by internal topic name."""

    def __init__(self, replicas: ReplicaManager, coordinators: Mapping[str, Coordinator]) -> None:
        self._replicas = replicas
        self._coordinators = coordinators
        self._loads: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        """Follow every leadership change from now on, and take up what this broker already
        leads."""
        self._replicas.on_leadership(self._changed)
        for (topic, index), replica in list(self._replicas.replicas.items()):
            if topic in self._coordinators and self._replicas.leads(
                topic, index, replica.leader_epoch
            ):
                self._changed(topic, index, True, replica.leader_epoch)

    async def stop(self) -> None:
        for task in self._loads:
            task.cancel()
        await asyncio.gather(*self._loads, return_exceptions=True)

    def _changed(self, topic: str, index: int, leading: bool, leader_epoch: int) -> None:
        coordinator = self._coordinators.get(topic)
        if coordinator is None:
            return
        if not leading:
            # -1: no role at all (no leader elected, or the ZooKeeper session was lost):
            # whatever epoch this broker held, it holds it no longer.
            coordinator.on_resigned(index, leader_epoch if leader_epoch >= 0 else None)
            return
        task = asyncio.ensure_future(self._elect(coordinator, topic, index, leader_epoch))
        self._loads.add(task)
        task.add_done_callback(self._loads.discard)

    async def _elect(
        self, coordinator: Coordinator, topic: str, index: int, leader_epoch: int
    ) -> None:
        # The load registers the partition in its first step; by then the leadership may
        # have ended (its resignation, delivered first, found nothing to unload).
        if self._replicas.leads(topic, index, leader_epoch):
            await coordinator.on_elected(index, leader_epoch)


# -- what a cluster broker's coordinators stand on -----------------------------------------------


class ClusterCoordinatorIO:
    """The I/O under a cluster broker's coordinators: replicated internal topics,
    producer ids from ZooKeeper blocks, markers sent to each partition's leader, and the
    handover that loads and unloads coordinator partitions with leadership
    (``LocalCoordinatorIO`` in broker.py is a single node's)."""

    def __init__(self, config: BrokerConfig, cluster: ClusterNode) -> None:
        self._cluster = cluster
        specs = internal_topic_specs(config)
        self.offsets = ReplicatedInternalTopic(cluster, specs[CONSUMER_OFFSETS])
        self.state = ReplicatedInternalTopic(cluster, specs[TRANSACTION_STATE])
        self.marked = LeaderPartitions(cluster)
        self._writer: ClusterMarkerWriter | None = None
        self._handover: CoordinatorHandover | None = None
        self._verifier: TxnVerifier | None = None

    @property
    def verifier(self) -> TxnVerifier:
        """Confirms transactional batches with their coordinator (once started)."""
        assert self._verifier is not None, "the broker is not in the cluster yet"
        return self._verifier

    def marker_writer(self, local: LocalMarkerWriter) -> ClusterMarkerWriter:
        self._writer = ClusterMarkerWriter(self._cluster, local)
        return self._writer

    def take_producer_id(self, broker: Broker) -> Callable[[], int]:
        return self._cluster.producer_ids.take

    def start(self, broker: Broker) -> None:
        """Once the broker is in the cluster: follow leadership from now on."""
        assert self._cluster.replicas is not None
        self._handover = CoordinatorHandover(
            self._cluster.replicas,
            {CONSUMER_OFFSETS: broker.groups, TRANSACTION_STATE: broker.transactions},
        )
        self._handover.start()
        self._verifier = TxnVerifier(self._cluster, broker.transactions)

    async def stop(self) -> None:
        if self._handover is not None:
            await self._handover.stop()
        if self._verifier is not None:
            await self._verifier.stop()
        if self._writer is not None:
            await self._writer.stop()
