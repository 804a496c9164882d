"""The controller's decisions, as values: which partition states to write next.

A pure function of what the controller knows (live brokers with their epochs, each
partition's replicas and current state). No ZooKeeper, no clock: the controller's I/O
(controller.py) writes the returned states with compare-and-set and, on a conflict, asks
again with fresher state. The rules are Kafka's ZooKeeper-mode controller
(``PartitionStateMachine``, ``ReplicaStateMachine``, ``Election.leaderForOffline``):

1. A new partition gets its first live replica (in assignment order) as leader, every live
   replica as ISR, leader epoch 0. With no live replica it waits.
2. A partition whose leader is gone gets, as leader, the first replica in assignment order
   that is live and in the ISR; the ISR keeps its live members. Leader epoch + 1.
3. With no live ISR member it has no leader (-1) and keeps its ISR, unless
   ``unclean.leader.election.enable``: then the first live replica leads alone (acknowledged
   records it lacks are lost: that is the trade unclean election makes).
4. A dead ISR follower of a live leader leaves the ISR. Leader epoch + 1 (ZooKeeper mode
   bumps it for every controller change of the ISR).
5. An offline replica (its broker's log of the partition failed: Kafka's OfflineReplica)
   counts as dead for that partition alone: an offline leader is replaced by the next live
   ISR member, an offline follower leaves the ISR, and neither is elected until its
   broker restarts (which recovers the log and clears the mark).

"Live" is judged per state: a broker that registered after the state was written (its
broker epoch, the creation zxid of its registration, is larger than the state's
modification zxid) has restarted since; its old incarnation's leadership and ISR place are
void, as if it had died and come back (Kafka's bounced-broker handling). It may still be
elected in the same step: its log is the one its old incarnation left.

When no ISR member is live the ISR is kept whole rather than cut to its last member as
Kafka does: each member held every record below the high watermark when it left, so any of
them may lead again, whichever returns first.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from oncelog.cluster.zookeeper import (
    INITIAL_LEADER_EPOCH,
    NEW_ZNODE,
    NO_LEADER,
    PartitionState,
)

__all__ = ["PartitionView", "StateChange", "decide", "next_state"]


@dataclass(frozen=True, slots=True)
class PartitionView:
    """What the controller knows about one partition."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    state: PartitionState | None  # None: new, no state written yet
    unclean: bool = False
    offline: frozenset[int] = frozenset()  # brokers whose replica of it is offline


@dataclass(frozen=True, slots=True)
class StateChange:
    """Write ``state`` for this partition (its version is the one to compare against:
    NEW_ZNODE for a create)."""

    topic: str
    partition: int
    state: PartitionState


def decide(
    partitions: Sequence[PartitionView], live: Mapping[int, int], controller_epoch: int
) -> list[StateChange]:
    """Every state change the partitions need, given live brokers (id -> broker epoch)."""
    return list(_changes(partitions, live, controller_epoch))


def _changes(
    partitions: Sequence[PartitionView], live: Mapping[int, int], controller_epoch: int
) -> Iterator[StateChange]:
    for view in partitions:
        alive = live
        if view.offline:
            alive = {b: epoch for b, epoch in live.items() if b not in view.offline}
        if view.state is None:
            state = initial_state(view.replicas, alive, controller_epoch)
        else:
            state = next_state(view.replicas, view.state, alive, controller_epoch, view.unclean)
        if state is not None:
            yield StateChange(view.topic, view.partition, state)


def initial_state(
    replicas: Sequence[int], live: Mapping[int, int], controller_epoch: int
) -> PartitionState | None:
    alive = tuple(r for r in replicas if r in live)
    if not alive:
        return None
    return PartitionState(alive[0], INITIAL_LEADER_EPOCH, alive, controller_epoch, NEW_ZNODE)


def next_state(
    replicas: Sequence[int],
    current: PartitionState,
    live: Mapping[int, int],
    controller_epoch: int,
    unclean: bool = False,
) -> PartitionState | None:
    """The state a written partition should move to, or None if it is fine as it is."""

    def same_incarnation(broker: int) -> bool:
        return broker in live and live[broker] < current.modified_zxid

    isr_kept = tuple(r for r in current.isr if same_incarnation(r))
    if same_incarnation(current.leader):
        if isr_kept == current.isr:
            return None
        return _bumped(current, current.leader, isr_kept, controller_epoch)
    candidate = next((r for r in replicas if r in live and r in current.isr), None)
    if candidate is not None:
        isr = (candidate, *(r for r in isr_kept if r != candidate))
        return _bumped(current, candidate, isr, controller_epoch)
    if unclean:
        alive = next((r for r in replicas if r in live), None)
        if alive is not None:
            return _bumped(current, alive, (alive,), controller_epoch)
    if current.leader == NO_LEADER:
        return None
    return _bumped(current, NO_LEADER, current.isr, controller_epoch)


def _bumped(
    current: PartitionState, leader: int, isr: tuple[int, ...], controller_epoch: int
) -> PartitionState:
    return PartitionState(
        leader,
        current.leader_epoch + 1,
        isr,
        controller_epoch,
        current.version,
        current.modified_zxid,
    )
