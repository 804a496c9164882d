"""The cleaning pass and the segment swap on real files: crashes at every step of the
swap, a key map too small for one pass, aborts, swaps refused when the log changed,
codecs kept, and when a log is due for cleaning."""

from __future__ import annotations

import asyncio
import pathlib
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import oncelog.storage.log as log_module
from oncelog.broker.config import BrokerConfig
from oncelog.broker.log_cleaner import (
    CHECKPOINT_FILE,
    LogCleaner,
    clean_now,
    cleaning_job,
    find_cleanable,
)
from oncelog.broker.partition import Partition, PartitionSettings
from oncelog.producers.state import ProducerStateManager
from oncelog.protocol.record_batch import (
    COMPRESSION_GZIP,
    Record,
    assign_offsets,
    build_batch,
    crc_is_valid,
    decode_records,
    iter_stored_batches,
    parse_header,
    split_batches,
)
from oncelog.protocol.record_rewrite import empty_batch, read_raw_records, retained_batch
from oncelog.storage import LogConfig, PartitionLog
from oncelog.storage.checkpoint import read_checkpoint
from oncelog.storage.cleaner import CleaningAborted, clean
from oncelog.storage.compaction import SegmentStats, cleanable_range, group_segments

from .failures import fail_with_one_fsync

SETTINGS = PartitionSettings(
    max_message_bytes=1 << 20,
    log_append_time=False,
    flush_messages=1,
    flush_ms=1 << 62,
    records=None,
)
CONFIG = LogConfig(
    segment_bytes=1 << 20, segment_ms=10, index_interval_bytes=64, compact=True, delete=False
)
BIG_MAP = 1 << 24
_open_logs: list[PartitionLog] = []  # the logs the running test opened


@pytest.fixture(autouse=True)
def logs_closed() -> Iterator[None]:
    """Every log a test opens is closed after it: a written log left open kept its written
    files in the process's file cache, crowding it for the tests after (isolation.py)."""
    yield
    while _open_logs:
        _open_logs.pop().close()


def open_partition(directory: Path, *, clean_shutdown: bool = True) -> Partition:
    partition_log = PartitionLog.open(directory, CONFIG, clean_shutdown=clean_shutdown)
    _open_logs.append(partition_log)
    return Partition(
        directory.name.rsplit("-", 1)[0], 0, partition_log, ProducerStateManager(), SETTINGS
    )


def write(partition: Partition, now: int, *records: tuple[bytes | None, bytes | None]) -> None:
    batch = build_batch([Record(k, v) for k, v in records], timestamp_ms=now)
    [(header, view)] = split_batches(batch)
    partition.append_client_batch(view, header, now)


def roll(partition: Partition, now: int) -> None:
    partition.log.maybe_roll(now)


