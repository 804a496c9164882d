"""The sink's claims, pure: what a claim record says, whose claims an attempt must fence.
(The protocol against a broker, with its controls: test_spark_producer_reuse.py.)"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field

import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

from oncelog.spark import claims
from oncelog.spark.claims import (
    Claim,
    ProgressTopicError,
    check_progress_topic,
    foreign_claims,
    writers_to_fence,
)
from oncelog.spark.sink import Progress, Refuse


def test_a_claim_round_trips_and_other_records_are_not_claims() -> None:
    claim = Claim("orders", 3, 41, "oncelog-sink-ab12")
    assert Claim.decode(claim.encode()) == claim
    for other in (None, b"", b"not json", b"[1, 2]", b'{"sink": "orders", "slot": "3"}'):
        assert Claim.decode(other) is None


def test_only_other_writers_of_the_same_sink_and_slot_are_foreign() -> None:
    records = [
        (10, Claim("orders", 3, 41, "w-a").encode()),
        (11, None),  # a record that is no claim
        (12, Claim("other-sink", 3, 41, "w-b").encode()),
        (13, Claim("orders", 4, 41, "w-c").encode()),  # another slot
        (14, Claim("orders", 3, 41, "me").encode()),  # this attempt's own writer
        (15, Claim("orders", 3, 40, "w-d").encode()),  # an earlier batch's claim counts too
        (16, Claim("orders", 3, 41, "w-a").encode()),
    ]
    assert foreign_claims(records, "orders", 3, "me") == [(10, "w-a"), (15, "w-d"), (16, "w-a")]


def test_claims_below_the_committed_claim_are_settled() -> None:
    found = [(10, "w-a"), (15, "w-d"), (16, "w-a"), (20, "w-e")]
    assert writers_to_fence(found, None) == ["w-a", "w-d", "w-e"]  # each writer once
    assert writers_to_fence(found, 15) == ["w-a", "w-e"]  # w-a claimed again after 15
    assert writers_to_fence(found, 20) == []


def test_a_progress_topic_that_may_lose_claims_is_refused() -> None:
    check_progress_topic("p", dict(claims.PROGRESS_TOPIC_CONFIG))  # as the sink creates it
    broker_clock = {"message.timestamp.type": "LogAppendTime"}
    check_progress_topic("p", {"cleanup.policy": "delete", "retention.ms": "-1", **broker_clock})
    for config, named in (
        ({"cleanup.policy": "compact"}, "cleanup.policy=compact"),
        ({"cleanup.policy": "delete,compact"}, "cleanup.policy=delete,compact"),
        ({"retention.bytes": "1073741824"}, "retention.bytes=1073741824"),
        ({"retention.ms": "600000"}, "retention.ms=600000"),
    ):
        with pytest.raises(ProgressTopicError, match=named):
            check_progress_topic("p", {**config, **broker_clock})
    by_age = {k: v for k, v in claims.PROGRESS_TOPIC_CONFIG.items() if k not in broker_clock}
    for config in ({"message.timestamp.type": "CreateTime"}, {}):  # Kafka's default: CreateTime
        with pytest.raises(
            ProgressTopicError, match=re.escape("message.timestamp.type=CreateTime")
        ):
            check_progress_topic("p", {**by_age, **config})


# -- claims.attempt driven step by step ----------------------------------------------------


def _drive(answers: list[claims.Answer]) -> tuple[list[claims.Step], claims.Outcome]:
    """Run one attempt of batch 1 of slot 0 of sink "s", answering its steps in order."""
    steps = claims.attempt("s", 0, 1)
    taken = [next(steps)]
    try:
        for answer in answers:
            taken.append(steps.send(answer))
    except StopIteration as done:
        return taken, done.value
    raise AssertionError(f"the attempt wants more answers after {taken}")


def _progress(next_batch: int, claim: int | None) -> Progress:
    return Progress("s", "p", 1, next_batch, rows=3, writer="w-x", claim=claim)


def test_a_later_commit_after_the_fence_refuses_the_attempt() -> None:
    other = (10, Claim("s", 0, 1, "w-z").encode())
    taken, outcome = _drive(
        [
            _progress(1, 5),  # step 1: batch 0 written, claim 5
            claims.Claimed(20, "w-me"),
            [other],  # claims 6..19: w-z claimed at 10
            _progress(1, 5),  # latest: w-z has not committed
            None,  # w-z fenced
            _progress(2, 30),  # the stable read: a claim above ours committed
        ]
    )
    assert taken[2] == claims.ReadClaims(6, 20) and taken[4] == claims.Fence("w-z")
    assert isinstance(outcome, claims.Stop) and outcome.claimed
    assert isinstance(outcome.decision, Refuse) and "later attempt" in outcome.decision.reason


def test_a_recorded_claim_beyond_the_partition_end_is_refused() -> None:
    """The progress records claim 50 but this attempt's claim landed at 7: the progress
    topic was made again (its partitions start at 0) while the group kept its offsets."""
    _, outcome = _drive([_progress(1, 50), claims.Claimed(7, "w-me")])
    assert isinstance(outcome, claims.Stop) and outcome.claimed
    assert isinstance(outcome.decision, Refuse) and "made again" in outcome.decision.reason


def test_claims_deleted_from_the_start_are_read_from_the_stable_offset() -> None:
    """A slot idle longer than the retention: its last claim's successors are gone, and the
    read starts at the last stable offset (finished claims below it), then settles."""
    taken, outcome = _drive(
        [_progress(1, 5), claims.Claimed(900, "w-me"), claims.GONE, 850, [], _progress(1, 5)]
    )
    assert taken[2:5] == [
        claims.ReadClaims(6, 900),
        claims.LookUpStableOffset(),
        claims.ReadClaims(850, 900),
    ]
    assert taken[5] == claims.ReadProgress(claims.Wait.SHORT)  # skipped claims: read again
    assert isinstance(outcome, claims.Proceed) and outcome.claim == 900


def test_claims_gone_above_the_stable_offset_refuse_the_attempt() -> None:
    _, outcome = _drive([_progress(1, 5), claims.Claimed(900, "w-me"), claims.GONE, 3, claims.GONE])
    assert isinstance(outcome, claims.Stop) and outcome.claimed
    assert isinstance(outcome.decision, Refuse) and "deleted" in outcome.decision.reason


def test_a_long_range_or_no_claim_reads_from_the_stable_offset() -> None:
    far = claims.CLAIMS_READ_LIMIT + 10
    taken, _ = _drive([_progress(1, 5), claims.Claimed(6 + far, "w-me"), 40, [], _progress(1, 5)])
    assert taken[2:4] == [claims.LookUpStableOffset(), claims.ReadClaims(40, 6 + far)]
    taken, _ = _drive([_progress(0, None), claims.Claimed(7, "w-me"), 7, [], _progress(0, None)])
    assert taken[2:4] == [claims.LookUpStableOffset(), claims.ReadClaims(7, 7)]


# -- the protocol as a model: attempts interleaved at every step ---------------------------


@dataclass
class _Transaction:
    writer: str
    epoch: int
    state: str = "open"  # open, prepared (its commit began), committed, aborted; none: idle
    offsets: Progress | None = None  # the progress it added (a TxnOffsetCommit)
    batch: int = -1


@dataclass(frozen=True)
class _Commit:
    writer: str
    batch: int
    records: int  # how many records the slot's partition held when it committed


@dataclass
class _Slot:
    """One task slot as the cluster holds it: the committed progress, the slot's partition
    of the progress topic (each record with its transaction), each writer's current
    transaction (its epoch: the latest a producer of that transactional.id initialised),
    and the batches written."""

    progress: Progress = field(default_factory=lambda: Progress("s", "p", 1))
    records: list[tuple[_Transaction, bytes]] = field(default_factory=list)
    current: dict[str, _Transaction] = field(default_factory=dict)  # by writer
    written: list[int] = field(default_factory=list)
    commits: list[_Commit] = field(default_factory=list)  # one per written batch

    def pending(self) -> bool:
        """A stable read waits: a transaction added the progress and has not completed."""
        return any(t.offsets and t.state in ("open", "prepared") for t in self.current.values())

    def stable_offset(self) -> int:
        unstable = [i for i, (t, _) in enumerate(self.records) if t.state in ("open", "prepared")]
        return min(unstable, default=len(self.records))

    def complete(self, txn: _Transaction) -> None:
        txn.state = "committed"
        assert txn.offsets is not None
        self.progress = txn.offsets
        self.written.append(txn.batch)
        self.commits.append(_Commit(txn.writer, txn.batch, len(self.records)))

    def init(self, writer: str) -> int:
        """init_transactions of a new transactional.id: its producer's epoch."""
        assert writer not in self.current  # writers' ids are new (a uuid each)
        self.current[writer] = _Transaction(writer, 0, state="none")
        return 0

    def fence(self, writer: str) -> None:
        """init_transactions with the writer's id: aborts its open transaction, completes
        one whose commit began, and refuses what it sends after (a new epoch)."""
        txn = self.current[writer]
        if txn.state == "open":
            txn.state = "aborted"
        elif txn.state == "prepared":
            self.complete(txn)
        self.current[writer] = _Transaction(writer, txn.epoch + 1, state="none")

    def live(self, txn: _Transaction) -> bool:
        return self.current[txn.writer] is txn


