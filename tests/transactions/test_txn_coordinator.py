"""Coordinator flows against Kafka's rules (TransactionCoordinator.scala, transactions v1)."""

from __future__ import annotations

import pytest

from oncelog.coordinator_partitions import java_string_hash, partition_for
from oncelog.protocol.errors import ErrorCode as E
from oncelog.state_machines import IllegalTransition
from oncelog.transactions.coordinator import (
    API_ADD_OFFSETS_TO_TXN,
    API_ADD_PARTITIONS_TO_TXN,
    API_END_TXN,
    API_INIT_PRODUCER_ID,
    MarkerRequest,
    TransactionCoordinatorShard,
    TxnResponse,
    client_error,
)
from oncelog.transactions.log_records import decode_record, encode_key, encode_value
from oncelog.transactions.state import SHORT_MAX, TransactionMetadata
from oncelog.transactions.state import TxnState as S

from .txn_harness import MAX_TIMEOUT, Harness


def seed(h: Harness, md: TransactionMetadata) -> None:
    """Put a stored record in the log, as if an earlier run wrote it."""
    record = (encode_key(md.transactional_id), encode_value(md))
    h.log.append(record)
    h.shard.replay(0, -1, *record)


def start_txn(h: Harness, *parts: tuple[str, int]) -> tuple[int, int]:
    r = h.init()
    assert r.response == TxnResponse(E.none, r.response.producer_id, r.response.producer_epoch)
    pid, epoch = r.response.producer_id, r.response.producer_epoch
    assert h.add(pid, epoch, *parts).response == TxnResponse(E.none)
    return pid, epoch


# --- partitioning ---

# Values printed by Java 17 (String.hashCode, Utils.abs, % 50) on this machine.
JAVA = [
    ("", 0, 0),
    ("a", 97, 47),
    ("hello", 99162322, 22),
    ("Hello World", -862545276, 26),
    ("polygenelubricants", -(2**31), 0),
    ("my-txn-id", 1405732511, 11),
    ("order-enrichment-v1", -1727849370, 20),
    ("txn-é中", -859815769, 19),
    ("emoji-😀", 1164511306, 6),
    ("transactional-producer-1", -447076998, 48),
]


@pytest.mark.parametrize(("tid", "hash_code", "partition"), JAVA)
def test_coordinator_partition_matches_java(tid: str, hash_code: int, partition: int) -> None:
    assert java_string_hash(tid) == hash_code
    assert partition_for(tid, 50) == partition


def test_utils_abs_is_not_a_mask() -> None:
    # "Hello World" hashes negative: Math.abs gives 26, hash & 0x7fffffff would give 22.
    assert partition_for("Hello World", 50) == 26
    assert (java_string_hash("Hello World") & 0x7FFFFFFF) % 50 == 22
    with pytest.raises(ValueError):
        partition_for("x", 0)


# --- error mapping helpers ---


def test_producer_fenced_maps_to_invalid_producer_epoch_for_old_versions() -> None:
    f = E.producer_fenced
    for v in range(4):
        assert client_error(API_INIT_PRODUCER_ID, v, f) == E.invalid_producer_epoch
    assert client_error(API_INIT_PRODUCER_ID, 4, f) == f
    for api in (API_ADD_PARTITIONS_TO_TXN, API_ADD_OFFSETS_TO_TXN, API_END_TXN):
        assert client_error(api, 0, f) == client_error(api, 1, f) == E.invalid_producer_epoch
        assert client_error(api, 2, f) == client_error(api, 3, f) == f
    assert client_error(API_END_TXN, 0, E.concurrent_transactions) == E.concurrent_transactions


# --- InitProducerId ---


def test_init_new_id(h: Harness) -> None:
    r = h.init(timeout=5000)
    assert r.response == TxnResponse(E.none, 1000, 0)
    assert len(r.records) == 1 and r.markers == ()
    md = h.shard.get("tx")
    assert md is not None and (md.state, md.producer_epoch, md.txn_timeout_ms) == (S.EMPTY, 0, 5000)


