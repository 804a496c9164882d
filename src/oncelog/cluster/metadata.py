"""What a cluster broker knows of the cluster: live brokers, the controller, topics, their
configurations and partition states, kept current by ZooKeeper watches.

Each broker watches the znodes itself (see docs/cluster.md for why watches rather than
Kafka's LeaderAndIsr/UpdateMetadata requests), so this cache is the broker's copy of
ZooKeeper, updated on the event loop in the order ZooKeeper reported the changes. Listeners
(the replica manager, the controller, Metadata's waiters) are told after every change,
with what changed.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from oncelog.cluster.zookeeper import (
    BROKER_IDS,
    CONTROLLER,
    OFFLINE_REPLICAS,
    TOPICS,
    BrokerRegistration,
    EntityConfig,
    PartitionState,
    TopicAssignment,
    WatchHandle,
    Znode,
    decode_controller,
    decode_partition_state,
    decode_topic,
    parse_offline_replica,
    partition_state_path,
    topic_path,
)

if TYPE_CHECKING:
    from oncelog.cluster.zookeeper import ZooKeeperSession

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Change:
    """What a listener is told: the partitions whose state or assignment changed, the
    topics that appeared or went, the topics whose configuration changed, and whether the
    live brokers or the controller did."""

    partitions: frozenset[tuple[str, int]] = frozenset()
    topics_added: frozenset[str] = frozenset()
    topics_removed: frozenset[str] = frozenset()
    configs: frozenset[str] = frozenset()
    brokers: bool = False
    controller: bool = False


Listener = Callable[[Change], None]


class MetadataCache:
    """The broker's view of ZooKeeper. Read it freely on the loop; only the watcher
    writes it."""

    def __init__(self) -> None:
        self.brokers: dict[int, BrokerRegistration] = {}
        self.controller_id: int | None = None
        self.topics: dict[str, TopicAssignment] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}
        self._config_zxids: dict[str, int] = {}
        self.states: dict[tuple[str, int], PartitionState] = {}
        # The brokers whose replica of a partition is offline (its log failed), by partition
        self.offline_replicas: dict[tuple[str, int], frozenset[int]] = {}
        self._by_id: dict[uuid.UUID, str] = {}
        self._listeners: list[Listener] = []
        self._changed = asyncio.Event()

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        self._listeners.remove(listener)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self._by_id.get(topic_id)

    def partitions_of(self, topic: str) -> Mapping[int, tuple[int, ...]]:
        assignment = self.topics.get(topic)
        return {} if assignment is None else assignment.replicas

    def live_leader(self, topic: str, index: int) -> BrokerRegistration | None:
        """The partition's leader, if it has one and that broker is alive."""
        state = self.states.get((topic, index))
        return None if state is None else self.brokers.get(state.leader)

    def set_topic_config(self, topic: str, config: EntityConfig) -> bool:
        """Take a topic's overrides as read from ZooKeeper, unless what the cache holds was
        written later (two reads may finish out of order); whether they changed."""
        if topic not in self.topics or config.modified_zxid < self._config_zxids.get(topic, -1):
            return False
        self._config_zxids[topic] = config.modified_zxid
        changed = self.topic_configs.get(topic) != dict(config.configs)
        self.topic_configs[topic] = dict(config.configs)
        return changed

    def broker_epochs(self) -> dict[int, int]:
        return {b: r.epoch for b, r in self.brokers.items()}

    async def changed(self) -> None:
        """Return at the next change (Metadata and CreateTopics wait on it)."""
        self._changed.clear()
        await self._changed.wait()

    def _notify(self, change: Change) -> None:
        self._changed.set()
        for listener in list(self._listeners):
            try:
                listener(change)
            except Exception:
                log.exception("metadata listener %r failed on %r", listener, change)


