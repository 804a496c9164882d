"""The leader's replica tracking (ISR, high watermark) and the follower's truncation
decision: pure cores, checked against Kafka's rules and with hypothesis."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from oncelog.cluster.isr import become_leader
from oncelog.cluster.truncation import Truncation, decide_truncation
from oncelog.storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_OFFSET, LeaderEpochCache

LAG = 1000


def leader(isr: set[int] = {1, 2, 3}, end: int = 100, hw: int = 90):  # noqa: B006
    return become_leader(1, 5, (1, 2, 3), frozenset(isr), end, hw, now_ms=10_000)


def test_high_watermark_waits_for_every_isr_member() -> None:
    state = leader()
    assert state.high_watermark == 90  # followers' offsets unknown: it stays
    state = state.record_fetch(2, 100, 10_100, 100).with_high_watermark(100)
    assert state.high_watermark == 90
    state = state.record_fetch(3, 95, 10_100, 100).with_high_watermark(100)
    assert state.high_watermark == 95
    state = state.record_fetch(3, 100, 10_200, 100).with_high_watermark(100)
    assert state.high_watermark == 100


def test_alone_in_the_isr_the_leader_commits_at_once() -> None:
    assert leader(isr={1}).high_watermark == 100


def test_lagging_follower_leaves_after_the_lag_time() -> None:
    state = leader().record_fetch(2, 100, 10_100, 100).record_fetch(3, 80, 10_100, 100)
    assert state.out_of_sync(10_900, 100, LAG) == frozenset()
    assert state.out_of_sync(11_100, 100, LAG) == {3}  # 3 never caught up since 10_000


def test_follower_at_the_leaders_end_is_never_out_of_sync() -> None:
    state = leader().record_fetch(2, 100, 10_000, 100).record_fetch(3, 100, 10_000, 100)
    assert state.out_of_sync(99_000, 100, LAG) == frozenset()


def test_follower_joins_once_past_high_watermark_and_epoch_start() -> None:
    state = leader(isr={1, 2}).record_fetch(2, 100, 10_000, 100).with_high_watermark(100)
    assert not state.record_fetch(3, 99, 10_000, 100).may_join(3)
    assert state.record_fetch(3, 100, 10_000, 100).may_join(3)


@given(
    fetches=st.lists(
        st.tuples(st.sampled_from([2, 3]), st.integers(0, 200), st.integers(0, 500)), max_size=30
    ),
    end=st.integers(100, 200),
)
def test_high_watermark_never_passes_an_isr_member(
    fetches: list[tuple[int, int, int]], end: int
) -> None:
    state = leader(end=end)
    now = 10_000
    reached = {2: 0, 3: 0}  # a follower's log end only grows (truncation aside)
    for follower, offset, step in fetches:
        now += step
        reached[follower] = max(reached[follower], min(offset, end))
        state = state.record_fetch(follower, reached[follower], now, end)
        state = state.with_high_watermark(end)
        reported = [state.followers[r].log_end_offset for r in (2, 3)]
        if min(reported) >= 0:
            assert state.high_watermark <= max(90, min(reported))
        assert state.high_watermark >= 90  # never goes back


def epochs(tmp_path: Path, *entries: tuple[int, int]) -> LeaderEpochCache:
    cache = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")
    for epoch, start in entries:
        cache.assign(epoch, start)
    return cache


def test_diverged_tail_is_cut_where_the_leader_epoch_ended(tmp_path: Path) -> None:
    # We led epoch 2 from 50 and wrote up to 70; the new leader says epoch 2 ended at 60.
    ours = epochs(tmp_path, (1, 0), (2, 50))
    assert decide_truncation(ours, 70, 55, leader_epoch=2, leader_end_offset=60) == Truncation(
        60, complete=True
    )


def test_unknown_epoch_means_another_round(tmp_path: Path) -> None:
    # KIP-279: the leader knows epoch 3 (we never saw it), we have 1 and 4.
    ours = epochs(tmp_path, (1, 0), (4, 40))
    got = decide_truncation(ours, 70, 30, leader_epoch=3, leader_end_offset=45)
    assert got == Truncation(40, complete=False)


def test_no_answer_falls_back_to_the_high_watermark(tmp_path: Path) -> None:
    ours = epochs(tmp_path, (1, 0))
    got = decide_truncation(ours, 70, 30, UNDEFINED_EPOCH, UNDEFINED_OFFSET)
    assert got == Truncation(30, complete=True)


def test_nothing_to_cut_when_the_follower_is_behind(tmp_path: Path) -> None:
    ours = epochs(tmp_path, (1, 0), (2, 50))
    assert decide_truncation(ours, 55, 50, 2, 80) == Truncation(55, complete=True)