@pytest.mark.parametrize(
    ("kw", "error"),
    [
        ({"tid": ""}, E.invalid_request),
        ({"timeout": 0}, E.invalid_transaction_timeout),
        ({"timeout": MAX_TIMEOUT + 1}, E.invalid_transaction_timeout),
    ],
)
def test_init_refusals(h: Harness, kw: dict[str, object], error: E) -> None:
    r = h.init(**kw)  # type: ignore[arg-type]
    assert r.response == TxnResponse(error) and r.records == ()


def test_init_timeout_at_max_is_fine(h: Harness) -> None:
    assert h.init(timeout=MAX_TIMEOUT).response.error == E.none  # type: ignore[union-attr]


def test_init_bumps_epoch_and_fences_old_instance(h: Harness) -> None:
    pid, e0 = h.init().response.producer_id, 0  # type: ignore[union-attr]
    r = h.init(timeout=7000)
    assert r.response == TxnResponse(E.none, pid, 1)
    md = h.shard.get("tx")
    assert md is not None and md.last_producer_epoch == -1 and md.txn_timeout_ms == 7000
    # the old instance is fenced everywhere
    assert h.add(pid, e0).response == TxnResponse(E.producer_fenced)
    assert h.end(pid, e0, True).response == TxnResponse(E.producer_fenced)


def test_init_on_ongoing_fences_aborts_and_answers_concurrent(h: Harness) -> None:
    pid, epoch = start_txn(h, ("t", 0), ("t", 1))
    r = h.init()
    assert r.response == TxnResponse(E.concurrent_transactions)
    assert r.markers == (
        MarkerRequest("tx", pid, epoch + 1, False, 0, frozenset({("t", 0), ("t", 1)})),
    )
    md = h.shard.get("tx")
    assert md is not None
    assert (md.state, md.producer_epoch, md.last_producer_epoch) == (S.PREPARE_ABORT, epoch + 1, -1)
    # the old producer is fenced at once (its epoch is below the coordinator's)
    assert h.add(pid, epoch).response == TxnResponse(E.producer_fenced)
    # while markers are pending, the new instance retries
    assert h.init().response == TxnResponse(E.concurrent_transactions)
    h.complete()
    assert h.shard.get("tx").state is S.COMPLETE_ABORT  # type: ignore[union-attr]
    # the retry bumps the epoch a second time: the fencing epoch is never handed out
    assert h.init().response == TxnResponse(E.none, pid, epoch + 2)


def test_init_exhausted_epoch_rotates_producer_id(h: Harness) -> None:
    seed(
        h,
        TransactionMetadata(
            "tx",
            77,
            SHORT_MAX - 1,
            1000,
            S.COMPLETE_COMMIT,
            txn_start_timestamp=1,
            txn_last_update_timestamp=1,
        ),
    )
    r = h.init()
    assert r.response == TxnResponse(E.none, 1000, 0)
    md = h.shard.get("tx")
    assert md is not None and (md.previous_producer_id, md.last_producer_epoch) == (77, -1)


def test_init_below_exhaustion_still_bumps(h: Harness) -> None:
    seed(
        h, TransactionMetadata("tx", 77, SHORT_MAX - 2, 1000, S.EMPTY, txn_last_update_timestamp=1)
    )
    assert h.init().response == TxnResponse(E.none, 77, SHORT_MAX - 1)
    assert h.init().response == TxnResponse(E.none, 1000, 0)  # now exhausted: rotate


def test_fence_of_last_epoch_then_rotation(h: Harness) -> None:
    seed(
        h,
        TransactionMetadata(
            "tx",
            77,
            SHORT_MAX - 1,
            1000,
            S.ONGOING,
            partitions=frozenset({("t", 0)}),
            txn_start_timestamp=1,
            txn_last_update_timestamp=1,
        ),
    )
    r = h.init()
    assert r.response == TxnResponse(E.concurrent_transactions)
    assert r.markers[0].producer_epoch == SHORT_MAX  # 32767 fences the holder of 32766
    h.complete()
    assert h.init().response == TxnResponse(E.none, 1000, 0)


