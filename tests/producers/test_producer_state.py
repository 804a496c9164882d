"""Producer state rules, one test per rule, plus seed 000's sequence flows 2.1-2.4."""

from __future__ import annotations

import pytest

from oncelog.producers.state import (
    Append,
    BatchMetadata,
    CompletedTxn,
    Decision,
    Duplicate,
    ProducerStateManager,
    Refuse,
    StalePending,
    TxnMarker,
)
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import ATTR_CONTROL, ATTR_TRANSACTIONAL, BatchHeader

INT32_MAX = 2**31 - 1
OOSN = ErrorCode.out_of_order_sequence_number


def header(
    pid: int = 7,
    epoch: int = 0,
    seq: int = 0,
    count: int = 1,
    *,
    ts: int = 1_000,
    txn: bool = False,
    control: bool = False,
    base_offset: int = 0,
) -> BatchHeader:
    attributes = (ATTR_TRANSACTIONAL if txn else 0) | (ATTR_CONTROL if control else 0)
    return BatchHeader(
        base_offset, 0, -1, 2, 0, attributes, count - 1, ts, ts, pid, epoch, seq, count
    )


def seqs(first: int, last: int, **kw: object) -> BatchHeader:
    """A batch carrying sequences first..last (the seed writes them as 'last~first')."""
    return header(seq=first, count=last - first + 1, **kw)  # type: ignore[arg-type]


class Log:
    """Stands in for the partition log: hands out offsets and commits like the broker."""

    def __init__(self, manager: ProducerStateManager | None = None) -> None:
        self.m = manager or ProducerStateManager()
        self.end = 0
        self.stored: list[BatchHeader] = []

    def send(self, h: BatchHeader) -> Decision:
        decision = self.m.validate(h)
        if isinstance(decision, Append):
            first, last = self.end, self.end + h.last_offset_delta
            self.m.commit(decision.pending, first, last)
            self.stored.append(h._replace(base_offset=first))
            self.end = last + 1
        return decision


def refused(decision: Decision, code: ErrorCode) -> bool:
    return isinstance(decision, Refuse) and decision.error_code == code


# --- sequences ---


def test_first_batch_of_a_producer_is_appended_and_remembered() -> None:
    log = Log()
    assert isinstance(log.send(seqs(0, 4, ts=55)), Append)
    entry = log.m.entries[7]
    assert (entry.producer_epoch, entry.last_seq, entry.last_offset, entry.last_timestamp) == (
        0,
        4,
        4,
        55,
    )
    assert entry.batches == (BatchMetadata(0, 4, 0, 4, 55),)


def test_next_sequence_appends_and_a_gap_is_out_of_order() -> None:
    log = Log()
    log.send(seqs(0, 4))
    assert isinstance(log.send(seqs(5, 9)), Append)
    assert refused(log.send(seqs(11, 12)), OOSN)
    assert log.m.entries[7].last_seq == 9 and log.end == 10


def test_sequence_wraps_from_int32_max_to_zero() -> None:
    log = Log()
    log.send(seqs(INT32_MAX - 2, INT32_MAX))
    assert isinstance(log.send(seqs(0, 1)), Append)
    # A batch that itself spans the wrap: its last sequence is taken modulo 2**31.
    log.send(header(pid=8, seq=INT32_MAX - 1, count=4))
    assert log.m.entries[8].last_seq == 1
    assert refused(log.send(header(pid=8, seq=3)), OOSN)  # 2 is next
    assert isinstance(log.send(header(pid=8, seq=2)), Append)


def test_retry_of_a_batch_spanning_the_wrap_is_a_duplicate() -> None:
    log = Log()
    log.send(header(seq=INT32_MAX - 1, count=4))
    log.send(header(seq=2))
    assert log.send(header(seq=INT32_MAX - 1, count=4)) == Duplicate(0, 3, 1_000)


