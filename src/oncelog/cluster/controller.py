"""The controller: one broker, elected through ZooKeeper, that decides partition leaders.

It reconciles rather than replays events: after any change of the broker's metadata
cache (a broker came or went, a topic appeared, a state changed) it asks the pure core
(elections.decide) which states to write, and writes them in one fenced compare-and-set
transaction. A conflict (a leader changed its ISR meanwhile) is simply the next change:
the watch brings the fresher state and the controller decides again. Losing the controller
epoch (another broker won an election) ends it at once: ControllerMoved.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from oncelog.cluster.elections import PartitionView, decide
from oncelog.cluster.metadata import Change, MetadataCache
from oncelog.cluster.zookeeper import (
    ControllerEpoch,
    ControllerMoved,
    TopicAssignment,
    ZooKeeperError,
)

if TYPE_CHECKING:
    from oncelog.cluster.zookeeper import ZooKeeperSession

log = logging.getLogger(__name__)

RETRY_S = 0.5


class Controller:
    """The elected controller's loop: after each metadata change, decide the partition states
    (elections.decide) and write them in one fenced transaction, until the epoch is lost."""

    def __init__(
        self,
        zk: ZooKeeperSession,
        cache: MetadataCache,
        epoch: ControllerEpoch,
        unclean_default: bool,
    ) -> None:
        self.epoch = epoch
        self._zk = zk
        self._cache = cache
        self._unclean_default = unclean_default
        self._dirty = asyncio.Event()

    async def run(self) -> None:
        """Reconcile until this controller is replaced (returns) or cancelled."""
        log.info("controller active with controller epoch %d", self.epoch.epoch)
        self._cache.subscribe(self._on_change)
        self._dirty.set()
        try:
            while True:
                await self._dirty.wait()
                self._dirty.clear()
                try:
                    await self._reconcile()
                except ControllerMoved:
                    log.info("controller epoch %d superseded; resigning", self.epoch.epoch)
                    return
                except ZooKeeperError as exc:
                    log.warning("controller could not write partition states: %s", exc)
                    await asyncio.sleep(RETRY_S)
                    self._dirty.set()
        finally:
            self._cache.unsubscribe(self._on_change)

    def _on_change(self, change: Change) -> None:
        self._dirty.set()

    async def _reconcile(self) -> None:
        views = [
            PartitionView(
                topic,
                partition,
                replicas,
                self._cache.states.get((topic, partition)),
                self._unclean(topic),
                self._cache.offline_replicas.get((topic, partition), frozenset()),
            )
            for topic, assignment in self._cache.topics.items()
            for partition, replicas in assignment.replicas.items()
        ]
        changes = decide(views, self._cache.broker_epochs(), self.epoch.epoch)
        if not changes:
            return
        written = await self._zk.write_partition_states(
            self.epoch, [(c.topic, c.partition, c.state) for c in changes]
        )
        if not written:  # the watch brings the fresher state; this is only a safety net
            asyncio.get_running_loop().call_later(RETRY_S, self._dirty.set)
        for change in changes:
            log.info(
                "%s %s-%d: leader %d, leader epoch %d, ISR %s",
                "elected" if written else "could not write (stale; retrying)",
                change.topic,
                change.partition,
                change.state.leader,
                change.state.leader_epoch,
                list(change.state.isr),
            )

    def _unclean(self, topic: str) -> bool:
        value = self._cache.topic_configs.get(topic, {}).get("unclean.leader.election.enable")
        return self._unclean_default if value is None else value.lower() == "true"

    async def delete_topic(self, topic: str) -> None:
        await self._zk.delete_topic(self.epoch, topic)

    async def update_assignment(
        self, topic: str, update: Callable[[TopicAssignment], TopicAssignment]
    ) -> TopicAssignment:
        """Rewrite a topic's assignment (new partitions), fenced by this controller's
        epoch; the watch then brings the new partitions and reconciling elects them."""
        return await self._zk.update_topic_assignment(self.epoch, topic, update)