def test_kip360_bump_with_expected_epoch(h: Harness) -> None:
    pid = h.init().response.producer_id  # type: ignore[union-attr]
    r = h.init(pid=pid, epoch=0)
    assert r.response == TxnResponse(E.none, pid, 1)
    md = h.shard.get("tx")
    assert md is not None and md.last_producer_epoch == 0
    # the same request again (its answer was lost): same answer, nothing bumped
    assert h.init(pid=pid, epoch=0).response == TxnResponse(E.none, pid, 1)
    assert h.shard.get("tx").producer_epoch == 1  # type: ignore[union-attr]
    # and it survives a reload (last epoch is persisted)
    fresh = h.reloaded()
    fresh.finish_loading()
    again = fresh.init_producer_id(
        "tx",
        60_000,
        pid,
        0,
        now_ms=h.now,
        allocate_producer_id=h.allocate,
        max_timeout_ms=MAX_TIMEOUT,
    )
    assert again.response == TxnResponse(E.none, pid, 1)


def test_kip360_fenced_cases(h: Harness) -> None:
    pid = h.init().response.producer_id  # type: ignore[union-attr]
    h.init()  # a new instance: epoch 1, last epoch forgotten
    assert h.init(pid=pid, epoch=0).response == TxnResponse(E.producer_fenced)
    assert h.init(pid=pid + 1, epoch=1).response == TxnResponse(E.producer_fenced)  # other pid
    assert h.init(pid=pid, epoch=1).response == TxnResponse(E.none, pid, 2)


def test_kip360_on_new_id_accepts_any_expected(h: Harness) -> None:
    assert h.init(pid=5, epoch=3).response == TxnResponse(E.none, 1000, 0)


def test_kip360_retry_after_rotation(h: Harness) -> None:
    seed(
        h, TransactionMetadata("tx", 77, SHORT_MAX - 1, 1000, S.EMPTY, txn_last_update_timestamp=1)
    )
    r = h.init(pid=77, epoch=SHORT_MAX - 1)
    assert r.response == TxnResponse(E.none, 1000, 0)
    md = h.shard.get("tx")
    assert md is not None and (md.previous_producer_id, md.last_producer_epoch) == (
        77,
        SHORT_MAX - 1,
    )
    # retry of the rotation: old pid with its exhausted epoch gets the same answer
    assert h.init(pid=77, epoch=SHORT_MAX - 1).response == TxnResponse(E.none, 1000, 0)
    # old pid with a non-exhausted epoch is fenced
    assert h.init(pid=77, epoch=5).response == TxnResponse(E.producer_fenced)


def test_kip360_exhausted_with_wrong_expected_epoch_is_fenced(h: Harness) -> None:
    # Kafka would throw here (prepareIncrementProducerEpoch on an exhausted epoch); we fence.
    seed(
        h,
        TransactionMetadata(
            "tx",
            77,
            SHORT_MAX,
            1000,
            S.COMPLETE_ABORT,
            txn_start_timestamp=1,
            txn_last_update_timestamp=1,
        ),
    )
    assert h.init(pid=77, epoch=SHORT_MAX - 1).response == TxnResponse(E.producer_fenced)


def test_init_while_prepared_is_concurrent(h: Harness) -> None:
    pid, epoch = start_txn(h)
    h.end(pid, epoch, True)
    assert h.init().response == TxnResponse(E.concurrent_transactions)
    assert h.init(pid=pid, epoch=epoch).response == TxnResponse(E.concurrent_transactions)


# --- AddPartitions / AddOffsets ---


