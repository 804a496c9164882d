"""The transition table and each prepared transition of TransactionMetadata."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from oncelog.state_machines import IllegalTransition
from oncelog.transactions.state import (
    NO_PRODUCER_EPOCH,
    SHORT_MAX,
    VALID_PREVIOUS_STATES,
    TransactionMetadata,
    TxnState,
    TxnTransition,
    is_epoch_exhausted,
)

S = TxnState

# Kafka's TransactionState.validPreviousStates, written out independently.
KAFKA_TABLE = {
    S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_COMMIT: {S.ONGOING},
    S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE},
    S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT: {S.PREPARE_ABORT},
    S.DEAD: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_EPOCH_FENCE: {S.ONGOING},
}


def md(state: TxnState = S.EMPTY, **kw: object) -> TransactionMetadata:
    base = {
        "transactional_id": "t",
        "producer_id": 7,
        "producer_epoch": 3,
        "txn_timeout_ms": 60_000,
        "state": state,
        "txn_last_update_timestamp": 100,
    }
    if state not in (S.EMPTY,):
        base["partitions"] = (
            frozenset({("a", 0)})
            if state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT)
            else frozenset()
        )
        base["txn_start_timestamp"] = 50
    base.update(kw)
    return TransactionMetadata(**base)  # type: ignore[arg-type]


def test_table_matches_kafka() -> None:
    assert {k: set(v) for k, v in VALID_PREVIOUS_STATES.items()} == KAFKA_TABLE


def test_state_ids_and_names() -> None:
    assert [(s.id, s.kafka_name) for s in S] == [
        (0, "Empty"),
        (1, "Ongoing"),
        (2, "PrepareCommit"),
        (3, "PrepareAbort"),
        (4, "CompleteCommit"),
        (5, "CompleteAbort"),
        (6, "Dead"),
        (7, "PrepareEpochFence"),
    ]
    for s in S:
        assert S.from_id(s.id) is s and S.from_kafka_name(s.kafka_name) is s
    assert S.from_kafka_name("ongoing") is None
    with pytest.raises(ValueError):
        S.from_id(8)


def test_epoch_exhaustion_rule() -> None:
    assert not is_epoch_exhausted(SHORT_MAX - 2)
    assert is_epoch_exhausted(SHORT_MAX - 1) and is_epoch_exhausted(SHORT_MAX)


PREPARERS = {
    "increment": lambda m: m.prepare_increment_epoch(1000, m.producer_epoch + 1, -1, 200),
    "rotate": lambda m: m.prepare_producer_id_rotation(99, 1000, 200, False),
    "add": lambda m: m.prepare_add_partitions({("b", 1)}, 200),
    "commit": lambda m: m.prepare_end(True, 200),
    "abort": lambda m: m.prepare_end(False, 200),
    "fence": lambda m: m.prepare_fence_and_abort(200),
    "complete": lambda m: m.prepare_complete(200),
    "dead": lambda m: m.prepare_dead(),
}
ALLOWED_FROM = {
    "increment": {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    "rotate": {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    "add": {S.EMPTY, S.ONGOING, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    "commit": {S.ONGOING},
    "abort": {S.ONGOING, S.PREPARE_EPOCH_FENCE},  # Kafka's table; the fence is never stored
    "fence": {S.ONGOING},
    "complete": {S.PREPARE_COMMIT, S.PREPARE_ABORT},
    "dead": {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
}


@pytest.mark.parametrize(("name", "state"), list(itertools.product(PREPARERS, list(S))))
def test_every_transition_is_checked(name: str, state: TxnState) -> None:
    source = md(state)
    if state in ALLOWED_FROM[name]:
        transition = PREPARERS[name](source)
        assert isinstance(transition, TxnTransition)
        assert transition.source is source
        assert source == md(state)  # preparing changes nothing
    else:
        with pytest.raises(IllegalTransition) as info:
            PREPARERS[name](source)
        message = str(info.value)
        assert state.kafka_name in message and "'t'" in message and " to " in message


def test_increment_and_rotation() -> None:
    m = md(S.COMPLETE_COMMIT, last_producer_epoch=1)
    t = m.prepare_increment_epoch(5000, 4, 3, 300).target
    assert (t.state, t.producer_epoch, t.last_producer_epoch, t.txn_timeout_ms) == (
        S.EMPTY,
        4,
        3,
        5000,
    )
    assert (t.partitions, t.txn_start_timestamp, t.txn_last_update_timestamp) == (
        frozenset(),
        -1,
        300,
    )
    with pytest.raises(IllegalTransition):
        m.prepare_increment_epoch(5000, 5, 3, 300)  # skips an epoch
    r = md(S.EMPTY, producer_epoch=SHORT_MAX - 1).prepare_producer_id_rotation(8, 1, 9, True).target
    assert (r.producer_id, r.producer_epoch, r.last_producer_epoch, r.previous_producer_id) == (
        8,
        0,
        SHORT_MAX - 1,
        7,
    )
    r2 = md(S.EMPTY).prepare_producer_id_rotation(8, 1, 9, False).target
    assert r2.last_producer_epoch == NO_PRODUCER_EPOCH


def test_add_partitions_start_time() -> None:
    fresh = md(S.COMPLETE_ABORT).prepare_add_partitions({("x", 1)}, 500).target
    assert (fresh.state, fresh.txn_start_timestamp, fresh.partitions) == (
        S.ONGOING,
        500,
        {("x", 1)},
    )
    more = md(S.ONGOING).prepare_add_partitions({("x", 1)}, 600).target
    assert more.txn_start_timestamp == 50 and more.partitions == {("a", 0), ("x", 1)}


def test_fence_bumps_and_forgets_last_epoch() -> None:
    t = md(S.ONGOING, last_producer_epoch=2).prepare_fence_and_abort(700)
    assert (t.target.state, t.target.producer_epoch, t.target.last_producer_epoch) == (
        S.PREPARE_ABORT,
        4,
        NO_PRODUCER_EPOCH,
    )
    assert t.target.partitions == {("a", 0)} and t.target.txn_start_timestamp == 50
    at_max = md(S.ONGOING, producer_epoch=SHORT_MAX).prepare_fence_and_abort(700)
    assert at_max.target.producer_epoch == SHORT_MAX  # never overflows


def test_complete_clears_partitions_keeps_epochs() -> None:
    t = md(S.PREPARE_COMMIT, last_producer_epoch=2).prepare_complete(800).target
    assert (t.state, t.partitions, t.producer_epoch, t.last_producer_epoch) == (
        S.COMPLETE_COMMIT,
        frozenset(),
        3,
        2,
    )
    assert t.txn_start_timestamp == 50 and t.txn_last_update_timestamp == 800
    assert md(S.PREPARE_ABORT).prepare_complete(1).target.state is S.COMPLETE_ABORT


def test_create_new_id() -> None:
    t = TxnTransition.create("new", 42, 9000, 10)
    assert t.source is None
    assert (t.target.producer_id, t.target.producer_epoch, t.target.state) == (42, 0, S.EMPTY)
    assert t.target.last_producer_epoch == NO_PRODUCER_EPOCH
    with pytest.raises(IllegalTransition):
        TxnTransition.create("new", -1, 9000, 10)


def test_empty_cannot_hold_partitions() -> None:
    with pytest.raises(IllegalTransition):
        replace(md(S.EMPTY), partitions=frozenset({("a", 1)}))


def test_dead_is_tombstone() -> None:
    assert md(S.EMPTY).prepare_dead().is_tombstone
    assert not md(S.EMPTY).prepare_add_partitions({("a", 1)}, 1).is_tombstone
