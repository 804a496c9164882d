"""A manager loaded from a snapshot decodes an entry only when its producer is used, and
writes the next snapshot by copying the old entries: the same state as decoding all."""

from __future__ import annotations

from pathlib import Path

from oncelog.producers.snapshot import (
    decode_snapshot,
    encode_snapshot,
    encode_state,
    read_state,
    write_snapshot,
)
from oncelog.producers.state import (
    Append,
    BatchMetadata,
    Duplicate,
    ProducerStateEntry,
    ProducerStateManager,
)

from .test_producer_snapshot import header


def many(count: int, *, open_txn_every: int = 0) -> list[ProducerStateEntry]:
    return [
        ProducerStateEntry(
            pid,
            0,
            (BatchMetadata(0, 0, pid, pid, 1_000 + pid),),
            -1,
            1_000 + pid,
            pid if open_txn_every and pid % open_txn_every == 0 else None,
        )
        for pid in range(1, count + 1)
    ]


def loaded(tmp_path: Path, entries: list[ProducerStateEntry]) -> ProducerStateManager:
    write_snapshot(tmp_path, 0, ProducerStateManager(entries))
    return read_state(tmp_path / f"{0:020d}.snapshot")


def test_entries_are_decoded_on_first_use_only(tmp_path: Path) -> None:
    manager = loaded(tmp_path, many(1000, open_txn_every=100))
    assert manager.decoded_entries() == []
    assert len(manager.entries) == 1000
    assert manager.first_unstable_offset() == 100  # open transactions known without decoding
    # a retry of a snapshot-held producer's batch is a duplicate, its next batch appends
    assert isinstance(manager.validate(header(7, 0, 1, 7)), Duplicate)
    decision = manager.validate(header(7, 1, 1, 2000))
    assert isinstance(decision, Append)
    manager.commit(decision.pending, 2000, 2000)
    assert [e.producer_id for e in manager.decoded_entries()] == [7]
    assert manager.entries[7].last_seq == 1 and len(manager.entries) == 1000
    assert dict(manager.entries) == {
        e.producer_id: e for e in many(1000, open_txn_every=100) if e.producer_id != 7
    } | {7: manager.entries[7]}


def test_the_next_snapshot_copies_the_old_entries_and_equals_a_full_encode(
    tmp_path: Path,
) -> None:
    manager = loaded(tmp_path, many(1000, open_txn_every=100))
    for pid in (3, 501, 999):  # used since the load
        decision = manager.validate(header(pid, 1, 1, 5000 + pid))
        assert isinstance(decision, Append)
        manager.commit(decision.pending, 5000 + pid, 5000 + pid)
    merged = encode_state(manager)  # before anything decodes the other entries
    fresh = ProducerStateManager(manager.entries.values())  # every entry decoded
    assert decode_snapshot(merged) == decode_snapshot(encode_snapshot(fresh.entries.values()))
    assert len(merged) > len(encode_snapshot(fresh.entries.values()))  # old entries kept
    tmp_path.joinpath(f"{9001:020d}.snapshot").write_bytes(merged)
    again = read_state(tmp_path / f"{9001:020d}.snapshot")
    assert dict(again.entries) == dict(fresh.entries)
    assert again.first_unstable_offset() == fresh.first_unstable_offset()


def test_a_mostly_stale_area_is_rewritten_whole(tmp_path: Path) -> None:
    manager = loaded(tmp_path, many(100))
    for pid in range(1, 80):
        decision = manager.validate(header(pid, 1, 1, 500 + pid))
        assert isinstance(decision, Append)
        manager.commit(decision.pending, 500 + pid, 500 + pid)
    assert encode_state(manager) == encode_snapshot(manager.entries.values())


def test_idle_snapshot_producers_expire(tmp_path: Path) -> None:
    manager = loaded(tmp_path, many(10))
    assert manager.remove_expired(1_100, 100) == []  # none idle long enough yet
    assert sorted(manager.remove_expired(1_005 + 200, 200)) == [1, 2, 3, 4, 5]
    assert len(manager.entries) == 5 and 3 not in manager.entries
    state = read_state(write_snapshot(tmp_path, 10, manager))
    assert sorted(state.entries) == [6, 7, 8, 9, 10]