def test_add_partitions_flow(h: Harness) -> None:
    pid = h.init().response.producer_id  # type: ignore[union-attr]
    h.now = 5000
    r = h.add(pid, 0, ("a", 0))
    assert r.response == TxnResponse(E.none) and len(r.records) == 1
    md = h.shard.get("tx")
    assert md is not None and (md.state, md.txn_start_timestamp) == (S.ONGOING, 5000)
    h.now = 6000
    again = h.add(pid, 0, ("a", 0))
    assert again.response == TxnResponse(E.none) and again.records == ()  # already included
    more = h.add(pid, 0, ("a", 0), ("b", 2))
    assert len(more.records) == 1
    md = h.shard.get("tx")
    assert (
        md is not None and md.partitions == {("a", 0), ("b", 2)} and md.txn_start_timestamp == 5000
    )


@pytest.mark.parametrize(
    ("tid", "pid_delta", "epoch", "error"),
    [
        ("nope", 0, 2, E.invalid_producer_id_mapping),
        ("tx", 1, 2, E.invalid_producer_id_mapping),
        ("tx", 0, 1, E.producer_fenced),
        ("tx", 0, 3, E.producer_fenced),  # any other epoch, a higher one too
        ("", 0, 2, E.invalid_request),
    ],
)
def test_add_partitions_refusals(
    h: Harness, tid: str, pid_delta: int, epoch: int, error: E
) -> None:
    pid = h.init().response.producer_id  # type: ignore[union-attr]
    h.init()
    h.init()  # the current epoch is 2
    r = h.add(pid + pid_delta, epoch, tid=tid)
    assert r.response == TxnResponse(error) and r.records == ()


def test_add_partitions_while_prepared(h: Harness) -> None:
    pid, epoch = start_txn(h)
    h.end(pid, epoch, False)
    assert h.add(pid, epoch, ("z", 9)).response == TxnResponse(E.concurrent_transactions)
    h.complete()
    r = h.add(pid, epoch, ("z", 9))
    assert r.response == TxnResponse(E.none)
    md = h.shard.get("tx")
    assert md is not None and md.partitions == {("z", 9)}  # a fresh transaction


def test_add_offsets_adds_the_offsets_partition(h: Harness) -> None:
    pid = h.init().response.producer_id  # type: ignore[union-attr]
    r = h.write(h.shard.add_offsets("tx", pid, 0, "grp", ("__consumer_offsets", 13), h.now))
    assert r.response == TxnResponse(E.none)
    assert h.shard.get("tx").partitions == {("__consumer_offsets", 13)}  # type: ignore[union-attr]
    wrong = h.shard.add_offsets("tx", pid, 5, "grp", ("__consumer_offsets", 13), h.now)
    assert wrong.response == TxnResponse(E.producer_fenced)


# --- EndTxn ---


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_flow(h: Harness, commit: bool) -> None:
    pid, epoch = start_txn(h, ("a", 0), ("b", 1))
    h.now = 9000
    r = h.end(pid, epoch, commit)
    assert r.response == TxnResponse(E.none, pid, epoch)
    assert r.markers == (
        MarkerRequest("tx", pid, epoch, commit, 0, frozenset({("a", 0), ("b", 1)})),
    )
    md = h.shard.get("tx")
    assert md is not None and md.state is (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT)
    assert h.shard.pending_markers() == list(r.markers)
    # a retry while markers are pending
    assert h.end(pid, epoch, commit).response == TxnResponse(E.concurrent_transactions)
    # the other decision is invalid
    assert h.end(pid, epoch, not commit).response == TxnResponse(E.invalid_txn_state)
    c = h.complete()
    assert c.response is None and len(c.records) == 1
    md = h.shard.get("tx")
    assert md is not None and md.state is (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT)
    assert md.partitions == frozenset() and md.producer_epoch == epoch
    assert h.shard.pending_markers() == []
    # retry after completion: NONE with the ids; the other decision: INVALID_TXN_STATE
    again = h.end(pid, epoch, commit)
    assert again.response == TxnResponse(E.none, pid, epoch) and again.records == ()
    assert h.end(pid, epoch, not commit).response == TxnResponse(E.invalid_txn_state)


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_on_empty_is_invalid_txn_state(h: Harness, commit: bool) -> None:
    pid = h.init().response.producer_id  # type: ignore[union-attr]
    assert h.end(pid, 0, commit).response == TxnResponse(E.invalid_txn_state)


