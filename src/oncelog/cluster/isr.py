"""A partition leader's view of its followers: their log end offsets, the ISR, the high
watermark. Pure and immutable: each event returns a new LeaderState; the replica manager
does the I/O (writing ISR changes to ZooKeeper, answering producers).

Kafka's rules (``Partition.scala``, ``Replica.scala`` in 3.x):

- A follower's log end offset is the offset it fetches from (it has everything below).
- ``last_caught_up_ms`` is the latest time the follower was known to hold everything the
  leader had: the time of a fetch at or past the leader's log end, or else the time of the
  previous fetch if this one reaches the leader's log end as it was then.
- The high watermark is the smallest log end offset over the leader and the ISR (and the
  replicas an ISR expansion in flight is adding: Kafka's "maximal ISR"); it never goes back.
- A follower in the ISR whose ``last_caught_up_ms`` is older than ``replica.lag.time.max.ms``
  (and who is not at the leader's log end) is out of sync: the leader removes it.
- A follower outside the ISR joins when its log end offset reaches the high watermark and
  the start of the leader's current epoch (so it cannot lead with a hole in the committed
  log).
- Each fetch also carries the follower's log start offset; the low watermark (what
  DeleteRecords waits for) is the smallest log start over the leader and the followers on
  live brokers (``Partition.lowWatermarkIfLeader``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

__all__ = ["FollowerProgress", "LeaderState", "become_leader"]

UNKNOWN_OFFSET = -1


@dataclass(frozen=True, slots=True)
class FollowerProgress:
    """What a leader knows of one follower: how far it has fetched, and when it last held
    everything the leader had."""

    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_end: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET


@dataclass(frozen=True, slots=True)
class LeaderState:
    """A partition leader's view at one leader epoch: replicas, ISR, high watermark and each
    follower's progress; every event returns a new one."""

    leader: int
    leader_epoch: int
    epoch_start_offset: int  # the leader's log end when it took this epoch
    replicas: tuple[int, ...]
    isr: frozenset[int]
    high_watermark: int
    followers: Mapping[int, FollowerProgress] = field(default_factory=dict)
    adding: frozenset[int] = frozenset()  # an ISR expansion in flight
    removing: frozenset[int] = frozenset()  # an ISR shrink in flight

    def __post_init__(self) -> None:
        object.__setattr__(self, "followers", MappingProxyType(dict(self.followers)))

    @property
    def update_in_flight(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr | self.adding

    # -- events -------------------------------------------------------------------------

    def record_fetch(
        self,
        follower: int,
        fetch_offset: int,
        now_ms: int,
        leader_end: int,
        log_start_offset: int = UNKNOWN_OFFSET,
    ) -> LeaderState:
        """A follower whose log starts at ``log_start_offset`` fetched from
        ``fetch_offset`` while the leader's log ended at ``leader_end``."""
        if follower not in self.followers:
            return self
        old = self.followers[follower]
        if fetch_offset >= leader_end:
            caught_up = max(old.last_caught_up_ms, now_ms)
        elif fetch_offset >= old.last_fetch_leader_end >= 0:
            caught_up = max(old.last_caught_up_ms, old.last_fetch_ms)
        else:
            caught_up = old.last_caught_up_ms
        progress = FollowerProgress(
            fetch_offset,
            caught_up,
            now_ms,
            max(leader_end, old.last_fetch_leader_end),
            log_start_offset,
        )
        return replace(self, followers={**self.followers, follower: progress})

    def with_high_watermark(self, leader_end: int) -> LeaderState:
        """The state with the high watermark raised as far as the maximal ISR allows."""
        candidate = leader_end
        for replica in self.maximal_isr - {self.leader}:
            progress = self.followers.get(replica)
            end = progress.log_end_offset if progress is not None else UNKNOWN_OFFSET
            candidate = min(candidate, end)
        if candidate <= self.high_watermark:
            return self
        return replace(self, high_watermark=candidate)

    def with_isr(self, isr: frozenset[int]) -> LeaderState:
        """A new ISR is in force (written to ZooKeeper): no update in flight any more."""
        return replace(self, isr=isr, adding=frozenset(), removing=frozenset())

    def low_watermark(self, leader_log_start: int, live_brokers: Collection[int]) -> int:
        """The smallest log start offset over the leader and its followers on live
        brokers (a live follower that has not fetched yet counts as UNKNOWN_OFFSET)."""
        low = leader_log_start
        for replica, progress in self.followers.items():
            if replica in live_brokers:
                low = min(low, progress.log_start_offset)
        return low

    # -- decisions ----------------------------------------------------------------------

    def out_of_sync(self, now_ms: int, leader_end: int, max_lag_ms: int) -> frozenset[int]:
        """ISR followers to remove: not at the leader's end and not caught up recently."""
        if self.update_in_flight:
            return frozenset()
        late = set()
        for replica in self.isr - {self.leader}:
            progress = self.followers.get(replica, FollowerProgress())
            if progress.log_end_offset == leader_end:
                continue
            if now_ms - progress.last_caught_up_ms > max_lag_ms:
                late.add(replica)
        return frozenset(late)

    def may_join(self, follower: int) -> bool:
        """Whether ``follower``, outside the ISR, has caught up enough to enter it."""
        if self.update_in_flight or follower in self.isr or follower not in self.followers:
            return False
        end = self.followers[follower].log_end_offset
        return end >= self.high_watermark and end >= self.epoch_start_offset


def become_leader(
    leader: int,
    leader_epoch: int,
    replicas: tuple[int, ...],
    isr: frozenset[int],
    log_end_offset: int,
    high_watermark: int,
    now_ms: int,
) -> LeaderState:
    """The state of a new leader: followers' offsets unknown; ISR members count as caught
    up now (they get ``replica.lag.time.max.ms`` to show up), the others not at all."""
    followers = {
        r: FollowerProgress(last_caught_up_ms=now_ms if r in isr else 0)
        for r in replicas
        if r != leader
    }
    state = LeaderState(
        leader,
        leader_epoch,
        log_end_offset,
        replicas,
        isr,
        min(high_watermark, log_end_offset),
        followers,
    )
    return state.with_high_watermark(log_end_offset)
