"""The leader-epoch cache: Kafka's LeaderEpochFileCache rules and its checkpoint file."""

from __future__ import annotations

from pathlib import Path

from oncelog.storage.leader_epoch import (
    CHECKPOINT_FILE,
    UNDEFINED_EPOCH,
    UNDEFINED_OFFSET,
    EpochEntry,
    LeaderEpochCache,
)


def cache(tmp_path: Path, *entries: tuple[int, int]) -> LeaderEpochCache:
    c = LeaderEpochCache(tmp_path / CHECKPOINT_FILE)
    for epoch, start in entries:
        c.assign(epoch, start)
    return c


def test_end_offsets_as_offsets_for_leader_epoch_answers(tmp_path: Path) -> None:
    c = cache(tmp_path, (1, 0), (3, 10), (6, 25))
    assert c.end_offset_for(6, log_end_offset=40) == (6, 40)  # the latest: the log end
    assert c.end_offset_for(3, 40) == (3, 25)
    assert c.end_offset_for(4, 40) == (3, 25)  # unknown epoch: the largest below it
    assert c.end_offset_for(0, 40) == (0, 0)  # below every entry: the first start offset
    assert c.end_offset_for(7, 40) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
    assert c.end_offset_for(UNDEFINED_EPOCH, 40) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)


def test_assign_keeps_epochs_and_offsets_increasing(tmp_path: Path) -> None:
    c = cache(tmp_path, (1, 0), (3, 10))
    c.assign(3, 12)  # same epoch, later offset: nothing new
    assert c.entries == (EpochEntry(1, 0), EpochEntry(3, 10))
    c.assign(2, 5)  # an older epoch after a truncation: newer entries go
    assert c.entries == (EpochEntry(1, 0), EpochEntry(2, 5))


def test_truncation_from_both_ends(tmp_path: Path) -> None:
    c = cache(tmp_path, (1, 0), (3, 10), (6, 25))
    c.truncate_from_end(25)
    assert c.entries == (EpochEntry(1, 0), EpochEntry(3, 10))
    c.truncate_from_start(12)
    assert c.entries == (EpochEntry(3, 12),)
    c.truncate_from_start(12)
    assert c.entries == (EpochEntry(3, 12),)


def test_checkpoint_round_trip_and_fit_to_the_log(tmp_path: Path) -> None:
    cache(tmp_path, (1, 0), (3, 10), (6, 25))
    assert (tmp_path / CHECKPOINT_FILE).read_text() == "0\n3\n1 0\n3 10\n6 25\n"
    # A crash cut the log at 20: epoch 6's entry describes batches that are gone.
    loaded = LeaderEpochCache.load(tmp_path, log_start_offset=0, log_end_offset=20)
    assert loaded.entries == (EpochEntry(1, 0), EpochEntry(3, 10))
    assert (tmp_path / CHECKPOINT_FILE).read_text() == "0\n2\n1 0\n3 10\n"


def test_malformed_checkpoint_is_ignored(tmp_path: Path) -> None:
    (tmp_path / CHECKPOINT_FILE).write_text("0\n5\n1 0\n")
    assert LeaderEpochCache.load(tmp_path, 0, 10).entries == ()