def test_end_txn_refusals(h: Harness) -> None:
    pid, epoch = start_txn(h)
    assert h.end(pid, epoch, True, tid="").response == TxnResponse(E.invalid_request)
    assert h.end(pid, epoch, True, tid="other").response == TxnResponse(
        E.invalid_producer_id_mapping
    )
    assert h.end(pid + 1, epoch, True).response == TxnResponse(E.invalid_producer_id_mapping)
    assert h.end(pid, epoch + 1, True).response == TxnResponse(E.producer_fenced)
    assert h.end(pid, epoch - 1, True).response == TxnResponse(E.producer_fenced)


# --- in-flight writes ---


def test_write_in_flight_blocks_then_clears(h: Harness) -> None:
    pid = h.init().response.producer_id  # type: ignore[union-attr]
    r = h.shard.add_partitions("tx", pid, 0, [("a", 0)], h.now)  # not written yet
    assert h.shard.pending("tx") is r.transitions[0]
    assert h.shard.add_partitions("tx", pid, 0, [("b", 0)], h.now).response == TxnResponse(
        E.concurrent_transactions
    )
    assert h.shard.end_txn("tx", pid, 0, True, h.now).response == TxnResponse(
        E.concurrent_transactions
    )
    assert h.shard.init_producer_id(
        "tx", 1000, now_ms=h.now, allocate_producer_id=h.allocate, max_timeout_ms=MAX_TIMEOUT
    ).response == TxnResponse(E.concurrent_transactions)
    h.shard.write_failed(r)
    assert h.shard.pending("tx") is None and h.shard.get("tx").state is S.EMPTY  # type: ignore[union-attr]
    h.write(h.shard.add_partitions("tx", pid, 0, [("a", 0)], h.now))
    assert h.shard.get("tx").state is S.ONGOING  # type: ignore[union-attr]


def test_failed_fence_does_not_bump_twice(h: Harness) -> None:
    _pid, epoch = start_txn(h)
    fence = h.shard.init_producer_id(
        "tx", 1000, now_ms=h.now, allocate_producer_id=h.allocate, max_timeout_ms=MAX_TIMEOUT
    )
    h.shard.write_failed(fence)
    assert h.shard.get("tx").producer_epoch == epoch  # type: ignore[union-attr]
    again = h.init()
    assert again.markers[0].producer_epoch == epoch + 1


def test_new_id_in_flight(h: Harness) -> None:
    r = h.shard.init_producer_id(
        "tx", 1000, now_ms=h.now, allocate_producer_id=h.allocate, max_timeout_ms=MAX_TIMEOUT
    )
    again = h.shard.init_producer_id(
        "tx", 1000, now_ms=h.now, allocate_producer_id=h.allocate, max_timeout_ms=MAX_TIMEOUT
    )
    assert again.response == TxnResponse(E.concurrent_transactions)
    h.shard.write_failed(r)
    assert h.shard.get("tx") is None and h.shard.pending("tx") is None


# --- complete ---


def test_complete_with_stale_marker_is_a_no_op(h: Harness) -> None:
    pid, epoch = start_txn(h)
    marker = h.end(pid, epoch, True).markers[0]
    first = h.shard.complete("tx", h.now, marker)
    assert len(first.records) == 1
    assert h.shard.complete("tx", h.now, marker).records == ()  # completion in flight
    h.write(first)
    assert h.shard.complete("tx", h.now, marker).records == ()  # already complete
    with pytest.raises(IllegalTransition):
        h.shard.complete("tx", h.now)
    with pytest.raises(IllegalTransition):
        h.shard.complete("unknown", h.now)