class MetadataWatcher:
    """Keeps a MetadataCache current from ZooKeeper watches."""

    def __init__(self, zk: ZooKeeperSession, cache: MetadataCache, broker_id: int) -> None:
        self._zk = zk
        self._cache = cache
        self._broker_id = broker_id
        self._handles: list[WatchHandle] = []
        self._topic_handles: dict[str, list[WatchHandle]] = {}
        self._topics_listed = False
        self._offline_listed = False
        self._broker_reads = _Coalesced(self._read_brokers)
        self.caught_up = asyncio.Event()
        """Set once the cache first holds this broker among the live ones, every topic
        ZooKeeper listed and the offline replicas: from then on it describes the whole
        cluster. Never cleared."""
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._handles.append(self._zk.watch_children(BROKER_IDS, self._brokers_changed))
        self._handles.append(self._zk.watch_data(CONTROLLER, self._controller_changed))
        self._handles.append(self._zk.watch_children(TOPICS, self._topics_changed))
        self._handles.append(
            self._zk.watch_children(OFFLINE_REPLICAS, self._offline_replicas_changed)
        )

    def stop(self) -> None:
        for handle in self._handles:
            handle.cancel()
        for handles in self._topic_handles.values():
            for handle in handles:
                handle.cancel()
        self._handles.clear()
        self._topic_handles.clear()
        self._broker_reads.cancel()

    # -- brokers and controller -----------------------------------------------------------

    def _brokers_changed(self, _children: list[str]) -> None:
        self._broker_reads.request()

    async def _read_brokers(self) -> None:
        brokers = await self._zk.live_brokers()
        if brokers != self._cache.brokers:
            self._cache.brokers = brokers
            self._cache._notify(Change(brokers=True))
        self._note_progress()

    def _controller_changed(self, znode: Znode | None) -> None:
        controller = None if znode is None else decode_controller(znode.data)
        if controller != self._cache.controller_id:
            self._cache.controller_id = controller
            self._cache._notify(Change(controller=True))

    def _offline_replicas_changed(self, children: list[str]) -> None:
        self._offline_listed = True
        offline = _offline_by_partition(children)
        before = self._cache.offline_replicas
        changed = {
            key for key in offline.keys() | before.keys() if offline.get(key) != before.get(key)
        }
        if changed:
            self._cache.offline_replicas = offline
            self._cache._notify(Change(partitions=frozenset(changed)))
        self._note_progress()

    # -- topics ---------------------------------------------------------------------------

    def _topics_changed(self, children: list[str]) -> None:
        self._topics_listed = True
        names = set(children)
        for gone in set(self._topic_handles) - names:
            for handle in self._topic_handles.pop(gone):
                handle.cancel()
            assignment = self._cache.topics.pop(gone, None)
            self._cache.topic_configs.pop(gone, None)
            self._cache._config_zxids.pop(gone, None)
            if assignment is not None:
                self._cache._by_id.pop(assignment.topic_id, None)
            doomed = {key for key in self._cache.states if key[0] == gone}
            for key in doomed:
                del self._cache.states[key]
            if assignment is not None:  # states may have gone first, through their watches
                doomed |= {(gone, p) for p in assignment.replicas}
            self._cache._notify(
                Change(partitions=frozenset(doomed), topics_removed=frozenset({gone}))
            )
        for name in sorted(names - set(self._topic_handles)):
            self._topic_handles[name] = [
                self._zk.watch_data(topic_path(name), partial(self._assignment_changed, name))
            ]
        self._note_progress()

    def _assignment_changed(self, topic: str, znode: Znode | None) -> None:
        if znode is None or topic not in self._topic_handles:
            return  # deleted: the topics watch removes it
        assignment = decode_topic(topic, znode.data)
        previous = self._cache.topics.get(topic)
        if previous == assignment:
            return
        self._spawn(self._load_topic(topic, assignment, previous))

    async def _load_topic(
        self, topic: str, assignment: TopicAssignment, previous: TopicAssignment | None
    ) -> None:
        configs = await self._zk.topic_config(topic)
        if topic not in self._topic_handles:
            return
        self._cache.topics[topic] = assignment
        self._cache.set_topic_config(topic, configs)
        self._cache._by_id[assignment.topic_id] = topic
        handles = self._topic_handles[topic]
        known = set(previous.replicas) if previous is not None else set()
        for partition in sorted(set(assignment.replicas) - known):
            handles.append(
                self._zk.watch_data(
                    partition_state_path(topic, partition),
                    partial(self._state_changed, topic, partition),
                )
            )
        self._cache._notify(
            Change(
                partitions=frozenset((topic, p) for p in assignment.replicas),
                topics_added=frozenset({topic}) if previous is None else frozenset(),
            )
        )
        self._note_progress()

    def _note_progress(self) -> None:
        if (
            not self.caught_up.is_set()
            and self._broker_id in self._cache.brokers
            and self._topics_listed
            and self._offline_listed
            and all(name in self._cache.topics for name in self._topic_handles)
        ):
            self.caught_up.set()

    def _state_changed(self, topic: str, partition: int, znode: Znode | None) -> None:
        if topic not in self._topic_handles:
            return
        key = (topic, partition)
        if znode is None:
            if self._cache.states.pop(key, None) is not None:
                self._cache._notify(Change(partitions=frozenset({key})))
            return
        state = decode_partition_state(znode.data, znode.version, znode.modified_zxid)
        if self._cache.states.get(key) == state:
            return
        self._cache.states[key] = state
        self._cache._notify(Change(partitions=frozenset({key})))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("reading cluster metadata failed", exc_info=task.exception())


def _offline_by_partition(children: list[str]) -> dict[tuple[str, int], frozenset[int]]:
    """The OFFLINE_REPLICAS children as the brokers offline for each partition."""
    brokers: dict[tuple[str, int], set[int]] = {}
    for name in children:
        parsed = parse_offline_replica(name)
        if parsed is not None:
            broker, topic, partition = parsed
            brokers.setdefault((topic, partition), set()).add(broker)
    return {key: frozenset(ids) for key, ids in brokers.items()}


class _Coalesced:
    """Run an async read after each request, never two at once; requests arriving during a
    run cause one more run (so the last change is always read)."""

    def __init__(self, read: Callable[[], Awaitable[None]]) -> None:
        self._read = read
        self._pending = False
        self._task: asyncio.Task[None] | None = None

    def request(self) -> None:
        self._pending = True
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        while self._pending:
            self._pending = False
            try:
                await self._read()
            except Exception:
                log.exception("reading cluster metadata failed; retrying")
                self._pending = True
                await asyncio.sleep(0.5)