def test_duplicate_of_the_last_batch_gets_its_offsets() -> None:
    log = Log()
    log.send(seqs(0, 4, ts=10))
    assert log.send(seqs(0, 4, ts=99)) == Duplicate(0, 4, 10)
    assert log.end == 5


def test_duplicate_of_an_older_cached_batch_gets_its_own_offsets() -> None:
    log = Log()
    for first in range(0, 25, 5):
        log.send(seqs(first, first + 4, ts=100 + first))
    assert log.send(seqs(5, 9)) == Duplicate(5, 9, 105)
    assert log.send(seqs(15, 19)) == Duplicate(15, 19, 115)
    assert log.end == 25


def test_duplicate_must_match_first_and_last_sequence() -> None:
    log = Log()
    log.send(seqs(0, 4))
    log.send(seqs(5, 9))
    assert refused(log.send(seqs(0, 3)), OOSN)
    assert refused(log.send(seqs(5, 10)), OOSN)


def test_window_holds_five_batches_and_an_older_retry_is_out_of_order() -> None:
    log = Log()
    for first in range(0, 30, 5):
        log.send(seqs(first, first + 4))
    assert len(log.m.entries[7].batches) == 5
    assert refused(log.send(seqs(0, 4)), OOSN)
    assert log.send(seqs(5, 9)) == Duplicate(5, 9, 1_000)
    assert log.end == 30


# --- epochs ---


def test_lower_epoch_is_invalid_producer_epoch() -> None:
    log = Log()
    log.send(header(epoch=3, seq=0))
    decision = log.send(header(epoch=2, seq=1))
    assert refused(decision, ErrorCode.invalid_producer_epoch)


def test_higher_epoch_starts_at_zero_and_resets_the_window() -> None:
    log = Log()
    log.send(seqs(0, 4))
    assert isinstance(log.send(header(epoch=1, seq=0, count=2)), Append)
    entry = log.m.entries[7]
    assert (entry.producer_epoch, entry.batches) == (1, (BatchMetadata(0, 1, 5, 6, 1_000),))
    # The old epoch's batches are gone: a retry with the old epoch is fenced, not a duplicate.
    assert refused(log.send(seqs(0, 4)), ErrorCode.invalid_producer_epoch)


def test_higher_epoch_not_starting_at_zero_is_out_of_order() -> None:
    log = Log()
    log.send(seqs(0, 4))
    assert refused(log.send(header(epoch=1, seq=5)), OOSN)
    assert log.m.entries[7].producer_epoch == 0


def test_duplicate_needs_the_same_epoch() -> None:
    log = Log()
    log.send(seqs(0, 4))
    log.send(seqs(5, 9))
    # Same ranges, newer epoch: not retries. 0..4 is a valid start of epoch 1, 5..9 is not.
    assert isinstance(log.m.validate(seqs(0, 4, epoch=1)), Append)
    assert refused(log.m.validate(seqs(5, 9, epoch=1)), OOSN)


# --- unknown producers (KIP-360) ---


def test_unknown_producer_is_accepted_at_any_sequence() -> None:
    log = Log()
    assert isinstance(log.send(seqs(42, 50, pid=99)), Append)
    assert refused(log.send(seqs(52, 53, pid=99)), OOSN)
    assert isinstance(log.send(seqs(51, 53, pid=99)), Append)


def test_producer_expired_then_resumes_mid_sequence() -> None:
    log = Log()
    log.send(seqs(0, 4, ts=0))
    assert log.m.remove_expired(now_ms=86_400_000, expiration_ms=86_400_000) == [7]
    assert isinstance(log.send(seqs(5, 9, ts=86_400_001)), Append)


def test_each_partition_validates_on_its_own() -> None:
    p0, p1 = Log(), Log()
    p0.send(seqs(0, 4))
    assert isinstance(p1.send(seqs(0, 4)), Append)  # not a duplicate of p0's batch
    assert refused(p1.send(seqs(10, 11)), OOSN)
    assert isinstance(p0.send(seqs(5, 6)), Append)