def contents(partition_log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record the log returns from its start, in order, CRCs checked."""
    data = partition_log.read(partition_log.log_start_offset, 1 << 30)
    out = []
    for pos, header in iter_stored_batches(data):
        batch = memoryview(data)[pos : pos + header.size]
        assert crc_is_valid(batch)
        out += [(r.offset, r.key, r.value) for r in decode_records(batch)]
    return out


def history(directory: Path, segments: int = 4, per_segment: int = 30) -> Partition:
    """Keys a..e overwritten again and again over several segments, a few tombstones."""
    partition = open_partition(directory)
    now = 0
    for s in range(segments):
        for i in range(per_segment):
            key = b"abcde"[i % 5 : i % 5 + 1]
            value = None if (i + s) % 11 == 0 else b"%d-%d" % (s, i)
            write(partition, now, (key, value))
        now += 20
        roll(partition, now)
    return partition


def crash(partition: Partition) -> None:
    """Close the log's descriptors as the process's death closes them: nothing flushed or
    checkpointed."""
    _open_logs.remove(partition.log)
    for segment in partition.log._segments:
        segment.close()


def latest(records: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes, bytes | None]:
    view: dict[bytes, bytes | None] = {}
    for _, key, value in records:
        assert key is not None
        view[key] = value
    return view


# --- the swap, interrupted at every step ------------------------------------------------


class SimulatedCrash(Exception):
    pass


class CrashAfter:
    """Lets ``steps`` renames and directory fsyncs happen, then raises: the files are left
    as a crash at that moment would leave them."""

    def __init__(self, steps: int, monkeypatch: pytest.MonkeyPatch) -> None:
        self.steps = steps
        self.calls = 0
        real_rename, real_fsync = pathlib.Path.rename, log_module.fsync_directory
        monkeypatch.setattr(
            pathlib.Path, "rename", lambda path, target: self.step(real_rename, path, target)
        )
        monkeypatch.setattr(log_module, "fsync_directory", lambda d: self.step(real_fsync, d))

    def step(self, real, *args):
        self.calls += 1
        if self.calls > self.steps:
            raise SimulatedCrash()
        return real(*args)


def test_a_crash_at_any_step_of_the_swap_leaves_the_old_or_the_new_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each rename and directory fsync of replace_segments may be the last thing that
    happened: reopening (as after a crash) must give exactly the log before the pass or
    exactly the log after it, never a mix, and both read the same latest values."""
    original = tmp_path / "original"
    partition = history(original / "t-0")
    before = contents(partition.log)
    partition.log.close()

    reference = tmp_path / "reference"
    shutil.copytree(original, reference)
    done = open_partition(reference / "t-0")
    assert clean_now(done, 1_000, BIG_MAP) is not None
    after = contents(done.log)
    done.log.close()
    assert len(after) < len(before) and latest(after) == latest(before)

    outcomes = []
    for steps in range(100):
        trial = tmp_path / f"trial-{steps}"
        shutil.copytree(original, trial)
        partition = open_partition(trial / "t-0")
        CrashAfter(steps, monkeypatch)
        try:
            clean_now(partition, 1_000, BIG_MAP)
            finished = True
        except SimulatedCrash:
            finished = False
        finally:
            monkeypatch.undo()
        crash(partition)
        reopened = open_partition(trial / "t-0", clean_shutdown=False)
        got = contents(reopened.log)
        assert got in (before, after), f"a crash after {steps} steps left a mixed log"
        outcomes.append(got == after)
        leftovers = [
            p.name
            for p in (trial / "t-0").iterdir()
            if p.suffix in (".swap", ".cleaned", ".deleted")
        ]
        assert not leftovers
        reopened.log.close()
        if finished:
            break
    assert finished and outcomes[0] is False and outcomes[-1] is True and len(outcomes) > 6


# --- passes -----------------------------------------------------------------------------


def test_a_small_key_map_cleans_over_several_passes_to_the_same_result(tmp_path: Path) -> None:
    big = history(tmp_path / "big" / "t-0")
    small = history(tmp_path / "small" / "t-0")
    assert clean_now(big, 1_000, BIG_MAP) is not None
    passes = 0
    while clean_now(small, 1_000, 1) is not None:  # room for one batch per pass
        passes += 1
        assert passes < 200
    assert passes > 3
    assert latest(contents(small.log)) == latest(contents(big.log))


def test_an_aborted_pass_leaves_no_files_and_changes_nothing(tmp_path: Path) -> None:
    partition = history(tmp_path / "t-0")
    before = contents(partition.log)
    found = find_cleanable(partition, 1_000)
    job = cleaning_job(partition, found, 1_000, BIG_MAP)
    stop = threading.Event()
    stop.set()
    with pytest.raises(CleaningAborted):
        clean(job, stop)
    job.close()
    assert not list((tmp_path / "t-0").glob("*.cleaned"))
    assert contents(partition.log) == before


def test_the_swap_is_refused_when_retention_removed_a_segment_meanwhile(tmp_path: Path) -> None:
    partition = history(tmp_path / "t-0")
    found = find_cleanable(partition, 1_000)
    job = cleaning_job(partition, found, 1_000, BIG_MAP)
    result = clean(job, threading.Event())
    job.close()
    partition.log.advance_log_start(partition.log.segments()[1].base_offset)  # one segment gone
    before = contents(partition.log)
    assert not partition.log.replace_segments(result.groups)
    result.discard()
    assert contents(partition.log) == before
    assert not list((tmp_path / "t-0").glob("*.cleaned"))


def live_files(directory: Path) -> list[str]:
    """The log's own files (not a pass's ``.cleaned`` output)."""
    return sorted(p.name for p in directory.iterdir() if p.suffix != ".cleaned")


def test_the_swap_is_refused_when_the_log_failed_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    partition = history(tmp_path / "t-0")
    found = find_cleanable(partition, 1_000)
    job = cleaning_job(partition, found, 1_000, BIG_MAP)
    result = clean(job, threading.Event())
    job.close()
    fail_with_one_fsync(partition.log)
    before = (contents(partition.log), live_files(tmp_path / "t-0"))
    assert not partition.log.replace_segments(result.groups)
    result.discard()
    after = (contents(partition.log), live_files(tmp_path / "t-0"))
    assert after == before


def test_a_failed_log_is_passed_over_and_the_others_are_cleaned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failed log is as dirty as the healthy one and comes first: were it a candidate,
    every pass would pick it (and have its swap refused) and the other would never be cleaned."""
    failed, healthy = history(tmp_path / "failed-0"), history(tmp_path / "healthy-0")
    fail_with_one_fsync(failed.log)
    failed_before = contents(failed.log)

    class Hosted:
        def partitions(self) -> list[Partition]:
            return [failed, healthy]

    cleaner = LogCleaner(Hosted(), BrokerConfig(), clock_ms=lambda: 1_000)
    assert asyncio.run(cleaner.clean_filthiest())
    assert cleaner.status.last_pass_partition == "healthy-0"
    assert list(cleaner.status.dirty_ratios) == ["healthy-0"]
    assert contents(failed.log) == failed_before
    assert not list((tmp_path / "failed-0").glob("*.cleaned"))
    assert len(contents(healthy.log)) < len(contents(failed.log))


def test_the_cleaned_log_survives_a_clean_restart(tmp_path: Path) -> None:
    partition = history(tmp_path / "t-0")
    assert clean_now(partition, 1_000, BIG_MAP) is not None
    after = contents(partition.log)
    end = partition.log.log_end_offset
    partition.log.close()
    reopened = open_partition(tmp_path / "t-0")
    assert contents(reopened.log) == after and reopened.log.log_end_offset == end
    # every offset still reads: a gap answers with the next batch
    for offset in range(reopened.log.log_start_offset, end):
        assert reopened.log.read(offset, 1 << 20)


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_every_codec_is_compacted_and_keeps_its_codec(tmp_path: Path, codec: int) -> None:
    partition = open_partition(tmp_path / "t-0")
    for round_no in range(3):
        batch = build_batch(
            [Record(b"k%d" % i, b"v%d-%d" % (round_no, i)) for i in range(20)],
            timestamp_ms=round_no,
            compression=codec,
        )
        [(header, view)] = split_batches(batch)
        partition.append_client_batch(view, header, round_no)
        roll(partition, 20 * (round_no + 1))
    assert clean_now(partition, 1_000, BIG_MAP) is not None
    data = partition.log.read(0, 1 << 20)
    codecs = {h.compression for _, h in iter_stored_batches(data)}
    assert codecs == {codec}
    assert [(k, v) for _, k, v in contents(partition.log)] == [
        (b"k%d" % i, b"v2-%d" % i) for i in range(20)
    ]


def test_a_compressed_batch_keeps_its_codec_when_rewritten() -> None:
    built = build_batch(
        [Record(b"a", b"1"), Record(b"b", None), Record(b"a", b"2")],
        base_offset=10,
        producer_id=7,
        producer_epoch=3,
        base_sequence=40,
        timestamp_ms=5_000,
    )
    plain = bytes(assign_offsets(built, 10, leader_epoch=6))  # as the log stored it
    gzip_header = parse_header(plain)._replace(attributes=COMPRESSION_GZIP)
    batch = retained_batch(gzip_header, read_raw_records(plain), delete_horizon_ms=None)
    assert decode_records(batch) == decode_records(plain)
    header = parse_header(batch)
    records = read_raw_records(batch)
    rewritten = retained_batch(header, records[1:], delete_horizon_ms=9_000)
    new = parse_header(rewritten)
    assert crc_is_valid(rewritten) and new.compression == COMPRESSION_GZIP
    assert (new.base_offset, new.last_offset, new.base_sequence, new.producer_id) == (
        10,
        12,
        40,
        7,
    )
    assert new.last_sequence == header.last_sequence and new.record_count == 2
    assert (new.partition_leader_epoch, new.producer_epoch) == (6, 3)
    emptied = parse_header(empty_batch(new))
    assert crc_is_valid(empty_batch(new)) and emptied.record_count == 0
    assert (emptied.partition_leader_epoch, emptied.last_offset, emptied.last_sequence) == (
        6,
        12,
        new.last_sequence,
    )
    assert [(r.offset, r.key, r.value, r.timestamp) for r in decode_records(rewritten)] == [
        (11, b"b", None, 5_000),
        (12, b"a", b"2", 5_000),
    ]


# --- when a log is due ------------------------------------------------------------------


def stats(*segments: tuple[int, int, int]) -> list[SegmentStats]:
    """(base, size, max timestamp) per segment; first batch timestamps = max - 10."""
    return [SegmentStats(b, size, ts, ts - 10 if ts > 0 else None) for b, size, ts in segments]


SEGMENTS = stats((0, 100, 1_000), (10, 100, 2_000), (20, 100, 3_000), (30, 50, 4_000))


def due(**overrides: int | None):
    args: dict[str, int | None] = {
        "log_start_offset": 0,
        "log_end_offset": 35,
        "last_stable_offset": 35,
        "checkpoint": None,
        "now_ms": 5_000,
        "min_compaction_lag_ms": 0,
        "max_compaction_lag_ms": 1 << 62,
    }
    args.update(overrides)
    return cleanable_range(SEGMENTS, **args)  # type: ignore[arg-type]


def test_never_past_the_active_segment_nor_the_segment_of_the_lso() -> None:
    assert due().first_uncleanable_offset == 30  # the active segment
    assert due(last_stable_offset=15).first_uncleanable_offset == 10  # its segment's base
    assert due(last_stable_offset=20).first_uncleanable_offset == 20


def test_dirty_ratio_counts_from_the_checkpoint() -> None:
    fresh = due()
    assert (fresh.clean_bytes, fresh.cleanable_bytes) == (0, 300)
    assert fresh.dirty_ratio == 1.0 and fresh.should_clean(0.5)
    later = due(checkpoint=20)
    assert (later.clean_bytes, later.cleanable_bytes) == (200, 100)
    assert not later.should_clean(0.5) and later.should_clean(0.3)
    assert due(checkpoint=30).cleanable_bytes == 0


def test_a_checkpoint_outside_the_log_is_reset() -> None:
    found = due(checkpoint=99)
    assert found.checkpoint_was_reset and found.first_dirty_offset == 0


def test_min_compaction_lag_holds_back_young_segments() -> None:
    assert due(min_compaction_lag_ms=3_500).first_uncleanable_offset == 10  # 2000 > 1500
    assert due(min_compaction_lag_ms=1_000).first_uncleanable_offset == 30


def test_max_compaction_lag_makes_a_log_overdue_whatever_its_ratio() -> None:
    found = due(checkpoint=20, max_compaction_lag_ms=1_000)
    assert found.overdue_ms > 0 and found.should_clean(0.99)
    assert due(checkpoint=20, max_compaction_lag_ms=10_000).overdue_ms == 0


def test_groups_stay_within_segment_bytes() -> None:
    groups = group_segments(SEGMENTS, 250, 30)
    assert [[s.base_offset for s in g] for g in groups] == [[0, 10], [20]]
    assert len(group_segments(SEGMENTS, 1 << 20, 30)) == 1


# --- a follower's truncation -------------------------------------------------------------


def test_a_truncated_follower_cleans_again_from_the_cut_not_from_its_start(
    tmp_path: Path,
) -> None:
    partition = history(tmp_path / "t-0")

    class Hosted:
        def partitions(self) -> list[Partition]:
            return [partition]

    cleaner = LogCleaner(Hosted(), BrokerConfig(), clock_ms=lambda: 1_000)
    assert asyncio.run(cleaner.clean_filthiest())
    cleaned_to = read_checkpoint(tmp_path / "t-0" / CHECKPOINT_FILE)
    assert cleaned_to is not None and cleaned_to > 60
    cleaner.truncated(partition, 60)  # what the replica manager calls before the cut
    partition.truncate_to(60, 1_000, 86_400_000)
    assert read_checkpoint(tmp_path / "t-0" / CHECKPOINT_FILE) == 60
    found = find_cleanable(partition, 1_000)
    assert found.first_dirty_offset == 60 and not found.checkpoint_was_reset
