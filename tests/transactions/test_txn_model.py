"""The coordinator shard against a small reference model of Kafka's transaction rules.

Hypothesis drives InitProducerId (plain and KIP-360), AddPartitions, EndTxn, marker
completion, timeouts, expiration, failed writes, coordinator reloads and ids seeded near
epoch exhaustion. After every step the shard's state must equal the model's, and a shard
rebuilt from the records written so far must equal the live one (load == live).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from oncelog.protocol.errors import ErrorCode as E
from oncelog.transactions.coordinator import CoordinatorResult, TransactionCoordinatorShard
from oncelog.transactions.log_records import encode_key, encode_value
from oncelog.transactions.state import TransactionMetadata
from oncelog.transactions.state import TxnState as S

MAX = 32767
TIDS = st.sampled_from(["a", "b", "c"])
PARTS = st.sets(st.sampled_from([("t", 0), ("t", 1), ("u", 0)]), min_size=1, max_size=2)
# Mostly the current producer, so transactions get far; the rest probes every refusal.
WHO = st.sampled_from(["current"] * 5 + ["older", "newer", "other_pid", "previous_pid"])
TIMEOUT = 10_000
EXPIRATION = 50_000


@dataclass
class M:
    """The model's view of one id."""

    pid: int
    epoch: int
    state: S
    last: int = -1
    prev: int = -1
    parts: frozenset[tuple[str, int]] = frozenset()
    start: int = -1
    updated: int = 0
    timeout: int = TIMEOUT