@dataclass
class _Worker:
    """A Python worker: runs its attempts one after another and keeps its writer (a
    transactional.id and the epoch its producer holds) while that writer's claims end in
    commits, as `producers.ClientPool` does; a kept writer found fenced at a claim is
    replaced by a new one, which claims instead (`writer._claim_with_a_live_writer`).
    The model has one task slot and one sink: the real writer also serves other slots and
    sinks, whose fences can reach it the same way (`claims`), which the model does not
    produce."""

    name: str
    replace_fenced: bool = True  # writer.RETRY_A_FENCED_CLAIM; a control turns it off
    writer: str | None = None
    epoch: int = 0
    made: int = 0
    replacements: set[str] = field(default_factory=set)  # writers made for a fenced kept one
    refused: int = 0  # claims the broker refused: the attempt failed

    def claiming_writer(self, slot: _Slot) -> str | None:
        """The writer that claims, or None when the broker refused the kept writer's claim
        and it is not replaced (the attempt fails: a Spark task retry)."""
        replacing = False
        if self.writer is not None and slot.current[self.writer].epoch != self.epoch:
            self.writer = None  # the broker refused the claim: nothing was written
            if not self.replace_fenced:
                self.refused += 1
                return None
            replacing = True
        if self.writer is None:
            self.made += 1
            self.writer = f"{self.name}.{self.made}"
            self.epoch = slot.init(self.writer)
            if replacing:
                self.replacements.add(self.writer)
        return self.writer