# --- validate changes nothing; commit is the only mutation ---


@pytest.mark.parametrize(
    "probe",
    [
        seqs(10, 14),
        seqs(15, 16),
        seqs(0, 4),
        seqs(99, 99),
        header(epoch=1, seq=0),
        header(epoch=1, seq=3),
        header(epoch=-1, seq=0),
        seqs(0, 0, pid=8),
        seqs(15, 15, txn=True),
    ],
)
def test_validate_changes_nothing(probe: BatchHeader) -> None:
    log = Log()
    for first in range(0, 15, 5):
        log.send(seqs(first, first + 4))
    log.send(seqs(0, 0, pid=9, txn=True))
    before = dict(log.m.entries)
    unstable = log.m.first_unstable_offset()
    log.m.validate(probe)
    log.m.validate(probe, from_client=False)
    log.m.validate_marker(7, 1, TxnMarker(True, 5), 0)
    after = dict(log.m.entries)
    assert after == before
    assert all(after[pid] is before[pid] for pid in before)
    assert log.m.first_unstable_offset() == unstable


def test_commit_after_state_changed_is_our_bug() -> None:
    m = ProducerStateManager()
    first = m.validate(seqs(0, 4))
    second = m.validate(seqs(0, 4))
    assert isinstance(first, Append) and isinstance(second, Append)
    m.commit(first.pending, 0, 4)
    with pytest.raises(StalePending):
        m.commit(second.pending, 5, 9)


def test_commit_checks_the_offsets_span_the_batch() -> None:
    m = ProducerStateManager()
    decision = m.validate(seqs(0, 4))
    assert isinstance(decision, Append)
    with pytest.raises(ValueError):
        m.commit(decision.pending, 0, 3)
    assert m.entries == {}


def test_log_append_time_is_what_a_duplicate_gets_back() -> None:
    m = ProducerStateManager()
    decision = m.validate(seqs(0, 4, ts=1))
    assert isinstance(decision, Append)
    m.commit(decision.pending, 100, 104, timestamp=777)
    assert m.validate(seqs(0, 4, ts=1)) == Duplicate(100, 104, 777)


def test_batches_without_producer_id_or_control_batches_are_rejected_by_validate() -> None:
    m = ProducerStateManager()
    with pytest.raises(ValueError):
        m.validate(header(pid=-1, epoch=-1, seq=-1))
    with pytest.raises(ValueError):
        m.validate(header(control=True, txn=True))


def test_coordinator_origin_checks_epoch_only() -> None:
    log = Log()
    log.send(seqs(0, 4, epoch=2))
    m = log.m
    assert isinstance(m.validate(header(epoch=2, seq=-1), from_client=False), Append)
    assert isinstance(
        m.validate(seqs(0, 4, epoch=2), from_client=False), Append
    )  # no duplicate lookup
    assert refused(
        m.validate(header(epoch=1, seq=-1), from_client=False), ErrorCode.invalid_producer_epoch
    )


# --- seed 000, section 2 (sequences 114..155, one partition) ---

SEED_BATCHES = [(114, 120), (121, 124), (125, 132), (133, 142), (143, 150)]


def _seed_log() -> Log:
    """The producer already wrote 0..113, so 114 is next."""
    log = Log()
    log.send(seqs(0, 113))
    return log


def test_seed_2_1_success() -> None:
    log = _seed_log()
    decisions = [log.send(seqs(a, b)) for a, b in SEED_BATCHES]
    assert all(isinstance(d, Append) for d in decisions)
    assert [(b.first_seq, b.last_seq) for b in log.m.entries[7].batches] == SEED_BATCHES
    assert log.end == 151


def test_seed_2_2_lost_acks_are_answered_with_the_original_offsets() -> None:
    log = _seed_log()
    for a, b in SEED_BATCHES:
        log.send(seqs(a, b))
    # The acknowledgements of 133..142 and 143..150 were lost: the producer resends both.
    assert log.send(seqs(133, 142)) == Duplicate(133, 142, 1_000)
    assert log.send(seqs(143, 150)) == Duplicate(143, 150, 1_000)
    assert log.end == 151 and len(log.stored) == 6  # nothing stored twice


