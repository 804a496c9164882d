"""Where a new follower cuts its log: the KIP-101/KIP-279 decision, pure.

A broker that becomes a follower asks the leader, with OffsetsForLeaderEpoch, where its own
latest epoch ended in the leader's log. Records past that point were never replicated to
the leader (so never acknowledged with acks=all) and must go before the follower fetches:
otherwise the follower would keep a diverged tail and could serve it after a later election.

Kafka's ``AbstractFetcherThread.getOffsetTruncationState``, given the leader's answer
(epoch E', end offset O') to the follower's question about its latest epoch E:

- no answer possible (undefined offset): cut at the high watermark, the old safe bound;
- the follower knows E': cut at min(its own end of E', O', its log end); done;
- the follower does not know E' (it has no entry for it: it never saw that leader): cut at
  the end of its largest epoch below E' and ask again with its (now smaller) latest epoch:
  one more round, as KIP-279 adds for successive leader changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from oncelog.storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_OFFSET, LeaderEpochCache

__all__ = ["Truncation", "decide_truncation"]


@dataclass(frozen=True, slots=True)
class Truncation:
    """Where a new follower cuts its log, and whether it must ask the leader again."""

    offset: int  # cut the log here (remove every batch at or after it)
    complete: bool  # False: ask the leader again with the new latest epoch


def decide_truncation(
    epochs: LeaderEpochCache,
    log_end_offset: int,
    high_watermark: int,
    leader_epoch: int,
    leader_end_offset: int,
) -> Truncation:
    if leader_end_offset == UNDEFINED_OFFSET:
        return Truncation(min(high_watermark, log_end_offset), complete=True)
    if leader_epoch == UNDEFINED_EPOCH:
        return Truncation(min(leader_end_offset, log_end_offset), complete=True)
    own_epoch, own_end = epochs.end_offset_for(leader_epoch, log_end_offset)
    if own_end == UNDEFINED_OFFSET:
        # The leader answered for an epoch above all ours: nothing of ours to cut.
        return Truncation(min(leader_end_offset, log_end_offset), complete=True)
    if own_epoch != leader_epoch:
        return Truncation(min(own_end, log_end_offset), complete=False)
    return Truncation(min(own_end, leader_end_offset, log_end_offset), complete=True)