BLOCKED = object()
REFUSED = object()  # the broker refused a fenced kept writer's claim
DONE = object()


def _take(slot: _Slot, step: claims.Step, worker: _Worker, batch: int) -> object:
    """One step of `claims.attempt` against the model slot (BLOCKED: not yet possible)."""
    match step:
        case claims.ReadProgress(wait):
            if slot.pending():
                return None if wait is claims.Wait.SHORT else BLOCKED
            return slot.progress
        case claims.ReadMaterialised():
            return slot.progress
        case claims.ProduceClaim():
            writer = worker.claiming_writer(slot)
            if writer is None:
                return REFUSED
            txn = slot.current[writer] = _Transaction(writer, worker.epoch, batch=batch)
            slot.records.append((txn, Claim("s", 0, batch, writer).encode()))
            return claims.Claimed(len(slot.records) - 1, writer)
        case claims.LookUpStableOffset():
            return slot.stable_offset()
        case claims.ReadClaims(start, end):
            return [(i, raw) for i, (_, raw) in enumerate(slot.records)][start:end]
        case claims.Fence(other):
            slot.fence(other)
            return None
    raise AssertionError(step)


def _attempt(slot: _Slot, worker: _Worker, batch: int) -> Generator[None, None, None]:
    """One attempt on `worker`: claims.attempt's steps and then the write, a `yield`
    between any two requests to the cluster (where another attempt may run). A writer
    whose claim does not end in its commit is retired."""
    steps = claims.attempt("s", 0, batch)
    step = next(steps)
    while True:
        while (answer := _take(slot, step, worker, batch)) is BLOCKED:
            yield
        if answer is REFUSED:
            return
        yield
        try:
            step = steps.send(answer)  # type: ignore[arg-type]
        except StopIteration as done:
            outcome = done.value
            break
    if not isinstance(outcome, claims.Proceed):
        if outcome.claimed:
            assert worker.writer is not None
            if slot.live(txn := slot.current[worker.writer]) and txn.state == "open":
                txn.state = "aborted"
            worker.writer = None
        return
    assert worker.writer is not None
    txn = slot.current[worker.writer]
    if not slot.live(txn) or txn.state != "open":
        worker.writer = None  # fenced: the broker refuses the TxnOffsetCommit
        return
    txn.offsets = Progress("s", "p", 1, outcome.decision.next_batch, claim=outcome.claim)
    yield
    if not slot.live(txn) or txn.state != "open":
        worker.writer = None  # fenced: EndTxn refused
        return
    txn.state = "prepared"
    yield
    if txn.state == "prepared":  # unless a fence completed it meanwhile
        slot.complete(txn)