def test_seed_2_3_lost_batch_is_out_of_order_and_order_is_kept() -> None:
    log = _seed_log()
    log.send(seqs(114, 120))
    log.send(seqs(121, 124))
    # 125..132 never arrives; the next two are refused, nothing is appended.
    assert refused(log.send(seqs(133, 142)), OOSN)
    assert refused(log.send(seqs(143, 150)), OOSN)
    assert log.end == 125
    # The producer resends from the first unacknowledged batch, in order.
    assert all(isinstance(log.send(seqs(a, b)), Append) for a, b in SEED_BATCHES[2:])
    assert [h.base_sequence for h in log.stored] == [0, 114, 121, 125, 133, 143]
    assert [h.base_offset for h in log.stored] == [0, 114, 121, 125, 133, 143]


def test_seed_2_4_retry_outside_the_window_is_out_of_order_not_stored_twice() -> None:
    """Six batches in flight, the first one's ack lost: Kafka 4.x no longer holds it in the
    5-batch window, and 114 does not follow 155, so the retry gets OUT_OF_ORDER_SEQUENCE_NUMBER.
    The seed's 'stored twice' does not happen; the producer sees an error instead."""
    log = _seed_log()
    for a, b in [*SEED_BATCHES, (151, 155)]:
        log.send(seqs(a, b))
    decision = log.send(seqs(114, 120))
    assert isinstance(decision, Refuse) and decision.error_code == OOSN
    assert "114" in decision.message and "156" in decision.message
    assert log.end == 156 and len(log.stored) == 7
    # The five newest are still answered as duplicates.
    assert log.send(seqs(121, 124)) == Duplicate(121, 124, 1_000)


# --- transactions (bookkeeping for the transactions issue) ---


def test_transactional_batches_open_a_transaction_at_their_first_offset() -> None:
    log = Log()
    log.send(seqs(0, 9, pid=1))
    log.send(seqs(0, 1, pid=2, txn=True))
    log.send(seqs(0, 2, pid=3, txn=True))
    log.send(seqs(2, 3, pid=2, txn=True))
    assert log.m.entries[2].current_txn_first_offset == 10
    assert log.m.entries[3].current_txn_first_offset == 12
    assert log.m.entries[1].current_txn_first_offset is None
    assert log.m.first_unstable_offset() == 10


def test_non_transactional_batch_during_a_transaction_is_invalid_txn_state() -> None:
    log = Log()
    log.send(seqs(0, 1, txn=True))
    assert refused(log.send(seqs(2, 3)), ErrorCode.invalid_txn_state)


def _marker(
    m: ProducerStateManager, pid: int, epoch: int, marker: TxnMarker, offset: int, ts: int = 2_000
) -> CompletedTxn | None:
    decision = m.validate_marker(pid, epoch, marker, ts)
    assert isinstance(decision, Append), decision
    return m.commit(decision.pending, offset, offset)


def test_marker_closes_the_transaction_and_moves_the_unstable_offset() -> None:
    log = Log()
    log.send(seqs(0, 1, pid=2, txn=True))
    log.send(seqs(0, 0, pid=3, txn=True))
    assert _marker(log.m, 2, 0, TxnMarker(False, 4), 3) == CompletedTxn(2, 0, 3, aborted=True)
    assert log.m.first_unstable_offset() == 2
    assert _marker(log.m, 3, 0, TxnMarker(True, 4), 4) == CompletedTxn(3, 2, 4, aborted=False)
    assert log.m.first_unstable_offset() is None
    entry = log.m.entries[2]
    assert (entry.coordinator_epoch, entry.last_timestamp, entry.current_txn_first_offset) == (
        4,
        2_000,
        None,
    )
    assert len(entry.batches) == 1  # same epoch: the window survives the marker
    assert log.m.validate(seqs(0, 1, pid=2, txn=True)) == Duplicate(0, 1, 1_000)


