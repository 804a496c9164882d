"""The sink's claims, pure: what a claim record says, whose claims an attempt must fence.
(The protocol against a broker, with its controls: test_spark_producer_reuse.py.)"""

from __future__ import annotations

from collections.abc import Iterator

from hypothesis import find, given
from hypothesis import strategies as st

from oncelog.spark.claims import Claim, foreign_claims, writers_to_fence
from oncelog.spark.sink import Progress, Write, decide


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


# -- the protocol as a model: attempts interleaved at every step ---------------------------


class _Slot:
    """One task slot as the cluster holds it: the progress (N, claim), the slot's partition
    of the progress topic, each writer's epoch, and the batches written."""

    def __init__(self) -> None:
        self.progress = Progress("s", "__progress", 1)
        self.records: list[bytes] = []
        self.epochs: dict[str, int] = {}
        self.written: list[int] = []

    def commit(self, writer: str, epoch: int, batch: int, claim: int) -> bool:
        if self.epochs[writer] != epoch:
            return False  # fenced: the broker refuses it
        self.progress = Progress("s", "__progress", 1, batch + 1, claim=claim)
        self.written.append(batch)
        return True


def _attempt(slot: _Slot, writer: str, batch: int, fence: bool) -> Iterator[None]:
    """writer._write_exactly_once's steps, a `yield` wherever another attempt may run."""
    progress = slot.progress
    if not isinstance(decide(progress, batch, 0), Write):
        return
    since = progress.claim
    yield
    slot.epochs[writer] = epoch = slot.epochs.get(writer, -1) + 1
    claim = len(slot.records)
    slot.records.append(Claim("s", 0, batch, writer).encode())
    yield
    start = 0 if since is None else since + 1
    found = foreign_claims(list(enumerate(slot.records))[start:claim], "s", 0, writer)
    if found:
        yield
        latest = slot.progress
        for other in writers_to_fence(found, latest.claim) if fence else []:
            slot.epochs[other] += 1
            yield
        progress = slot.progress
        if not isinstance(decide(progress, batch, 0), Write):
            return
    yield
    slot.commit(writer, epoch, batch, claim)


def _run(schedule: list[int], attempts: int, fence: bool) -> list[int]:
    slot = _Slot()
    running = [_attempt(slot, f"w{i}", 0, fence) for i in range(attempts)]
    for turn in schedule + list(range(attempts)) * 20:
        step = running[turn % attempts]
        next(step, None)
    return slot.written


@given(st.lists(st.integers(0, 2), max_size=30))
def test_interleaved_attempts_of_one_batch_write_it_at_most_once(schedule: list[int]) -> None:
    written = _run(schedule, 3, fence=True)
    assert len(written) <= 1 and written == [0][: len(written)]


def test_without_the_fence_some_interleaving_writes_a_batch_twice() -> None:
    twice = find(st.lists(st.integers(0, 2), max_size=30), lambda s: len(_run(s, 3, False)) > 1)
    assert len(_run(twice, 3, fence=True)) == 1  # the same interleaving, fenced