def _worker(slot: _Slot, worker: _Worker, batches: tuple[int, ...]) -> Iterator[None]:
    for batch in batches:
        yield from _attempt(slot, worker, batch)


Plan = tuple[tuple[int, ...], ...]  # which batches of the slot each worker attempts, in order
ONE_BATCH: Plan = ((1,), (1,), (1,))  # three attempts of batch 1, each with a new writer
# kept writers: attempts of later batches reuse the writer of an earlier one (and meet its
# zombies, or are fenced while idle by another worker's attempt of the same batch)
KEPT: Plan = ((0, 1, 2), (0, 1), (1, 2))


@dataclass
class _Run:
    written: list[int]
    commits: list[_Commit]
    claimed: list[tuple[str, int]]  # (writer, batch) of every claim, in the slot's order
    workers: list[_Worker]
    unfinished: list[str]  # live workers whose attempts did not all end (a deadlocked model)

    def twice(self) -> bool:
        return any(self.written.count(b) > 1 for b in set(self.written))


def _run(
    schedule: list[int],
    dead: set[int],
    earlier_batch: bool = False,
    plan: Plan = ONE_BATCH,
    replace_fenced: bool = True,
) -> _Run:
    """Workers run their attempts in the order `schedule` says (after batch 0 was written
    when `earlier_batch`); then the dead ones stop (the coordinator aborts what they left
    open, completes what began committing) and the others run to their end, one after
    another (so all interleaving is the schedule's), then in turns (one may wait for
    another's commit)."""
    slot = _Slot()
    if earlier_batch:
        first = _worker(slot, _Worker("first"), (0,))
        while next(first, "done") is None:
            pass
    workers = [_Worker(f"w{i}", replace_fenced) for i in range(len(plan))]
    running = [_worker(slot, w, batches) for w, batches in zip(workers, plan, strict=True)]
    for turn in schedule:
        next(running[turn % len(running)], None)
    for i in dead:
        writer = workers[i].writer
        txn = slot.current.get(writer) if writer is not None else None
        if txn is not None and txn.state in ("open", "prepared"):
            slot.fence(txn.writer)  # the transaction timeout's abort (or completion)
    live = sorted(set(range(len(plan))) - dead)
    finished: set[int] = set()
    for i in live:
        for _ in range(400):
            if next(running[i], DONE) is DONE:
                finished.add(i)
                break
    for _ in range(400):
        for i in set(live) - finished:
            if next(running[i], DONE) is DONE:
                finished.add(i)
    unfinished = [workers[i].name for i in live if i not in finished]
    claimed = [(txn.writer, txn.batch) for txn, _ in slot.records]
    return _Run(slot.written, slot.commits, claimed, workers, unfinished)


SCHEDULES = st.lists(st.integers(0, len(ONE_BATCH) - 1), max_size=40)
LONG_SCHEDULES = st.lists(st.integers(0, len(KEPT) - 1), max_size=120)
DEAD = st.sets(st.integers(0, len(ONE_BATCH) - 1), max_size=1)


@settings(max_examples=400, deadline=None)
@given(SCHEDULES, DEAD, st.booleans())
def test_interleaved_attempts_of_one_batch_write_it_at_most_once(
    schedule: list[int], dead: set[int], earlier_batch: bool
) -> None:
    run = _run(schedule, dead, earlier_batch)
    assert not run.twice() and not run.unfinished


@settings(max_examples=400, deadline=None)
@given(LONG_SCHEDULES, DEAD)
def test_kept_writers_write_each_batch_at_most_once(schedule: list[int], dead: set[int]) -> None:
    run = _run(schedule, dead, plan=KEPT)
    assert not run.twice() and not run.unfinished


def _kept_writer_commits_a_contested_batch(run: _Run) -> bool:
    """A writer that committed an earlier batch commits another, which a second writer had
    claimed before that commit."""
    return any(
        any(earlier.writer == commit.writer for earlier in run.commits[:i])
        and any(
            other != commit.writer and batch == commit.batch
            for other, batch in run.claimed[: commit.records]
        )
        for i, commit in enumerate(run.commits)
    )


def _replacement_commits(run: _Run) -> bool:
    """A writer made for a kept writer found fenced at its claim commits a batch."""
    return any(c.writer in w.replacements for w in run.workers for c in run.commits)