def test_the_next_transaction_is_decided_on_a_completion_in_flight(h: Harness) -> None:
    """Once the markers are durable, the next AddPartitions need not wait for the COMPLETE
    record: it is decided on the completed state, its record follows in the log, and
    loading the log gives the same state as the live replay."""
    pid, epoch = start_txn(h, ("a", 0))
    marker = h.end(pid, epoch, True).markers[0]
    completing = h.shard.complete("tx", h.now, marker)
    h.now += 5
    nxt = h.shard.add_partitions("tx", pid, epoch, [("b", 1)], h.now)
    assert nxt.response == TxnResponse(E.none) and len(nxt.records) == 1
    assert h.shard.get("tx").state is S.PREPARE_COMMIT  # type: ignore[union-attr]
    # anything else for the id waits until the ONGOING record is written
    assert h.shard.end_txn("tx", pid, epoch, True, h.now).response == TxnResponse(
        E.concurrent_transactions
    )
    h.write(completing)
    assert h.shard.get("tx").state is S.COMPLETE_COMMIT  # type: ignore[union-attr]
    assert h.shard.pending("tx") is not None  # the ONGOING record is still in flight
    h.write(nxt)
    md = h.shard.get("tx")
    assert md is not None and md.state is S.ONGOING and md.partitions == {("b", 1)}
    assert md.txn_start_timestamp == h.now and h.shard.pending("tx") is None
    assert h.reloaded().get("tx") == md


def test_a_request_decided_on_a_failed_completion_fails_with_it(h: Harness) -> None:
    pid, epoch = start_txn(h, ("a", 0))
    marker = h.end(pid, epoch, True).markers[0]
    completing = h.shard.complete("tx", h.now, marker)
    nxt = h.shard.add_partitions("tx", pid, epoch, [("b", 1)], h.now)
    h.shard.write_failed(completing)  # the fsync failed: it fails every later write too
    h.shard.write_failed(nxt)
    assert h.shard.get("tx").state is S.PREPARE_COMMIT and h.shard.pending("tx") is None  # type: ignore[union-attr]
    assert [m.transactional_id for m in h.shard.pending_markers()] == ["tx"]  # resent


def test_a_record_replayed_behind_a_write_that_never_came_is_decoded(h: Harness) -> None:
    """A live replay reuses the value a transition encoded only when the record replayed is
    that very value: a completion whose append failed without the runtime saying so (an
    OSError) stays at the head of the id's chain, and the AddPartitions decided on it and
    written after must install its own state (ONGOING), not the stale head's."""
    pid, epoch = start_txn(h, ("a", 0))
    marker = h.end(pid, epoch, True).markers[0]
    h.shard.complete("tx", h.now, marker)  # decided, never written nor failed
    nxt = h.shard.add_partitions("tx", pid, epoch, [("b", 1)], h.now)
    h.write(nxt)
    md = h.shard.get("tx")
    assert md is not None and md.state is S.ONGOING and md.partitions == {("b", 1)}
    assert h.reloaded().get("tx") == md


# --- timeouts ---


def test_abort_timed_out_fences_the_late_producer(h: Harness) -> None:
    h.now = 1000
    pid, epoch = start_txn(h, ("a", 0))
    assert h.shard.abort_timed_out(1000 + 60_000) == []  # not strictly older yet
    results = h.shard.abort_timed_out(1000 + 60_001)
    assert len(results) == 1
    r = results[0]
    assert r.response is None
    assert r.markers == (MarkerRequest("tx", pid, epoch + 1, False, 0, frozenset({("a", 0)})),)
    assert h.shard.abort_timed_out(10**9) == []  # in flight: not aborted twice
    h.write(r)
    md = h.shard.get("tx")
    assert md is not None and (md.state, md.producer_epoch) == (S.PREPARE_ABORT, epoch + 1)
    h.complete()
    # the late producer comes back: fenced everywhere
    assert h.add(pid, epoch).response == TxnResponse(E.producer_fenced)
    assert h.end(pid, epoch, True).response == TxnResponse(E.producer_fenced)
    assert h.init(pid=pid, epoch=epoch).response == TxnResponse(E.producer_fenced)
    # a fresh initTransactions works and gets a higher epoch
    assert h.init().response == TxnResponse(E.none, pid, epoch + 2)


