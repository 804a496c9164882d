"""The controller's pure decisions, against Kafka's rules and their invariants."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from oncelog.cluster.elections import PartitionView, decide, initial_state, next_state
from oncelog.cluster.zookeeper import NEW_ZNODE, NO_LEADER, PartitionState

ZXID = 1000  # when the current state was written; brokers registered before it are "same"


def state(leader: int, isr: tuple[int, ...], epoch: int = 4) -> PartitionState:
    return PartitionState(leader, epoch, isr, controller_epoch=1, version=7, modified_zxid=ZXID)


def test_new_partition_led_by_first_live_replica() -> None:
    got = initial_state((3, 1, 2), {1: 5, 2: 6}, controller_epoch=2)
    assert got == PartitionState(1, 0, (1, 2), 2, NEW_ZNODE)
    assert initial_state((3,), {1: 5}, 2) is None  # no live replica: it waits


def test_healthy_partition_untouched() -> None:
    assert next_state((1, 2, 3), state(1, (1, 2, 3)), {1: 1, 2: 2, 3: 3}, 2) is None


def test_dead_leader_replaced_from_isr_in_assignment_order() -> None:
    got = next_state((1, 2, 3), state(1, (1, 3, 2)), {2: 2, 3: 3}, 2)
    assert got is not None
    assert (got.leader, got.isr, got.leader_epoch, got.controller_epoch) == (2, (2, 3), 5, 2)
    assert got.version == 7  # compare-and-set against the state read


def test_dead_follower_leaves_isr_and_epoch_bumps() -> None:
    got = next_state((1, 2, 3), state(1, (1, 2, 3)), {1: 1, 3: 3}, 2)
    assert got is not None and (got.leader, got.isr, got.leader_epoch) == (1, (1, 3), 5)


def test_no_live_isr_member_means_no_leader_and_isr_kept() -> None:
    got = next_state((1, 2, 3), state(1, (1, 2)), {3: 3}, 2)
    assert got is not None and (got.leader, got.isr) == (NO_LEADER, (1, 2))
    assert next_state((1, 2, 3), got, {3: 3}, 2) is None  # nothing more to do


def test_unclean_election_takes_a_live_replica_outside_the_isr() -> None:
    got = next_state((1, 2, 3), state(1, (1, 2)), {3: 3}, 2, unclean=True)
    assert got is not None and (got.leader, got.isr) == (3, (3,))


def test_returning_isr_member_is_elected() -> None:
    offline = PartitionState(NO_LEADER, 5, (1,), 1, 8, ZXID)
    got = next_state((1, 2, 3), offline, {1: ZXID + 50, 2: 2}, 2)
    assert got is not None and (got.leader, got.isr, got.leader_epoch) == (1, (1,), 6)


def test_restarted_leader_is_elected_again_with_a_new_epoch() -> None:
    # Broker 1 registered after the state was written: it restarted since. Its old
    # leadership is void, but as an ISR member it may lead again, at a new epoch.
    got = next_state((1, 2), state(1, (1, 2)), {1: ZXID + 10, 2: 2}, 2)
    assert got is not None and (got.leader, got.isr, got.leader_epoch) == (1, (1, 2), 5)


def test_restarted_follower_leaves_the_isr() -> None:
    got = next_state((1, 2), state(1, (1, 2)), {1: 1, 2: ZXID + 10}, 2)
    assert got is not None and (got.leader, got.isr) == (1, (1,))


brokers = st.sampled_from([1, 2, 3, 4, 5])


@st.composite
def situations(draw: st.DrawFn) -> tuple[tuple[int, ...], PartitionState, dict[int, int], bool]:
    replicas = tuple(draw(st.lists(brokers, min_size=1, max_size=5, unique=True)))
    isr = tuple(draw(st.lists(st.sampled_from(replicas), min_size=1, unique=True)))
    leader = draw(st.sampled_from((*isr, NO_LEADER)))
    current = state(leader, isr)
    live_ids = draw(st.lists(brokers, unique=True))
    live = {b: draw(st.sampled_from([ZXID - 1, ZXID + 1])) for b in live_ids}
    return replicas, current, live, draw(st.booleans())


@given(situations())
def test_invariants(
    situation: tuple[tuple[int, ...], PartitionState, dict[int, int], bool],
) -> None:
    replicas, current, live, unclean = situation
    got = next_state(replicas, current, live, controller_epoch=3, unclean=unclean)
    if got is None:
        if current.leader != NO_LEADER:
            assert current.leader in live and live[current.leader] < ZXID
        return
    assert got.leader_epoch == current.leader_epoch + 1
    assert got.controller_epoch == 3 and got.version == current.version
    if got.leader == NO_LEADER:
        assert not any(r in live for r in current.isr)
        assert got.isr == current.isr
        return
    assert got.leader in live and got.leader in replicas
    assert got.leader in got.isr and len(set(got.isr)) == len(got.isr)
    if got.leader in current.isr:
        assert set(got.isr) <= set(current.isr)  # clean: only ever the old ISR
        assert all(r in live for r in got.isr)
    else:
        assert unclean and got.isr == (got.leader,)
        assert not any(r in live for r in current.isr)
    # Written (a newer zxid than every registration), the state needs nothing more.
    written = PartitionState(got.leader, got.leader_epoch, got.isr, 3, got.version + 1, ZXID * 9)
    assert next_state(replicas, written, live, 3, unclean) is None


def test_decide_covers_every_partition() -> None:
    views = [
        PartitionView("t", 0, (1, 2), None),
        PartitionView("t", 1, (2, 1), state(2, (2, 1))),
        PartitionView("t", 2, (1, 2), state(1, (1, 2))),
    ]
    changes = decide(views, {1: 1}, controller_epoch=4)
    assert [(c.partition, c.state.leader, c.state.isr) for c in changes] == [
        (0, 1, (1,)),
        (1, 1, (1,)),
        (2, 1, (1,)),
    ]


def test_an_offline_replica_counts_as_dead_for_its_partition_alone() -> None:
    """Broker 1's log of t-0 failed: t-0 gets leader 2 and loses 1 from its ISR; t-1, led
    by 1 too, is left as it is; t-2's offline follower 1 leaves its ISR."""
    live = {1: 1, 2: 2, 3: 3}
    views = [
        PartitionView("t", 0, (1, 2, 3), state(1, (1, 2, 3)), offline=frozenset({1})),
        PartitionView("t", 1, (1, 2, 3), state(1, (1, 2, 3))),
        PartitionView("t", 2, (2, 1, 3), state(2, (2, 1, 3)), offline=frozenset({1})),
    ]
    changes = decide(views, live, controller_epoch=4)
    assert [(c.partition, c.state.leader, c.state.isr, c.state.leader_epoch) for c in changes] == [
        (0, 2, (2, 3), 5),
        (2, 2, (2, 3), 5),
    ]
    # Written, the states need nothing more while the replica stays offline.
    for change in changes:
        written = PartitionState(
            change.state.leader, change.state.leader_epoch, change.state.isr, 4, 8, ZXID * 9
        )
        view = PartitionView("t", change.partition, (1, 2, 3), written, offline=frozenset({1}))
        assert decide([view], live, controller_epoch=4) == []


def test_an_offline_replica_is_not_elected_even_as_the_last_isr_member() -> None:
    view = PartitionView("t", 0, (1, 2), state(1, (1,)), offline=frozenset({1}))
    [change] = decide([view], {1: 1, 2: 2}, controller_epoch=4)
    assert (change.state.leader, change.state.isr) == (NO_LEADER, (1,))
    unclean = PartitionView("t", 0, (1, 2), state(1, (1,)), unclean=True, offline=frozenset({1}))
    [change] = decide([unclean], {1: 1, 2: 2}, controller_epoch=4)
    assert (change.state.leader, change.state.isr) == (2, (2,))