def _search(
    reached: Callable[[_Run], bool], replace_fenced: bool = True
) -> tuple[list[int], set[int]]:
    schedule, dead = find(
        st.tuples(LONG_SCHEDULES, DEAD),
        lambda case: reached(_run(case[0], case[1], plan=KEPT, replace_fenced=replace_fenced)),
        settings=settings(max_examples=5000, database=None, derandomize=True),
    )
    return schedule, dead


@pytest.mark.parametrize("reached", [_kept_writer_commits_a_contested_batch, _replacement_commits])
def test_the_search_reaches_kept_writers_under_contention(reached: Callable[[_Run], bool]) -> None:
    """The schedules of the test above reach the cases it is for: a kept writer commits a
    batch that another worker's attempt claimed too, and a kept writer fenced while idle is
    replaced and its replacement commits; each batch still written once. Not by the
    workers' run to their end alone: without a schedule they run one after another."""
    assert not reached(_run([], set(), plan=KEPT))
    schedule, dead = _search(reached)
    run = _run(schedule, dead, plan=KEPT)
    assert reached(run) and not run.twice() and not run.unfinished


def test_without_replacing_a_fenced_kept_writer_some_attempt_fails_at_its_claim() -> None:
    """The replacement of a kept writer fenced while idle is for liveness, not safety: the
    broker refuses the fenced writer's claim, so nothing is written twice without it, but
    the attempt fails (a Spark task retry). The control: in the same interleaving with the
    replacement, the replacement commits a batch and every batch is written."""
    schedule, dead = _search(lambda run: any(w.refused for w in run.workers), replace_fenced=False)
    without = _run(schedule, dead, plan=KEPT, replace_fenced=False)
    assert not without.twice()
    run = _run(schedule, dead, plan=KEPT)
    assert _replacement_commits(run) and not run.twice() and not run.unfinished
    assert sorted(run.written) == [0, 1, 2]


def _twice(earlier_batch: bool, plan: Plan = ONE_BATCH) -> tuple[list[int], set[int]]:
    schedule, dead = find(
        st.tuples(LONG_SCHEDULES if plan is KEPT else SCHEDULES, DEAD),
        lambda case: _run(case[0], case[1], earlier_batch, plan).twice(),
        settings=settings(max_examples=5000, database=None, derandomize=True),
    )
    return schedule, dead


@pytest.mark.parametrize(
    ("earlier_batch", "plan"), [(False, ONE_BATCH), (True, ONE_BATCH), (False, KEPT)]
)
def test_without_the_fence_some_interleaving_writes_a_batch_twice(
    monkeypatch: pytest.MonkeyPatch, earlier_batch: bool, plan: Plan
) -> None:
    monkeypatch.setattr(_Slot, "fence", lambda self, writer: None)
    schedule, dead = _twice(earlier_batch, plan)
    monkeypatch.undo()
    assert not _run(schedule, dead, earlier_batch, plan).twice()  # the same interleaving, fenced


def test_without_settling_skipped_claims_some_interleaving_writes_a_batch_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Claims below the last stable offset are finished but may have committed since the
    attempt's first read: deciding on that read without reading the progress again writes
    the batch twice."""
    monkeypatch.setattr(claims, "must_settle", lambda found, skipped: bool(found))
    schedule, dead = _twice(earlier_batch=False)
    monkeypatch.undo()
    assert not _run(schedule, dead).twice()


def test_a_fence_completes_a_commit_that_had_begun_and_the_attempt_skips() -> None:
    """A's commit began (PrepareCommit) and its markers are not written; Z's reads are held,
    it fences A, which completes A's commit, and decides on the read after: skip."""
    slot = _Slot()
    a, z = _attempt(slot, _Worker("a"), 1), _attempt(slot, _Worker("z"), 1)
    while slot.current.get("a.1", _Transaction("a.1", 0)).state != "prepared":
        next(a)
    for _ in range(30):
        next(z, None)
    assert slot.written == [1]  # completed by Z's fence; A is still before its completion
    assert slot.current["a.1"].epoch == 1 and slot.current["z.1"].state == "aborted"
    for _ in range(30):
        next(a, None)
    assert slot.written == [1]


def test_deciding_on_the_read_before_a_fence_writes_a_batch_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The control: a fence completes a commit that had begun, which a read taken before the
    fence does not show."""
    monkeypatch.setattr(claims, "must_reread", lambda latest, fenced: latest is None)
    schedule, dead = _twice(earlier_batch=False)
    monkeypatch.undo()
    assert not _run(schedule, dead).twice()