def test_only_ongoing_transactions_time_out(h: Harness) -> None:
    pid, epoch = start_txn(h)
    h.end(pid, epoch, True)
    h.init(tid="idle")
    assert h.shard.abort_timed_out(10**12) == []


# --- expiration ---


def test_expire_idle_ids(h: Harness) -> None:
    h.now = 1000
    h.init(tid="idle")
    _pid, _epoch = start_txn(h)
    h.init(tid="done")
    h.write(h.shard.add_partitions("done", 1002, 0, [("x", 0)], h.now))
    h.write(h.shard.end_txn("done", 1002, 0, True, h.now))
    h.write(h.shard.complete("done", h.now))
    assert h.shard.expire_transactional_ids(1000 + 9999, 10_000).records == ()
    r = h.shard.expire_transactional_ids(1000 + 10_000, 10_000)
    assert sorted(r.records) == sorted([(encode_key("done"), None), (encode_key("idle"), None)])
    assert h.shard.describe(["idle"])[0].error == E.none  # still there until written
    assert h.shard.init_producer_id(
        "idle", 1000, now_ms=h.now, allocate_producer_id=h.allocate, max_timeout_ms=MAX_TIMEOUT
    ).response == TxnResponse(E.concurrent_transactions)
    h.write(r)
    assert set(h.shard.metadata) == {"tx"}  # ongoing transactions never expire
    assert h.shard.describe(["idle"])[0].error == E.transactional_id_not_found
    assert h.reloaded().metadata == h.shard.metadata
    # the id can start over with a new producer id
    assert h.init(tid="idle").response == TxnResponse(E.none, 1003, 0)


def test_failed_expiration_keeps_the_id(h: Harness) -> None:
    h.init(tid="idle")
    r = h.shard.expire_transactional_ids(10**9, 1)
    h.shard.write_failed(r)
    assert h.shard.pending("idle") is None and "idle" in h.shard.metadata


# --- loading ---


def test_load_in_progress_then_pending_markers(h: Harness) -> None:
    pid, epoch = start_txn(h, ("a", 0))
    h.end(pid, epoch, True)
    h.init(tid="other")
    pid2 = h.shard.get("other").producer_id  # type: ignore[union-attr]
    h.write(h.shard.add_partitions("other", pid2, 0, [("b", 1)], h.now))
    h.write(h.shard.end_txn("other", pid2, 0, False, h.now))
    fresh = h.reloaded()
    assert fresh.loading
    loading = TxnResponse(E.coordinator_load_in_progress)
    init = fresh.init_producer_id(
        "tx", 1000, now_ms=h.now, allocate_producer_id=h.allocate, max_timeout_ms=MAX_TIMEOUT
    )
    assert init.response == loading
    assert fresh.add_partitions("tx", pid, epoch, [], 0).response == loading
    assert fresh.end_txn("tx", pid, epoch, True, 0).response == loading
    assert fresh.describe(["tx"])[0].error == E.coordinator_load_in_progress
    assert fresh.list_transactions(now_ms=0).error == E.coordinator_load_in_progress
    assert fresh.abort_timed_out(10**12) == []
    assert fresh.expire_transactional_ids(10**12, 1).records == ()
    markers = fresh.finish_loading()
    assert markers == [
        MarkerRequest("other", pid2, 0, False, 0, frozenset({("b", 1)})),
        MarkerRequest("tx", pid, epoch, True, 0, frozenset({("a", 0)})),
    ]
    assert fresh.metadata == h.shard.metadata
    for m in markers:
        done = fresh.complete(m.transactional_id, h.now, m)
        fresh.apply(done)
    assert fresh.pending_markers() == []
    assert fresh.get("tx").state is S.COMPLETE_COMMIT  # type: ignore[union-attr]
    assert fresh.get("other").state is S.COMPLETE_ABORT  # type: ignore[union-attr]