def test_marker_without_open_transaction_closes_nothing() -> None:
    m = ProducerStateManager()
    assert _marker(m, 5, 0, TxnMarker(True, 0), 0) is None
    assert m.entries[5].producer_epoch == 0


def test_marker_with_a_new_epoch_clears_the_window() -> None:
    log = Log()
    log.send(seqs(0, 1, txn=True))
    _marker(log.m, 7, 1, TxnMarker(False, 0), 2)
    assert log.m.entries[7].batches == ()
    assert isinstance(log.m.validate(header(epoch=1, seq=0)), Append)
    assert refused(log.m.validate(header(epoch=1, seq=3)), OOSN)


def test_marker_checks_producer_and_coordinator_epochs() -> None:
    log = Log()
    log.send(seqs(0, 1, epoch=3, txn=True))
    _marker(log.m, 7, 3, TxnMarker(True, 5), 2)
    assert refused(
        log.m.validate_marker(7, 2, TxnMarker(True, 5), 0), ErrorCode.invalid_producer_epoch
    )
    assert refused(
        log.m.validate_marker(7, 3, TxnMarker(True, 4), 0), ErrorCode.transaction_coordinator_fenced
    )


# --- expiration and retention ---


def test_expiration_drops_idle_producers_at_the_boundary_but_never_open_transactions() -> None:
    log = Log()
    log.send(seqs(0, 0, pid=1, ts=100))
    log.send(seqs(0, 0, pid=2, ts=200))
    log.send(seqs(0, 0, pid=3, ts=100, txn=True))
    assert log.m.remove_expired(now_ms=1_099, expiration_ms=1_000) == []
    assert log.m.remove_expired(now_ms=1_100, expiration_ms=1_000) == [1]
    assert log.m.remove_expired(now_ms=10_000, expiration_ms=1_000) == [2]
    assert set(log.m.entries) == {3}
    assert log.m.first_unstable_offset() == 2


# --- replay (recovery) ---


def test_replay_rebuilds_what_the_live_path_built() -> None:
    log = Log()
    for pid in (1, 2):
        for first in range(0, 40, 5):
            log.send(seqs(first, first + 4, pid=pid, ts=first))
    log.send(header(pid=1, epoch=1, seq=0, ts=99))
    log.send(seqs(0, 1, pid=3, txn=True))
    rebuilt = ProducerStateManager()
    for h in log.stored:
        rebuilt.replay(h)
    assert rebuilt.entries == log.m.entries
    assert rebuilt.first_unstable_offset() == log.m.first_unstable_offset()


def test_replay_takes_the_log_as_truth() -> None:
    m = ProducerStateManager()
    m.replay(header(epoch=5, seq=10, base_offset=0))
    m.replay(header(epoch=4, seq=99, count=2, base_offset=1))  # lower epoch and a gap
    entry = m.entries[7]
    assert (entry.producer_epoch, entry.last_seq, entry.last_offset) == (4, 100, 2)
    assert m.replay(header(pid=-1, epoch=-1, seq=-1, base_offset=3)) is None
    assert set(m.entries) == {7}


def test_replay_of_markers() -> None:
    m = ProducerStateManager()
    m.replay(header(seq=0, count=2, txn=True, base_offset=10))
    assert m.first_unstable_offset() == 10
    marker = header(seq=-1, txn=True, control=True, base_offset=12, ts=5)
    assert m.replay(marker) is None  # emptied by the cleaner: nothing to apply
    assert m.first_unstable_offset() == 10
    assert m.replay(marker, marker=TxnMarker(True, 3)) == CompletedTxn(7, 10, 12, aborted=False)
    entry = m.entries[7]
    assert (entry.coordinator_epoch, entry.current_txn_first_offset, entry.last_timestamp) == (
        3,
        None,
        5,
    )
