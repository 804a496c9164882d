"""The producer state machine against a tiny reference model of Kafka's rules.

Hypothesis drives random appends (plain and transactional), retries (recent and older
than the window), gaps, epoch bumps, arbitrary batches, transaction markers, expirations
and restarts, and checks every decision and the resulting state against the model.
Snapshots must round-trip at every step. A restart replaces the manager with one loaded
lazily from its own snapshot (entries decoded only when used, the next snapshot merged
into the old one), so every later step also exercises that path.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from oncelog.producers.snapshot import decode_snapshot, decode_state, encode_snapshot, encode_state
from oncelog.producers.state import Append, Duplicate, ProducerStateManager, Refuse, TxnMarker
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import ATTR_TRANSACTIONAL, BatchHeader

SEQ_SPACE = 2**31
PIDS = st.sampled_from([1, 2, 3])
COUNTS = st.integers(1, 4)
# Sequences near the wrap make the 2**31-1 -> 0 rule come up often.
START_SEQS = st.sampled_from([0, 1, SEQ_SPACE - 3, SEQ_SPACE - 1]) | st.integers(0, SEQ_SPACE - 1)


@dataclass
class ModelProducer:
    epoch: int
    batches: list[tuple[int, int, int, int]]  # (first_seq, last_seq, first_offset, last_offset)
    last_ts: int
    txn_first: int | None = None  # first offset of the open transaction
    coordinator_epoch: int = -1


@dataclass
class Model:
    """Kafka's rules in their plainest form: a dict of producer id -> state."""

    producers: dict[int, ModelProducer] = field(default_factory=dict)

    def decide(
        self, pid: int, epoch: int, first: int, last: int, txn: bool = False
    ) -> tuple[object, ...]:
        p = self.producers.get(pid)
        if p is None:
            return ("append",)
        if epoch == p.epoch:
            for fs, ls, fo, lo in p.batches:
                if (fs, ls) == (first, last):
                    return ("duplicate", fo, lo)
        if epoch < p.epoch:
            return ("refuse", ErrorCode.invalid_producer_epoch)
        if epoch > p.epoch:
            if first != 0:
                return ("refuse", ErrorCode.out_of_order_sequence_number)
        elif first != _next_seq(p):
            return ("refuse", ErrorCode.out_of_order_sequence_number)
        if p.txn_first is not None and not txn:
            return ("refuse", ErrorCode.invalid_txn_state)
        return ("append",)

    def apply(
        self, pid: int, epoch: int, batch: tuple[int, int, int, int], ts: int, txn: bool = False
    ) -> None:
        p = self.producers.setdefault(pid, ModelProducer(epoch, [], ts))
        if p.epoch != epoch:  # a new epoch starts a new window; an open transaction stays
            p.epoch, p.batches = epoch, []
        p.batches = [*p.batches, batch][-5:]
        p.last_ts = ts
        if txn and p.txn_first is None:
            p.txn_first = batch[2]

    def decide_marker(self, pid: int, epoch: int, coordinator_epoch: int) -> tuple[object, ...]:
        p = self.producers.get(pid)
        if p is not None and epoch < p.epoch:
            return ("refuse", ErrorCode.invalid_producer_epoch)
        if p is not None and coordinator_epoch < p.coordinator_epoch:
            return ("refuse", ErrorCode.transaction_coordinator_fenced)
        return ("append",)

    def apply_marker(self, pid: int, epoch: int, coordinator_epoch: int, ts: int) -> None:
        p = self.producers.setdefault(pid, ModelProducer(epoch, [], ts))
        if p.epoch != epoch:
            p.epoch, p.batches = epoch, []
        p.last_ts, p.txn_first, p.coordinator_epoch = ts, None, coordinator_epoch

    def expire(self, now: int, expiration: int) -> list[int]:
        gone = [
            pid
            for pid, p in self.producers.items()
            if p.txn_first is None and now - p.last_ts >= expiration
        ]
        for pid in gone:
            del self.producers[pid]
        return gone


def _next_seq(p: ModelProducer) -> int:
    """The sequence the producer's next batch must start at (0 after a marker alone)."""
    return (p.batches[-1][1] + 1) % SEQ_SPACE if p.batches else 0


class ProducerStateMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.sut = ProducerStateManager()
        self.model = Model()
        self.log_end = 0
        self.now = 0
        self.sent: dict[int, list[tuple[int, int, int]]] = {}  # pid -> (epoch, first_seq, count)

    def _send(self, pid: int, epoch: int, first: int, count: int, txn: bool = False) -> None:
        self.now += 1
        attributes = ATTR_TRANSACTIONAL if txn else 0
        h = BatchHeader(
            0, 0, -1, 2, 0, attributes, count - 1, self.now, self.now, pid, epoch, first, count
        )
        before = dict(self.sut.entries)
        decision = self.sut.validate(h)
        assert dict(self.sut.entries) == before, "validate changed the state"
        last = (first + count - 1) % SEQ_SPACE
        expected = self.model.decide(pid, epoch, first, last, txn)
        match decision:
            case Append(pending):
                assert expected == ("append",), (expected, decision)
                batch = (first, last, self.log_end, self.log_end + count - 1)
                self.sut.commit(pending, batch[2], batch[3])
                self.model.apply(pid, epoch, batch, self.now, txn)
                self.log_end += count
                self.sent.setdefault(pid, []).append((epoch, first, count))
            case Duplicate(first_offset, last_offset, _):
                assert expected == ("duplicate", first_offset, last_offset), (expected, decision)
            case Refuse(code, _):
                assert expected == ("refuse", code), (expected, decision)

    def _next(self, pid: int) -> tuple[int, int]:
        p = self.model.producers[pid]
        return p.epoch, _next_seq(p)

    @rule(pid=PIDS, first=START_SEQS, count=COUNTS)
    def new_or_next(self, pid: int, first: int, count: int) -> None:
        """The well-behaved producer: its next batch (or any start if the broker forgot it)."""
        if pid in self.model.producers:
            epoch, first = self._next(pid)
        else:
            epoch = max((e for e, _, _ in self.sent.get(pid, [])), default=0)
        self._send(pid, epoch, first, count)

    @precondition(lambda self: self.sent)
    @rule(data=st.data(), back=st.integers(1, 8))
    def retry(self, data: st.DataObject, back: int) -> None:
        """Resend a batch already appended: a duplicate inside the window, else refused."""
        pid = data.draw(st.sampled_from(sorted(self.sent)))
        history = self.sent[pid]
        epoch, first, count = history[-min(back, len(history))]
        self._send(pid, epoch, first, count)

    @precondition(lambda self: self.model.producers)
    @rule(data=st.data(), skip=st.integers(1, 6), count=COUNTS)
    def gap(self, data: st.DataObject, skip: int, count: int) -> None:
        pid = data.draw(st.sampled_from(sorted(self.model.producers)))
        epoch, first = self._next(pid)
        self._send(pid, epoch, (first + skip) % SEQ_SPACE, count)

    @precondition(lambda self: self.model.producers)
    @rule(data=st.data(), first=st.sampled_from([0, 0, 1, 5]), count=COUNTS)
    def bump_epoch(self, data: st.DataObject, first: int, count: int) -> None:
        pid = data.draw(st.sampled_from(sorted(self.model.producers)))
        self._send(pid, self.model.producers[pid].epoch + 1, first, count)

    @rule(pid=PIDS, epoch=st.integers(0, 3), first=START_SEQS, count=COUNTS)
    def arbitrary(self, pid: int, epoch: int, first: int, count: int) -> None:
        self._send(pid, epoch, first, count)

    @rule(pid=PIDS, first=START_SEQS, count=COUNTS)
    def transactional(self, pid: int, first: int, count: int) -> None:
        """The next batch of a transaction (opening one if none is open)."""
        epoch, first = self._next(pid) if pid in self.model.producers else (0, first)
        self._send(pid, epoch, first, count, txn=True)

    @rule(
        pid=PIDS,
        epoch_change=st.sampled_from([0, 0, 1, -1]),
        coordinator_epoch=st.integers(-1, 2),
        committed=st.booleans(),
    )
    def marker(self, pid: int, epoch_change: int, coordinator_epoch: int, committed: bool) -> None:
        self.now += 1
        known = self.model.producers.get(pid)
        epoch = max((known.epoch if known else 0) + epoch_change, 0)
        decision = self.sut.validate_marker(
            pid, epoch, TxnMarker(committed, coordinator_epoch), self.now
        )
        expected = self.model.decide_marker(pid, epoch, coordinator_epoch)
        match decision:
            case Append(pending):
                assert expected == ("append",), (expected, decision)
                self.sut.commit(pending, self.log_end, self.log_end)
                self.model.apply_marker(pid, epoch, coordinator_epoch, self.now)
                self.log_end += 1
            case Refuse(code, _):
                assert expected == ("refuse", code), (expected, decision)
            case _:
                raise AssertionError(decision)

    @rule()
    def restart(self) -> None:
        """A clean restart: the next manager is the lazily loaded snapshot of this one."""
        self.sut = decode_state(encode_state(self.sut))

    @rule(advance=st.integers(0, 30), expiration=st.integers(1, 40))
    def expire(self, advance: int, expiration: int) -> None:
        self.now += advance
        gone = self.sut.remove_expired(self.now, expiration)
        assert sorted(gone) == sorted(self.model.expire(self.now, expiration))

    @invariant()
    def state_matches_model(self) -> None:
        entries = self.sut.entries
        assert set(entries) == set(self.model.producers)
        for pid, p in self.model.producers.items():
            e = entries[pid]
            got = [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in e.batches]
            assert (e.producer_epoch, got, e.last_timestamp) == (p.epoch, p.batches, p.last_ts)
            assert (e.current_txn_first_offset, e.coordinator_epoch) == (
                p.txn_first,
                p.coordinator_epoch,
            )
        open_txns = [p.txn_first for p in self.model.producers.values() if p.txn_first is not None]
        assert self.sut.first_unstable_offset() == min(open_txns, default=None)
        assert len(entries) == len(self.model.producers)

    @invariant()
    def snapshot_round_trips(self) -> None:
        restored = ProducerStateManager(decode_snapshot(encode_snapshot(self.sut.entries.values())))
        assert restored.entries == self.sut.entries
        lazily = decode_state(encode_state(self.sut))  # merged into the loaded snapshot
        assert lazily.entries == self.sut.entries
        assert lazily.first_unstable_offset() == self.sut.first_unstable_offset()


ProducerStateMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
TestProducerStateModel = ProducerStateMachine.TestCase