@dataclass
class Model:
    ids: dict[str, M] = field(default_factory=dict)

    def write(self, tid: str, m: M, now: int, **changes: object) -> None:
        """Every write records the producer id before it as the previous one (Kafka)."""
        self.ids[tid] = replace(m, prev=m.pid, updated=now, **changes)  # type: ignore[arg-type]

    def init(self, tid: str, expected: tuple[int, int] | None, now: int, new_pid: int) -> E:
        m = self.ids.get(tid)
        if m is None:
            self.ids[tid] = M(new_pid, 0, S.EMPTY, prev=new_pid, updated=now)
            return E.none
        if expected is not None and not (
            expected[0] == m.pid or (expected[0] == m.prev and expected[1] >= MAX - 1)
        ):
            return E.producer_fenced
        if m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return E.concurrent_transactions
        if m.state is S.ONGOING:
            self.write(tid, m, now, epoch=min(m.epoch + 1, MAX), last=-1, state=S.PREPARE_ABORT)
            return E.concurrent_transactions
        idle = {"state": S.EMPTY, "parts": frozenset(), "start": -1, "timeout": TIMEOUT}
        if m.epoch >= MAX - 1 and (expected is None or expected[1] == m.epoch):
            last = m.epoch if expected is not None else -1
            self.write(tid, m, now, pid=new_pid, epoch=0, last=last, **idle)
        elif expected is None:
            self.write(tid, m, now, epoch=m.epoch + 1, last=-1, **idle)
        elif expected[1] == m.epoch:
            self.write(tid, m, now, epoch=m.epoch + 1, last=m.epoch, **idle)
        elif expected[1] == m.last:
            self.write(tid, m, now, **idle)
        else:
            return E.producer_fenced
        return E.none

    def add(self, tid: str, pid: int, epoch: int, parts: frozenset, now: int) -> tuple[E, bool]:
        m = self.ids.get(tid)
        if m is None or m.pid != pid:
            return E.invalid_producer_id_mapping, False
        if m.epoch != epoch:
            return E.producer_fenced, False
        if m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return E.concurrent_transactions, False
        if m.state is S.ONGOING and parts <= m.parts:
            return E.none, False
        start = m.start if m.state is S.ONGOING else now
        self.write(tid, m, now, state=S.ONGOING, parts=m.parts | parts, start=start)
        return E.none, True

    def end(self, tid: str, pid: int, epoch: int, commit: bool, now: int) -> E:
        m = self.ids.get(tid)
        if m is None or m.pid != pid:
            return E.invalid_producer_id_mapping
        if m.epoch != epoch:
            return E.producer_fenced
        if m.state is S.ONGOING:
            self.write(tid, m, now, state=S.PREPARE_COMMIT if commit else S.PREPARE_ABORT)
            return E.none
        committed = m.state in (S.PREPARE_COMMIT, S.COMPLETE_COMMIT)
        if m.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT) and committed == commit:
            return E.none
        if m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT) and committed == commit:
            return E.concurrent_transactions
        return E.invalid_txn_state

    def complete(self, tid: str, now: int) -> None:
        m = self.ids[tid]
        done = S.COMPLETE_COMMIT if m.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        self.write(tid, m, now, state=done, parts=frozenset())

    def time_out(self, now: int) -> set[str]:
        timed = {
            t for t, m in self.ids.items() if m.state is S.ONGOING and m.start + m.timeout < now
        }
        for t in timed:
            m = self.ids[t]
            self.write(t, m, now, epoch=min(m.epoch + 1, MAX), last=-1, state=S.PREPARE_ABORT)
        return timed

    def expire(self, now: int) -> set[str]:
        idle = (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
        gone = {t for t, m in self.ids.items() if m.state in idle and m.updated <= now - EXPIRATION}
        for t in gone:
            del self.ids[t]
        return gone


class CoordinatorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.shard = TransactionCoordinatorShard(3, 5)
        self.model = Model()
        self.log: list[tuple[bytes, bytes | None]] = []
        self.pids = itertools.count(100)
        self.next_pid = 100
        self.now = 1_000

    # --- plumbing ---

    def allocate(self) -> int:
        self.next_pid = next(self.pids)
        return self.next_pid

    def peek_pid(self) -> int:
        return self.next_pid + 1

    def write(self, result: CoordinatorResult, fail: bool = False) -> bool:
        if fail and result.records:
            self.shard.write_failed(result)
            return False
        self.log.extend(result.records)
        self.shard.apply(result)
        return True

    def ids_for(self, tid: str, who: str) -> tuple[int, int]:
        m = self.model.ids.get(tid)
        if m is None:
            return 999, 0
        return {
            "current": (m.pid, m.epoch),
            "older": (m.pid, m.epoch - 1),
            "newer": (m.pid, m.epoch + 1),
            "other_pid": (m.pid + 50_000, m.epoch),
            "previous_pid": (m.prev, MAX - 1),
        }[who]

    # --- rules ---

    @rule(tid=TIDS, kip360=st.booleans(), who=WHO, fail=st.booleans())
    def init(self, tid: str, kip360: bool, who: str, fail: bool) -> None:
        expected = self.ids_for(tid, who) if kip360 else None
        if expected is not None and (expected[0] < 0 or expected[1] < 0):
            expected = None
        pid_arg, epoch_arg = expected if expected is not None else (-1, -1)
        result = self.shard.init_producer_id(
            tid,
            TIMEOUT,
            pid_arg,
            epoch_arg,
            now_ms=self.now,
            allocate_producer_id=self.allocate,
            max_timeout_ms=60_000,
        )
        before = dict(self.model.ids)
        error = self.model.init(tid, expected, self.now, self.next_pid)
        assert result.response is not None and result.response.error == error, (tid, expected)
        if not self.write(result, fail):
            self.model.ids = before
            return
        m = self.model.ids.get(tid)
        if error == E.none:
            assert m is not None
            assert (result.response.producer_id, result.response.producer_epoch) == (m.pid, m.epoch)
        if result.markers:
            assert m is not None and m.state is S.PREPARE_ABORT
            assert result.markers[0].producer_epoch == m.epoch

    @rule(tid=TIDS, who=WHO, parts=PARTS, fail=st.booleans())
    def add(self, tid: str, who: str, parts: set[tuple[str, int]], fail: bool) -> None:
        pid, epoch = self.ids_for(tid, who)
        result = self.shard.add_partitions(tid, pid, epoch, parts, self.now)
        before = dict(self.model.ids)
        error, wrote = self.model.add(tid, pid, epoch, frozenset(parts), self.now)
        assert result.response is not None and result.response.error == error
        assert bool(result.records) == wrote
        if not self.write(result, fail):
            self.model.ids = before

    @rule(tid=TIDS, who=WHO, commit=st.booleans(), fail=st.booleans())
    def end(self, tid: str, who: str, commit: bool, fail: bool) -> None:
        pid, epoch = self.ids_for(tid, who)
        result = self.shard.end_txn(tid, pid, epoch, commit, self.now)
        before = dict(self.model.ids)
        m_before = self.model.ids.get(tid)
        error = self.model.end(tid, pid, epoch, commit, self.now)
        assert result.response is not None and result.response.error == error, (tid, pid, epoch)
        if result.markers:
            assert m_before is not None and result.markers[0].partitions == m_before.parts
            marker = result.markers[0]
            assert marker.committed == commit
            assert marker.coordinator_epoch == self.shard.coordinator_epoch
        if not self.write(result, fail):
            self.model.ids = before

    @rule(fail=st.booleans())
    def complete_markers(self, fail: bool) -> None:
        for marker in self.shard.pending_markers():
            result = self.shard.complete(marker.transactional_id, self.now, marker)
            if self.write(result, fail):
                self.model.complete(marker.transactional_id, self.now)

    @rule(ms=st.sampled_from([1, 100, 5_000, 10_001, 60_000]))
    def tick(self, ms: int) -> None:
        self.now += ms

    @rule(fail=st.booleans())
    def abort_timed_out(self, fail: bool) -> None:
        results = self.shard.abort_timed_out(self.now)
        before = dict(self.model.ids)
        timed = self.model.time_out(self.now)
        assert {r.markers[0].transactional_id for r in results} == timed
        if fail:
            for r in results:
                self.shard.write_failed(r)
            self.model.ids = before
        else:
            for r in results:
                self.write(r)

    @rule(fail=st.booleans())
    def expire(self, fail: bool) -> None:
        result = self.shard.expire_transactional_ids(self.now, EXPIRATION)
        before = dict(self.model.ids)
        gone = self.model.expire(self.now)
        assert {k for k, v in result.records} == {encode_key(t) for t in gone}
        if not self.write(result, fail):
            self.model.ids = before

    @rule(
        tid=TIDS,
        state=st.sampled_from([S.EMPTY, S.COMPLETE_ABORT, S.ONGOING]),
        epoch=st.sampled_from([MAX - 3, MAX - 2, MAX - 1]),
    )
    def seed_near_exhaustion(self, tid: str, state: S, epoch: int) -> None:
        """An id from an earlier run, close to the end of its epochs."""
        if tid in self.model.ids:
            return
        pid = self.allocate()
        parts = frozenset({("t", 0)}) if state is S.ONGOING else frozenset()
        start = self.now if state is not S.EMPTY else -1
        md = TransactionMetadata(
            tid,
            pid,
            epoch,
            TIMEOUT,
            state,
            previous_producer_id=pid,
            partitions=parts,
            txn_start_timestamp=start,
            txn_last_update_timestamp=self.now,
        )
        record = (encode_key(tid), encode_value(md))
        self.log.append(record)
        self.shard.replay(0, -1, *record)
        self.model.ids[tid] = M(
            pid, epoch, state, prev=pid, parts=parts, start=start, updated=self.now
        )

    @rule()
    def reload(self) -> None:
        """The coordinator restarts: rebuild from the log, re-send prepared markers."""
        fresh = TransactionCoordinatorShard(3, 6, loading=True)
        for offset, (key, value) in enumerate(self.log):
            fresh.replay(offset, -1, key, value)
        markers = fresh.finish_loading()
        prepared = {
            t for t, m in self.model.ids.items() if m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)
        }
        assert {m.transactional_id for m in markers} == prepared
        assert all(m.coordinator_epoch == 6 for m in markers)
        self.shard = fresh

    # --- invariants ---

    @invariant()
    def matches_model(self) -> None:
        got = {
            tid: (
                md.producer_id,
                md.producer_epoch,
                md.state,
                md.partitions,
                md.last_producer_epoch,
                md.previous_producer_id,
                md.txn_start_timestamp,
                md.txn_last_update_timestamp,
            )
            for tid, md in self.shard.metadata.items()
        }
        want = {
            tid: (m.pid, m.epoch, m.state, m.parts, m.last, m.prev, m.start, m.updated)
            for tid, m in self.model.ids.items()
        }
        assert got == want

    @invariant()
    def load_equals_live(self) -> None:
        fresh = TransactionCoordinatorShard(3, 5)
        for offset, (key, value) in enumerate(self.log):
            fresh.replay(offset, -1, key, value)
        assert fresh.metadata == self.shard.metadata

    @invariant()
    def nothing_in_flight(self) -> None:
        assert all(self.shard.pending(t) is None for t in ("a", "b", "c"))

    @invariant()
    def epochs_in_range(self) -> None:
        for md in self.shard.metadata.values():
            assert 0 <= md.producer_epoch <= MAX


CoordinatorMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestCoordinatorModel = CoordinatorMachine.TestCase