def test_markers_carry_the_coordinator_epoch() -> None:
    h = Harness(coordinator_epoch=7)
    pid, epoch = start_txn(h)
    assert h.end(pid, epoch, True).markers[0].coordinator_epoch == 7


def test_replay_skips_unknown_key_versions_and_reads_kafka_v0(h: Harness) -> None:
    h.shard.replay(0, -1, b"\x00\x09\x00\x02tx", b"whatever")
    assert h.shard.metadata == {}
    md = TransactionMetadata(
        "tx",
        5,
        1,
        1000,
        S.ONGOING,
        partitions=frozenset({("a", 0)}),
        txn_start_timestamp=3,
        txn_last_update_timestamp=4,
    )
    h.shard.replay(0, -1, encode_key("tx"), encode_value(md, version=0))
    assert h.shard.get("tx") == md


def test_live_records_replay_to_the_same_state(h: Harness) -> None:
    pid, epoch = start_txn(h, ("a", 0))
    h.init(tid="b")
    h.init()  # fences tx
    h.complete()
    h.init()
    h.write(h.shard.add_partitions("tx", pid, epoch + 2, [("c", 1)], h.now))
    h.write(h.shard.end_txn("tx", pid, epoch + 2, True, h.now))
    for key, value in h.log:
        rec = decode_record(key, value)
        assert rec is not None
    assert h.reloaded().metadata == h.shard.metadata


# --- admin ---


def test_describe(h: Harness) -> None:
    h.now = 4000
    pid, epoch = start_txn(h, ("b", 2), ("a", 1), ("a", 0))
    [d, missing, bad] = h.shard.describe(["tx", "missing", ""])
    assert d.error == E.none and d.state == "Ongoing"
    assert (d.producer_id, d.producer_epoch, d.timeout_ms, d.start_time_ms) == (
        pid,
        epoch,
        60_000,
        4000,
    )
    assert d.topics == {"a": (0, 1), "b": (2,)}
    assert missing.error == E.transactional_id_not_found
    assert bad.error == E.invalid_request


def test_list_transactions_filters(h: Harness) -> None:
    h.now = 1000
    pid, _ = start_txn(h)
    h.now = 5000
    h.init(tid="idle")
    listing = h.shard.list_transactions(now_ms=6000)
    assert listing.error == E.none
    assert listing.transactions == (("idle", 1001, "Empty"), ("tx", pid, "Ongoing"))
    only = h.shard.list_transactions(["Ongoing", "Bogus"], now_ms=6000)
    assert only.transactions == (("tx", pid, "Ongoing"),)
    assert h.shard.list_transactions(producer_ids=[1001], now_ms=6000).transactions == (
        ("idle", 1001, "Empty"),
    )
    # duration: strictly longer than the filter (an Empty start of -1 counts as very old,
    # as in Kafka)
    assert (
        h.shard.list_transactions(["Ongoing"], duration_filter_ms=5000, now_ms=6000).transactions
        == ()
    )
    assert h.shard.list_transactions(
        ["Ongoing"], duration_filter_ms=4999, now_ms=6000
    ).transactions == (("tx", pid, "Ongoing"),)


def test_shard_rejects_dead_values_as_removal() -> None:
    shard = TransactionCoordinatorShard()
    md = TransactionMetadata("tx", 5, 0, 1000, S.EMPTY, txn_last_update_timestamp=1)
    shard.replay(0, -1, encode_key("tx"), encode_value(md))
    assert "tx" in shard.metadata
    shard.replay(0, -1, encode_key("tx"), None)
    assert shard.metadata == {}
