"""The producer state machine against a tiny reference model of Kafka's rules.

Hypothesis drives random appends, retries (recent and older than the window), gaps,
epoch bumps, arbitrary batches and expirations, and checks every decision and the
resulting state against the model. Snapshots must round-trip at every step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from oncelog.producers.snapshot import decode_snapshot, encode_snapshot
from oncelog.producers.state import Append, Duplicate, ProducerStateManager, Refuse
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import BatchHeader

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


@dataclass
class Model:
    """Kafka's rules in their plainest form: a dict of producer id -> state."""

    producers: dict[int, ModelProducer] = field(default_factory=dict)

    def decide(self, pid: int, epoch: int, first: int, last: int) -> tuple[object, ...]:
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
            return ("append",) if first == 0 else ("refuse", ErrorCode.out_of_order_sequence_number)
        expected = (p.batches[-1][1] + 1) % SEQ_SPACE
        return (
            ("append",) if first == expected else ("refuse", ErrorCode.out_of_order_sequence_number)
        )

    def apply(self, pid: int, epoch: int, batch: tuple[int, int, int, int], ts: int) -> None:
        p = self.producers.get(pid)
        if p is None or p.epoch != epoch:
            p = self.producers[pid] = ModelProducer(epoch, [], ts)
        p.batches = [*p.batches, batch][-5:]
        p.last_ts = ts

    def expire(self, now: int, expiration: int) -> list[int]:
        gone = [pid for pid, p in self.producers.items() if now - p.last_ts >= expiration]
        for pid in gone:
            del self.producers[pid]
        return gone


class ProducerStateMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.sut = ProducerStateManager()
        self.model = Model()
        self.log_end = 0
        self.now = 0
        self.sent: dict[int, list[tuple[int, int, int]]] = {}  # pid -> (epoch, first_seq, count)

    def _send(self, pid: int, epoch: int, first: int, count: int) -> None:
        self.now += 1
        h = BatchHeader(0, 0, -1, 2, 0, 0, count - 1, self.now, self.now, pid, epoch, first, count)
        before = dict(self.sut.entries)
        decision = self.sut.validate(h)
        assert dict(self.sut.entries) == before and all(
            self.sut.entries[k] is v for k, v in before.items()
        ), "validate changed the state"
        last = (first + count - 1) % SEQ_SPACE
        expected = self.model.decide(pid, epoch, first, last)
        match decision:
            case Append(pending):
                assert expected == ("append",), (expected, decision)
                batch = (first, last, self.log_end, self.log_end + count - 1)
                self.sut.commit(pending, batch[2], batch[3])
                self.model.apply(pid, epoch, batch, self.now)
                self.log_end += count
                self.sent.setdefault(pid, []).append((epoch, first, count))
            case Duplicate(first_offset, last_offset, _):
                assert expected == ("duplicate", first_offset, last_offset), (expected, decision)
            case Refuse(code, _):
                assert expected == ("refuse", code), (expected, decision)

    def _next(self, pid: int) -> tuple[int, int]:
        p = self.model.producers[pid]
        return p.epoch, (p.batches[-1][1] + 1) % SEQ_SPACE

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

    @invariant()
    def snapshot_round_trips(self) -> None:
        restored = ProducerStateManager(decode_snapshot(encode_snapshot(self.sut.entries.values())))
        assert restored.entries == self.sut.entries


ProducerStateMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
TestProducerStateModel = ProducerStateMachine.TestCase
