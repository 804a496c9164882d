"""The replicas a cluster broker hosts, and what each does: lead or follow.

Roles come from the partition states in the metadata cache (ZooKeeper watches), never from
a request: after any change the affected replicas are reconciled with their state:

- the state names this broker leader, and was written after this broker registered (a
  leadership granted to a previous run of this broker is void until the controller writes
  a new one): become leader at that leader epoch, or take the new ISR of the same epoch;
- it names another broker: follow it (truncate by leader epoch, then fetch);
- the topic is gone or this broker no longer hosts the partition: drop the replica;
- its log failed (an fsync, a torn write): the replica is offline until this broker
  restarts. It neither leads nor follows, and the broker names it offline in ZooKeeper, so
  the controller elects another leader from the ISR and drops it from the ISR (Kafka's
  ``handleLogDirFailure``: one failed disk does not stop a replicated partition).

As leader it tracks followers (isr.py), moves the high watermark, releases acks=all
producers, and changes the ISR itself with compare-and-set on the state znode. Losing the
ZooKeeper session ends every leadership at once; while the lease (lease.py) has run out the
leader serves no client.

Issue 11's seam: ``on_leadership(listener)`` calls ``listener(topic, partition, leading,
leader_epoch)`` after each role change, so a coordinator runtime can load or unload the
partitions of ``__transaction_state`` and ``__consumer_offsets``; followers already feed
their producer state from every replicated batch (Partition.append_replicated).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import threading
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from oncelog.broker import config as cfg
from oncelog.broker.topics import apply_settings, open_partition
from oncelog.clock import wall_clock_ms
from oncelog.cluster.fetcher import ReplicaFetcher
from oncelog.cluster.isr import become_leader
from oncelog.cluster.metadata import Change
from oncelog.cluster.replica import (
    FollowerRole,
    LeaderRole,
    Replica,
    read_high_watermarks,
    read_topic_id,
    write_high_watermarks,
    write_topic_id,
)
from oncelog.cluster.zookeeper import NO_LEADER, PartitionState, SessionExpired, ZooKeeperError
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.storage.atomic_file import write_in_thread
from oncelog.storage.leader_epoch import LeaderEpochCache

if TYPE_CHECKING:
    from oncelog.broker.durability import GroupCommitFlusher
    from oncelog.broker.partition import Partition
    from oncelog.cluster.node import ClusterNode

log = logging.getLogger(__name__)

LeadershipListener = Callable[[str, int, bool, int], None]
OFFLINE_MARK_RETRY_S = 0.5  # between attempts to write or remove an offline mark


def _not_hosted() -> KafkaError:
    return KafkaError(ErrorCode.not_leader_or_follower, "this broker no longer hosts it")


def _deleted() -> KafkaError:
    return KafkaError(ErrorCode.unknown_topic_or_partition, "its topic was deleted")


class ReplicaManager:
    """The replicas a cluster broker hosts, each reconciled with its partition state to lead,
    follow or go (see the module docstring)."""

    def __init__(
        self, node: ClusterNode, data_dir: Path, flusher: GroupCommitFlusher, clean_start: bool
    ) -> None:
        self.node = node
        self.config = node.config
        self.broker_id = node.broker_id
        self.data_dir = data_dir
        self.flusher = flusher
        self.replicas: dict[tuple[str, int], Replica] = {}
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._clean_start = clean_start
        self._checkpointed_hw = read_high_watermarks(data_dir)
        # The periodic checkpoint (a worker thread) and the one at stop (the loop) write one
        # temporary file: one writer at a time.
        self._checkpoint_lock = threading.Lock()
        self._listeners: list[LeadershipListener] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._isr_updates: set[asyncio.Task[None]] = set()
        # Replicas whose log failed, and the tasks telling ZooKeeper so
        self.offline: set[tuple[str, int]] = set()
        self._mark_work: dict[tuple[str, int], asyncio.Task[None]] = {}  # the latest, by key
        # ISR changes this broker wrote as leader (Kafka's IsrShrinksPerSec, IsrExpandsPerSec;
        # the controller's removal of a dead broker is not counted, as in Kafka)
        self.isr_shrinks = 0
        self.isr_expands = 0

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self.node.cache.subscribe(self._on_metadata)
        self.node.on_lease_change(self._on_lease_change)
        self._tasks = [
            asyncio.create_task(self._shrink_isr_periodically(), name="isr-shrink"),
            asyncio.create_task(self._checkpoint_periodically(), name="hw-checkpoint"),
        ]
        self.reconcile_all()

    async def stop(self) -> None:
        self.node.cache.unsubscribe(self._on_metadata)
        background = [*self._tasks, *self._isr_updates, *self._mark_work.values()]
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        for fetcher in self.fetchers.values():
            await fetcher.stop()
        self.fetchers.clear()
        for replica in self.replicas.values():
            if isinstance(replica.role, LeaderRole):
                replica.role.abandon("broker shutting down")
        self._write_checkpoint()
        for replica in self.replicas.values():
            self.flusher.drop(  # another broker leads next
                replica.partition,
                KafkaError(ErrorCode.not_leader_or_follower, "the broker is shutting down"),
            )
            replica.partition.close()

    def partitions(self) -> list[Partition]:
        """Every hosted partition (for the maintenance task: rolls, retention, flushes)."""
        return [r.partition for r in self.replicas.values()]

    def led(self) -> list[tuple[Partition, tuple[int, ...], frozenset[int], int]]:
        """Each partition this broker leads: (partition, its replicas, its ISR, its
        min.insync.replicas), for the replica manager's gauges."""
        return [
            (r.partition, r.role.state.replicas, r.role.state.isr, r.role.min_insync)
            for r in self.replicas.values()
            if isinstance(r.role, LeaderRole)
        ]

    def refresh_settings(self, topics: frozenset[str] | None) -> None:
        """The overrides of ``topics`` (None: every topic's defaults) changed: the hosted
        replicas act on the new configuration from now on (log and record rules, and a
        leader's min.insync.replicas)."""
        by_topic: dict[str, list[Replica]] = {}
        for (topic, _), replica in self.replicas.items():
            if topics is None or topic in topics:
                by_topic.setdefault(topic, []).append(replica)
        for topic, replicas in by_topic.items():
            overrides = self.node.cache.topic_configs.get(topic, {})
            apply_settings([r.partition for r in replicas], self.config, overrides)
            for replica in replicas:
                if isinstance(replica.role, LeaderRole):
                    replica.role.min_insync = self._min_insync(topic)

    def on_leadership(self, listener: LeadershipListener) -> None:
        """Call ``listener(topic, partition, leading, leader_epoch)`` after role changes."""
        self._listeners.append(listener)

    # -- serving ---------------------------------------------------------------------------

    def leader_partition(self, topic: str, index: int, current_leader_epoch: int = -1) -> Partition:
        """The partition if this broker leads it now (and holds its lease), for producers
        and consumers; KafkaError as Kafka answers otherwise."""
        replica, _ = self._leading(topic, index, current_leader_epoch)
        if not self.node.holds_lease():
            raise KafkaError(
                ErrorCode.not_leader_or_follower,
                f"broker {self.broker_id} cannot confirm its ZooKeeper session: not serving "
                f"{topic}-{index} as leader",
            )
        return replica.partition

    def check_min_insync(self, partition: Partition) -> None:
        """acks=all before the append: NOT_ENOUGH_REPLICAS with too small an ISR."""
        role = self._leader_role(partition)
        if len(role.state.isr) < role.min_insync:
            raise KafkaError(
                ErrorCode.not_enough_replicas,
                f"the ISR {sorted(role.state.isr)} of {partition.topic}-{partition.index} is "
                f"smaller than min.insync.replicas {role.min_insync}",
            )

    def wait_replicated(self, partition: Partition, end_offset: int) -> asyncio.Future[None]:
        """A future resolved once every ISR member holds the offsets below ``end_offset``
        (KafkaError NOT_ENOUGH_REPLICAS_AFTER_APPEND, or NOT_LEADER_OR_FOLLOWER when the
        leadership ends first)."""
        return self._wait_for_high_watermark(partition, end_offset, min_insync=True)

    def wait_high_watermark(self, partition: Partition, offset: int) -> asyncio.Future[None]:
        """A future resolved once this leader's high watermark reaches ``offset``, however
        small the ISR (a coordinator loads only what the ISR holds; KafkaError
        NOT_LEADER_OR_FOLLOWER when the leadership ends first)."""
        return self._wait_for_high_watermark(partition, offset, min_insync=False)

    async def wait_committed(self, partition: Partition, end_offset: int) -> None:
        """acks=all for a coordinator's write: every ISR member holds the offsets below
        ``end_offset`` (at least min.insync.replicas of them) and this broker fsynced them."""
        await asyncio.gather(
            self.wait_replicated(partition, end_offset),
            self.flusher.wait_durable(partition, end_offset),
        )

    def leads(self, topic: str, index: int, leader_epoch: int) -> bool:
        """Whether this broker leads ``topic``-``index`` at ``leader_epoch`` now."""
        replica = self.replicas.get((topic, index))
        return (
            replica is not None
            and isinstance(replica.role, LeaderRole)
            and replica.role.leader_epoch == leader_epoch
        )

    def _wait_for_high_watermark(
        self, partition: Partition, offset: int, *, min_insync: bool
    ) -> asyncio.Future[None]:
        role = self._leader_role(partition)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        role.acks_waiting.append((offset, waiter, min_insync))
        role.release(partition.high_watermark)
        return waiter

    def follower_fetch(
        self,
        topic: str,
        index: int,
        follower: int,
        fetch_offset: int,
        current_leader_epoch: int,
        log_start_offset: int = -1,
    ) -> Partition:
        """A follower whose log starts at ``log_start_offset`` fetches from
        ``fetch_offset``: record its progress (the high watermark may move, the ISR may
        grow, a DeleteRecords may be answered) and return the partition to read from."""
        replica, role = self._leading(topic, index, current_leader_epoch)
        if follower not in role.state.followers:
            raise KafkaError(
                ErrorCode.not_leader_or_follower,
                f"broker {follower} is not a replica of {topic}-{index}",
            )
        partition = replica.partition
        leader_end = partition.log.log_end_offset
        role.state = role.state.record_fetch(
            follower, fetch_offset, wall_clock_ms(), leader_end, log_start_offset
        )
        self._advance_high_watermark(replica, role)
        if role.low_watermark_waiting:
            role.release_low_watermark(self._low_watermark(partition, role))
        if role.state.may_join(follower):
            self._submit_isr(replica, role, role.state.isr | {follower})
        return partition

    # -- DeleteRecords ----------------------------------------------------------------------

    def log_start_moved(self, partition: Partition) -> None:
        """A leader's log start moved up (DeleteRecords): its leader-epoch cache forgets
        what lies below, and the followers' long polls return now, carrying the new log
        start to them."""
        replica = self.replicas.get((partition.topic, partition.index))
        if replica is not None:
            replica.epochs.truncate_from_start(partition.log.log_start_offset)
        partition.wake_readers()

    def wait_low_watermark(self, partition: Partition, offset: int) -> asyncio.Future[int]:
        """A future resolved with the low watermark once every live replica's log start
        has reached ``offset`` (Kafka's DelayedDeleteRecords; NOT_LEADER_OR_FOLLOWER if
        the leadership ends first)."""
        role = self._leader_role(partition)
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        role.low_watermark_waiting.append((offset, waiter))
        role.release_low_watermark(self._low_watermark(partition, role))
        return waiter

    def _low_watermark(self, partition: Partition, role: LeaderRole) -> int:
        return role.state.low_watermark(partition.log.log_start_offset, self.node.cache.brokers)

    def follow_log_start(self, replica: Replica, leader_log_start: int) -> bool:
        """A follower takes its leader's log start when it is past its own (Kafka's
        ``maybeIncrementLogStartOffset(LeaderOffsetIncremented)``), producer state kept;
        whether it moved (the caller persists it)."""
        partition = replica.partition
        offset = min(leader_log_start, partition.log.log_end_offset)
        if offset <= partition.log.log_start_offset:
            return False
        partition.move_log_start(offset)
        replica.epochs.truncate_from_start(partition.log.log_start_offset)
        log.info("%s-%d: log start moved to %d, as the leader's", *replica.key, offset)
        return True

    def end_offset_for_epoch(
        self, topic: str, index: int, current_leader_epoch: int, epoch: int
    ) -> tuple[int, int]:
        """OffsetsForLeaderEpoch on the leader: (epoch, end offset) for ``epoch``."""
        replica, _ = self._leading(topic, index, current_leader_epoch)
        return replica.epochs.end_offset_for(epoch, replica.partition.log.log_end_offset)

    def leader_epoch_start(self, partition: Partition) -> int | None:
        """Where the current leader epoch began (ListOffsets waits for the high watermark to
        reach it: OFFSET_NOT_AVAILABLE before, as Kafka)."""
        role = self._leader_role(partition)
        return role.state.epoch_start_offset

    # -- roles -----------------------------------------------------------------------------

    def reconcile_all(self) -> None:
        keys = set(self.replicas) | set(self.node.cache.states)
        for topic, assignment in self.node.cache.topics.items():
            keys |= {(topic, p) for p in assignment.replicas}
        for key in sorted(keys):
            self._reconcile(key)

    def _on_metadata(self, change: Change) -> None:
        keys = set(change.partitions)
        keys |= {key for key in self.replicas if key[0] in change.topics_removed}
        for key in sorted(keys):
            self._reconcile(key)
        if change.brokers:
            for fetcher in self.fetchers.values():
                fetcher.brokers_changed()

    def _on_lease_change(self) -> None:
        if self.node.lease.session_id is None:  # the session is lost: no leadership holds
            for replica in self.replicas.values():
                if isinstance(replica.role, LeaderRole):
                    replica.role.abandon("the ZooKeeper session was lost")
                    self._set_role(replica, None)
        self.reconcile_all()

    # -- offline replicas ------------------------------------------------------------------

    def log_failed(self, partition: Partition) -> None:
        """``partition``'s log failed and is offline until this broker restarts: stop
        leading or following it, and have the controller move its leadership and drop it
        from the ISR. Called (``Partition.on_offline``) after each failed write or flush
        that leaves the log offline: the client's, a coordinator's or the fetcher's
        append, or the flusher's fsync."""
        key = (partition.topic, partition.index)
        replica = self.replicas.get(key)
        if replica is None or replica.partition is not partition or key in self.offline:
            return
        self.offline.add(key)
        log.error(
            "%s-%d is offline on broker %d (its log failed) until this broker restarts; "
            "asking the controller to elect another leader",
            *key,
            self.broker_id,
        )
        self._set_role(replica, None)
        self._mark_offline(key)

    async def write_offline_marks(self) -> None:
        """Mark every offline replica in ZooKeeper (ZooKeeperError if it cannot be reached).
        A new session does this before it registers the broker: the old session's marks
        went with it, and the controller must never see this broker live without them (it
        would elect an offline replica that is the last of its ISR)."""
        for key in sorted(self.offline):
            await self.node.zk.mark_replica_offline(self.broker_id, *key)

    def _mark_offline(self, key: tuple[str, int]) -> None:
        self._in_turn(key, self._write_offline_mark)

    def _in_turn(
        self, key: tuple[str, int], work: Callable[[tuple[str, int]], Awaitable[None]]
    ) -> None:
        """Run ``work(key)`` once the key's earlier mark work is done, so a mark and its
        removal reach ZooKeeper in the order they were decided (a topic deleted, created
        again, and its new replica failing at once keeps its mark)."""
        previous = self._mark_work.get(key)

        async def after_previous() -> None:
            if previous is not None:
                await asyncio.gather(previous, return_exceptions=True)
            await work(key)

        task = asyncio.create_task(after_previous(), name=f"offline-mark-{key[0]}-{key[1]}")
        self._mark_work[key] = task
        task.add_done_callback(lambda done: self._mark_work_done(key, done))

    def _mark_work_done(self, key: tuple[str, int], task: asyncio.Task[None]) -> None:
        if self._mark_work.get(key) is task:
            del self._mark_work[key]

    async def _write_offline_mark(self, key: tuple[str, int]) -> None:
        """Write the mark, while the replica is still offline here."""
        await self._retry_mark(
            key, True, self.node.zk.mark_replica_offline, "could not mark %s-%d offline yet"
        )

    async def _remove_offline_mark(self, key: tuple[str, int]) -> None:
        """Remove the mark of a replica whose topic was deleted, while it stays online."""
        await self._retry_mark(
            key,
            False,
            self.node.zk.unmark_replica_offline,
            "could not remove the offline mark of %s-%d yet",
        )

    async def _retry_mark(
        self,
        key: tuple[str, int],
        offline: bool,
        call: Callable[[int, str, int], Awaitable[None]],
        failure: str,
    ) -> None:
        """``call`` for the key's mark until it succeeds, the replica's offline state is no
        longer ``offline`` (a later decision took over), or the session is gone (the next
        session writes the marks before registering)."""
        while (key in self.offline) == offline and self.node.lease.session_id is not None:
            try:
                await call(self.broker_id, *key)
                return
            except ZooKeeperError as exc:
                log.warning(failure + ": %s", *key, exc)
                await asyncio.sleep(OFFLINE_MARK_RETRY_S)

    def _reconcile(self, key: tuple[str, int]) -> None:
        topic, index = key
        cache = self.node.cache
        assignment = cache.topics.get(topic)
        replicas = None if assignment is None else assignment.replicas.get(index)
        if assignment is None or replicas is None or self.broker_id not in replicas:
            if key in self.replicas:
                self._drop(key, delete=topic not in cache.topics)
            return
        state = cache.states.get(key)
        if state is None:
            return  # the controller has not elected anyone yet
        if key in self.offline:
            return  # neither leads nor follows (nor is reopened) until the broker restarts
        replica = self._ensure_replica(topic, index, assignment.topic_id)
        if state.leader == self.broker_id:
            if self._may_lead(state):
                self._lead(replica, state, replicas)
            elif replica.role is not None:
                self._set_role(replica, None)  # a previous run's leadership: wait for a new one
        else:
            self._follow(replica, state)

    def _may_lead(self, state: PartitionState) -> bool:
        registration = self.node.registration
        return (
            registration is not None
            and self.node.lease.session_id is not None
            and state.modified_zxid > registration.epoch
        )

    def _lead(self, replica: Replica, state: PartitionState, replicas: tuple[int, ...]) -> None:
        role = replica.role
        partition = replica.partition
        if isinstance(role, LeaderRole) and role.leader_epoch == state.leader_epoch:
            role.zk_version = state.version
            role.controller_epoch = state.controller_epoch
            if frozenset(state.isr) != role.state.isr and not role.state.update_in_flight:
                role.state = role.state.with_isr(frozenset(state.isr))
                self._advance_high_watermark(replica, role)
            return
        if isinstance(role, LeaderRole) and role.leader_epoch > state.leader_epoch:
            return  # an older state delivered late
        end = partition.log.log_end_offset
        replica.epochs.assign(state.leader_epoch, end)
        partition.leader_epoch = state.leader_epoch
        hw = partition.high_watermark if partition.replicated_high_watermark is not None else 0
        leader_state = become_leader(
            self.broker_id,
            state.leader_epoch,
            replicas,
            frozenset(state.isr),
            end,
            hw,
            wall_clock_ms(),
        )
        new_role = LeaderRole(
            leader_state, state.version, state.controller_epoch, self._min_insync(partition.topic)
        )
        if isinstance(role, LeaderRole):
            # Still the leader, at a new epoch (the controller changed the ISR): the batches
            # waiting for acks=all stay in this log, so their producers keep waiting, and
            # so do DeleteRecords requests.
            new_role.take_waiters(role)
        self._set_role(replica, new_role)
        self._advance_high_watermark(replica, new_role, force=True)
        log.info(
            "leading %s-%d at leader epoch %d from offset %d (ISR %s, high watermark %d)",
            partition.topic,
            partition.index,
            state.leader_epoch,
            end,
            sorted(state.isr),
            partition.high_watermark,
        )

    def _follow(self, replica: Replica, state: PartitionState) -> None:
        role = replica.role
        if isinstance(role, FollowerRole) and (role.leader, role.leader_epoch) == (
            state.leader,
            state.leader_epoch,
        ):
            return
        if role is not None and role.leader_epoch > state.leader_epoch:
            return  # an older state delivered late
        self._set_role(replica, FollowerRole(state.leader, state.leader_epoch))
        if state.leader != NO_LEADER:
            self._fetcher(state.leader).add(replica, state.leader_epoch)
            log.info(
                "following broker %d for %s-%d at leader epoch %d",
                state.leader,
                replica.partition.topic,
                replica.partition.index,
                state.leader_epoch,
            )

    def _set_role(self, replica: Replica, role: LeaderRole | FollowerRole | None) -> None:
        old = replica.role
        if isinstance(old, LeaderRole) and old is not role:
            old.abandon(f"broker {self.broker_id} no longer leads {replica.key}")
        for fetcher in self.fetchers.values():
            fetcher.remove(replica.key)
        replica.role = role
        leading = isinstance(role, LeaderRole)
        if leading != isinstance(old, LeaderRole) or (
            leading and old is not None and old.leader_epoch != replica.leader_epoch
        ):
            for listener in list(self._listeners):
                try:
                    listener(*replica.key, leading, replica.leader_epoch)
                except Exception:
                    log.exception("leadership listener %r failed", listener)

    # -- leader bookkeeping ---------------------------------------------------------------

    def _advance_high_watermark(
        self, replica: Replica, role: LeaderRole, force: bool = False
    ) -> None:
        partition = replica.partition
        before = role.state.high_watermark
        role.state = role.state.with_high_watermark(partition.log.log_end_offset)
        partition.replicated_high_watermark = role.state.high_watermark
        if force or role.state.high_watermark != before:
            role.release(role.state.high_watermark)
            partition.wake_readers()

    def after_leader_append(self, partition: Partition) -> None:
        """A produce appended: with no follower in the ISR the high watermark moves now."""
        replica = self.replicas.get((partition.topic, partition.index))
        if replica is not None and isinstance(replica.role, LeaderRole):
            self._advance_high_watermark(replica, replica.role)

    def _submit_isr(self, replica: Replica, role: LeaderRole, isr: frozenset[int]) -> None:
        """Write a new ISR with compare-and-set; expansion counts at once for the high
        watermark (stricter, so safe even if the write fails)."""
        added, removed = isr - role.state.isr, role.state.isr - isr
        role.state = replace(role.state, adding=frozenset(added), removing=frozenset(removed))
        ordered = tuple(r for r in role.state.replicas if r in isr)
        proposal = PartitionState(
            self.broker_id, role.leader_epoch, ordered, role.controller_epoch, role.zk_version
        )
        task = asyncio.create_task(self._write_isr(replica, role, proposal, bool(removed)))
        self._isr_updates.add(task)
        task.add_done_callback(self._isr_updates.discard)

    async def _write_isr(
        self, replica: Replica, role: LeaderRole, proposal: PartitionState, shrink: bool
    ) -> None:
        topic, index = replica.key
        try:
            written = await self.node.zk.update_isr(topic, index, proposal)
        except (ZooKeeperError, SessionExpired) as exc:
            log.warning("could not write the ISR of %s-%d: %s", topic, index, exc)
            written = None
        if replica.role is not role:
            return
        if written is None:
            role.state = role.state.with_isr(role.state.isr)  # nothing in flight any more
            return
        log.info("%s-%d ISR %s -> %s", topic, index, sorted(role.state.isr), sorted(written.isr))
        if shrink:  # as Kafka marks IsrShrinksPerSec and IsrExpandsPerSec once written
            self.isr_shrinks += 1
        else:
            self.isr_expands += 1
        role.zk_version = written.version
        role.state = role.state.with_isr(frozenset(written.isr))
        self._advance_high_watermark(replica, role)

    async def _shrink_isr_periodically(self) -> None:
        lag_ms = self.config.replica_lag_time_max_ms
        while True:
            await asyncio.sleep(lag_ms / 2000)
            now = wall_clock_ms()
            for replica in list(self.replicas.values()):
                role = replica.role
                if not isinstance(role, LeaderRole) or not self.node.holds_lease():
                    continue
                late = role.state.out_of_sync(now, replica.partition.log.log_end_offset, lag_ms)
                if late:
                    log.info(
                        "%s-%d: followers %s fell behind for more than %d ms",
                        *replica.key,
                        sorted(late),
                        lag_ms,
                    )
                    self._submit_isr(replica, role, role.state.isr - late)

    # -- follower bookkeeping --------------------------------------------------------------

    def follower_high_watermark(self, replica: Replica, leader_high_watermark: int) -> None:
        partition = replica.partition
        new = min(leader_high_watermark, partition.log.log_end_offset)
        old = partition.replicated_high_watermark
        partition.replicated_high_watermark = new if old is None else max(old, new)

    def truncate(self, replica: Replica, offset: int) -> None:
        """Cut a follower's diverged tail: log, producer state, leader epochs.

        At or past the log end nothing is cut, but the leader epochs starting at the log
        end still go, as in Kafka's UnifiedLog.truncateTo: an epoch this broker began as
        leader and lost before appending in it. Kept, it would end the epoch before it at
        this log end in every later OffsetsForLeaderEpoch answer of this broker, the
        batches fetched since included, and a follower holding them would cut committed
        records below its high watermark.
        """
        partition = replica.partition
        if offset < partition.log.log_end_offset:
            self.node.truncating(partition, offset)
            partition.truncate_to(offset, wall_clock_ms(), self.config.producer_id_expiration_ms)
            self.flusher.cut(partition, partition.log.log_end_offset)
        replica.epochs.truncate_from_end(partition.log.log_end_offset)

    def restart_log_at(self, replica: Replica, offset: int) -> None:
        """The leader's log starts past ours: drop ours and start empty at its start."""
        partition = replica.partition
        self.node.truncating(partition, offset)
        partition.log.start_over_at(offset)
        self.flusher.cut(partition, None)
        partition.after_retention()  # producer snapshots of the old log go
        partition.truncate_to(offset, wall_clock_ms(), self.config.producer_id_expiration_ms)
        replica.epochs.clear()
        partition.replicated_high_watermark = offset

    # -- replicas on disk ------------------------------------------------------------------

    def _ensure_replica(self, topic: str, index: int, topic_id: uuid.UUID) -> Replica:
        key = (topic, index)
        replica = self.replicas.get(key)
        if replica is not None:
            return replica
        directory = self.data_dir / f"{topic}-{index}"
        stored = read_topic_id(directory)
        if stored is not None and stored != topic_id:
            log.warning(
                "%s holds a deleted topic's replica (id %s): removing it", directory, stored
            )
            shutil.rmtree(directory, ignore_errors=True)
        write_topic_id(directory, topic_id)
        partition = open_partition(
            self.data_dir,
            self.config,
            topic,
            self.node.cache.topic_configs.get(topic, {}),
            index,
            clean_shutdown=self._clean_start,
            now_ms=wall_clock_ms(),
        )
        partition.on_offline = self.log_failed
        end = partition.log.log_end_offset
        partition.replicated_high_watermark = min(self._checkpointed_hw.get(key, 0), end)
        epochs = LeaderEpochCache.load(partition.log.directory, partition.log.log_start_offset, end)
        replica = Replica(partition, epochs, topic_id)
        self.replicas[key] = replica
        return replica

    def _drop(self, key: tuple[str, int], *, delete: bool) -> None:
        replica = self.replicas.pop(key)
        if delete and key in self.offline:  # a topic created again gets a healthy replica
            self.offline.discard(key)
            self._in_turn(key, self._remove_offline_mark)
        self._set_role(replica, None)
        # What Kafka answers a DelayedProduce on a partition no longer hosted: UNKNOWN_TOPIC_
        # OR_PARTITION if its topic is gone, else NOT_LEADER_OR_FOLLOWER (moved elsewhere).
        if delete:
            self.flusher.drop(replica.partition, _deleted())
            log.info("deleting the replica of %s-%d (topic deleted)", *key)
            replica.partition.log.delete()
        else:
            self.flusher.drop(replica.partition, _not_hosted())
            replica.partition.close()

    def _fetcher(self, leader: int) -> ReplicaFetcher:
        fetcher = self.fetchers.get(leader)
        if fetcher is None:
            fetcher = self.fetchers[leader] = ReplicaFetcher(self, leader)
            fetcher.start()
        return fetcher

    async def _checkpoint_periodically(self) -> None:
        interval = self.config.replica_high_watermark_checkpoint_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            await write_in_thread(self._write_checkpoint)

    def _write_checkpoint(self) -> None:
        with self._checkpoint_lock:
            marks = {k: r.partition.high_watermark for k, r in list(self.replicas.items())}
            try:
                write_high_watermarks(self.data_dir, marks)
            except OSError:
                log.exception("could not write the high watermark checkpoint")

    # -- helpers ---------------------------------------------------------------------------

    def _replica_or_error(self, topic: str, index: int) -> Replica:
        """The replica hosted here; KafkaError as Kafka answers otherwise, KAFKA_STORAGE_ERROR
        for one whose log failed (retriable: the client refreshes its metadata and finds the
        leader the controller elected instead)."""
        if (topic, index) in self.offline:
            raise KafkaError(
                ErrorCode.kafka_storage_error,
                f"{topic}-{index} is offline on broker {self.broker_id}: its log failed",
            )
        replica = self.replicas.get((topic, index))
        if replica is not None:
            return replica
        replicas = self.node.cache.partitions_of(topic)
        if index in replicas:
            raise KafkaError(
                ErrorCode.not_leader_or_follower,
                f"broker {self.broker_id} does not host {topic}-{index}",
            )
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"{topic}-{index} does not exist")

    def _leading(
        self, topic: str, index: int, current_leader_epoch: int
    ) -> tuple[Replica, LeaderRole]:
        """The replica and its leader role, if this broker leads it at the epoch the request
        names (-1: any); KafkaError otherwise."""
        replica = self._replica_or_error(topic, index)
        role = replica.role
        if not isinstance(role, LeaderRole):
            raise KafkaError(
                ErrorCode.not_leader_or_follower,
                f"broker {self.broker_id} does not lead {topic}-{index}",
            )
        _check_epoch(current_leader_epoch, role.leader_epoch, topic, index)
        return replica, role

    def _leader_role(self, partition: Partition) -> LeaderRole:
        replica = self.replicas.get((partition.topic, partition.index))
        if replica is None or not isinstance(replica.role, LeaderRole):
            raise KafkaError(
                ErrorCode.not_leader_or_follower,
                f"broker {self.broker_id} no longer leads {partition.topic}-{partition.index}",
            )
        return replica.role

    def _min_insync(self, topic: str) -> int:
        overrides = self.node.cache.topic_configs.get(topic, {})
        return int(cfg.TopicConfig(self.config, overrides).get("min.insync.replicas"))


def _check_epoch(requested: int, current: int, topic: str, index: int) -> None:
    """Kafka's fencing of requests that carry a leader epoch (-1: none)."""
    if requested < 0 or requested == current:
        return
    if requested < current:
        raise KafkaError(
            ErrorCode.fenced_leader_epoch,
            f"leader epoch {requested} of {topic}-{index} is older than the current {current}",
        )
    raise KafkaError(
        ErrorCode.unknown_leader_epoch,
        f"leader epoch {requested} of {topic}-{index} is newer than this broker knows ({current})",
    )
