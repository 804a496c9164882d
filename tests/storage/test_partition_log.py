"""PartitionLog: append/read, rolls, index, reopen, crash recovery, retention, flush."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest

import oncelog.storage
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.record_batch import (
    Record,
    build_batch,
    crc_is_valid,
    decode_records,
    iter_stored_batches,
    parse_header,
    split_batches,
)
from oncelog.storage import LogConfig, PartitionLog
from oncelog.storage.checkpoint import read_checkpoint, write_checkpoint
from oncelog.storage.log import RECOVERY_POINT_FILE
from oncelog.storage.txn_index import AbortedTxn

from .failures import file_of

SMALL = LogConfig(segment_bytes=2000, index_interval_bytes=200)


def make(i: int, n: int = 2, ts: int | None = None) -> bytes:
    return build_batch(
        [Record(b"k", b"value-%d-%d" % (i, j)) for j in range(n)],
        timestamp_ms=1_000 + i if ts is None else ts,
    )


def append(log: PartitionLog, data: bytes, now_ms: int = 0, **kw: bool) -> int:
    [(header, view)] = split_batches(data)
    return log.append(view, header, now_ms, **kw).base_offset


def opened(path: Path, config: LogConfig = SMALL, clean: bool = True) -> PartitionLog:
    return PartitionLog.open(path, config, clean_shutdown=clean)


def offsets(data: bytes) -> list[int]:
    view = memoryview(data)
    return [
        r.offset
        for pos, h in iter_stored_batches(data)
        for r in decode_records(view[pos : pos + h.size])
    ]


def values(log: PartitionLog) -> list[bytes | None]:
    data = log.read(log.log_start_offset, 1 << 30)
    out = []
    for pos, h in iter_stored_batches(data):
        assert crc_is_valid(memoryview(data)[pos : pos + h.size])
        out += [r.value for r in decode_records(memoryview(data)[pos : pos + h.size])]
    return out


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "topic-0"


def test_public_names() -> None:
    assert set(oncelog.storage.__all__) == {
        "AppendResult",
        "LogConfig",
        "PartitionLog",
        "RecoveryReport",
        "SegmentInfo",
    }


def test_append_assigns_offsets_and_read_returns_them(path: Path) -> None:
    log = opened(path, clean=False)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    assert [append(log, make(i, n=3)) for i in range(4)] == [0, 3, 6, 9]
    assert log.log_end_offset == 12
    assert offsets(log.read(0, 1 << 20)) == list(range(12))
    assert offsets(log.read(4, 1 << 20)) == list(range(3, 12))  # whole batch holding 4
    assert log.read(12, 100) == b""
    for bad in (-1, 13):
        with pytest.raises(KafkaError) as info:
            log.read(bad, 100)
        assert info.value.code == ErrorCode.offset_out_of_range
    assert (path / "00000000000000000000.log").exists()
    assert (path / "00000000000000000000.index").exists()
    log.close()


def test_stored_batch_keeps_crc_and_gets_leader_epoch(path: Path) -> None:
    log = opened(path, clean=False)
    data = make(0)
    [(header, view)] = split_batches(data)
    log.append(view, header, 0, leader_epoch=5)
    stored = log.read(0, 1000)
    assert crc_is_valid(stored) and parse_header(stored).partition_leader_epoch == 5
    assert parse_header(stored).crc == header.crc
    log.close()


def test_log_append_time(path: Path) -> None:
    log = opened(path, clean=False)
    [(header, view)] = split_batches(make(0))
    result = log.append(view, header, 777_777, log_append_time=True)
    assert result.log_append_time_ms == 777_777
    assert {r.timestamp for r in decode_records(log.read(0, 1000))} == {777_777}
    assert log.max_timestamp() == (777_777, 0)
    log.close()


def test_max_message_bytes(path: Path) -> None:
    log = opened(path, LogConfig(max_message_bytes=100), clean=False)
    with pytest.raises(KafkaError) as info:
        append(log, make(0, n=10))
    assert info.value.code == ErrorCode.message_too_large
    log.close()


def test_read_max_bytes_and_one_whole_batch_rule(path: Path) -> None:
    log = opened(path, LogConfig(), clean=False)
    sizes = []
    for i in range(5):
        data = make(i)
        sizes.append(len(data))
        append(log, data)
    assert len(log.read(0, sizes[0] + sizes[1])) == sizes[0] + sizes[1]
    assert len(log.read(0, sizes[0] + sizes[1] - 1)) == sizes[0]
    assert len(log.read(0, 1)) == sizes[0]  # larger than max_bytes, still returned whole
    assert log.read(0, 1, min_one_batch=False) == b""
    log.close()


def test_read_max_offset_is_exclusive(path: Path) -> None:
    log = opened(path, clean=False)
    for i in range(5):
        append(log, make(i, n=2))  # batches [0,1] [2,3] [4,5] ...
    assert offsets(log.read(0, 1 << 20, max_offset=4)) == [0, 1, 2, 3]
    assert offsets(log.read(0, 1 << 20, max_offset=5)) == [0, 1, 2, 3]  # 5 is inside [4,5]
    assert log.read(4, 1 << 20, max_offset=4) == b""
    assert log.read(0, 1, max_offset=1) == b""  # not even the one-batch rule crosses it
    log.close()


def test_roll_by_size_and_reads_across_segments(path: Path) -> None:
    log = opened(path, clean=False)
    for i in range(60):
        append(log, make(i))
    infos = log.segments()
    assert len(infos) > 2
    assert all(s.size_bytes <= SMALL.segment_bytes for s in infos)
    assert [s.path.name for s in infos][1] == f"{infos[1].base_offset:020d}.log"
    assert sum(s.size_bytes for s in infos) == log.size_bytes()
    assert offsets(log.read(0, 1 << 20)) == list(range(120))
    for offset in range(0, 120, 7):  # index + scan finds every batch, in every segment
        assert offsets(log.read(offset, 1))[0] == offset - offset % 2
    log.close()


def test_roll_by_time(path: Path) -> None:
    log = opened(path, LogConfig(segment_ms=1000), clean=False)
    append(log, make(0), now_ms=10_000)
    append(log, make(1), now_ms=10_999)
    assert len(log.segments()) == 1
    append(log, make(2), now_ms=11_000)
    assert [s.base_offset for s in log.segments()] == [0, 4]
    log.maybe_roll(11_500)
    assert len(log.segments()) == 2
    log.maybe_roll(12_000)
    assert [s.base_offset for s in log.segments()] == [0, 4, 6]
    log.maybe_roll(99_000)  # an empty active segment never rolls
    assert len(log.segments()) == 3
    log.close()


def test_index_lookups_across_many_batches(path: Path) -> None:
    config = LogConfig(index_interval_bytes=64)
    log = opened(path, config, clean=False)
    for i in range(500):
        append(log, make(i, n=1))
    index_size = (path / "00000000000000000000.index").stat().st_size
    assert index_size > 8 * 100
    for offset in (0, 1, 63, 64, 250, 498, 499):
        assert offsets(log.read(offset, 1)) == [offset]
    log.close()
    log = opened(path, config)
    for offset in (0, 77, 499):
        assert offsets(log.read(offset, 1)) == [offset]
    log.close()


def test_reopen_clean(path: Path) -> None:
    log = opened(path, clean=False)
    for i in range(40):
        append(log, make(i))
    before = log.read(0, 1 << 20)
    log.close()
    log = opened(path)
    assert log.log_end_offset == 80 and log.recovery_point == 80
    assert log.read(0, 1 << 20) == before
    assert log.report.bytes_truncated == 0
    assert append(log, make(40)) == 80
    log.close()


def test_clean_open_rebuilds_a_corrupt_index(path: Path) -> None:
    log = opened(path, clean=False)
    for i in range(30):
        append(log, make(i))
    log.close()
    first_index = path / "00000000000000000000.index"
    first_index.write_bytes(b"\x00" * 13)
    log = opened(path)
    assert offsets(log.read(11, 1)) == [10, 11]
    log.close()
    assert first_index.stat().st_size % 8 == 0 and first_index.stat().st_size > 0


def _crashed_log(path: Path, batches: int = 40, config: LogConfig = SMALL) -> list[bytes]:
    """A log written without close(): as after kill -9 (page cache survives)."""
    log = opened(path, config, clean=False)
    for i in range(batches):
        append(log, make(i))
    data = [log.read(2 * i, 1) for i in range(batches)]
    for segment in log._segments:  # drop descriptors without flush or checkpoint
        segment.close()
    return data


@pytest.mark.parametrize("damage", ["garbage", "torn", "crc"])
def test_crash_recovery_truncates_at_first_bad_batch(
    path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    stored = _crashed_log(path)
    last = sorted(path.glob("*.log"))[-1]
    size = last.stat().st_size
    if damage == "garbage":
        with last.open("ab") as f:
            f.write(b"\x00\x00\x00\x07garbage-bytes-after-a-crash" * 3)
        kept = 40
    elif damage == "torn":
        os.truncate(last, size - 10)
        kept = 39
    else:  # flip a byte inside the last batch's records: CRC mismatch
        with last.open("r+b") as f:
            f.seek(size - 3)
            byte = f.read(1)
            f.seek(size - 3)
            f.write(bytes([byte[0] ^ 0x55]))
        kept = 39
    with caplog.at_level(logging.WARNING):
        log = opened(path, clean=False)
    assert log.report.bytes_truncated > 0 and "truncating" in caplog.text
    assert log.log_end_offset == 2 * kept
    assert log.read(0, 1 << 20) == b"".join(stored[:kept])
    assert append(log, make(99)) == 2 * kept
    log.close()
    log = opened(path)
    assert log.log_end_offset == 2 * kept + 2
    log.close()


def test_recovery_deletes_segments_after_a_cut(path: Path) -> None:
    stored = _crashed_log(path, config=LogConfig(segment_bytes=600))
    logs = sorted(path.glob("*.log"))
    assert len(logs) > 3
    with logs[1].open("r+b") as f:  # corrupt the second segment's second batch
        first_size = parse_header(f.read(61)).size
        f.seek(first_size + 40)
        f.write(b"\xff\xff")
    log = opened(path, LogConfig(segment_bytes=600), clean=False)
    assert len(log.segments()) == 2
    assert log.report.segments_deleted == len(logs) - 2
    assert log.read(0, 1 << 20) == b"".join(stored[: log.log_end_offset // 2])
    assert not any(p.exists() for p in logs[2:])
    log.close()


def test_unclean_open_skips_segments_below_the_recovery_point(path: Path) -> None:
    log = opened(path, clean=False)
    for i in range(40):
        append(log, make(i))
    log.flush()
    log.write_recovery_checkpoint()
    for segment in log._segments:
        segment.close()
    log = opened(path, clean=False)
    assert log.report.segments_recovered == 1 and log.log_end_offset == 80
    log.close()


def test_unclean_open_validates_only_what_follows_the_recovery_point(path: Path) -> None:
    big = LogConfig(segment_bytes=1 << 20, index_interval_bytes=200)
    log = opened(path, big, clean=False)
    for i in range(200):
        append(log, make(i))
    log.flush()
    log.write_recovery_checkpoint()  # offsets below 400 are durable
    for i in range(200, 210):
        append(log, make(i))
    stored = log.read(0, 1 << 30)
    for segment in log._segments:
        segment.close()
    with path.joinpath(f"{0:020d}.log").open("ab") as f:
        f.write(b"\x00\x00\x00\x07torn")  # and a torn batch at the end
    log = opened(path, big, clean=False)
    assert log.report.segments_recovered == 1
    assert log.report.batches_scanned <= 10 + 5, "the durable prefix is not scanned again"
    assert log.report.bytes_truncated > 0 and log.log_end_offset == 420
    assert log.read(0, 1 << 30) == stored
    assert log._segments[0].max_timestamp()[0] == 1_209  # from the whole segment
    assert append(log, make(999)) == 420
    log.close()
    log = opened(path, big)
    assert log.log_end_offset == 422 and log.read(398, 4)
    log.close()


def test_a_damaged_batch_at_the_trusted_position_means_validating_the_whole_segment(
    path: Path,
) -> None:
    big = LogConfig(segment_bytes=1 << 20, index_interval_bytes=200)
    log = opened(path, big, clean=False)
    for i in range(200):
        append(log, make(i))
    log.flush()
    log.write_recovery_checkpoint()
    trusted = log._segments[0].index.lookup(log.recovery_point - 1)
    assert trusted > 0
    for segment in log._segments:
        segment.close()
    with path.joinpath(f"{0:020d}.log").open("r+b") as f:  # "durable" yet damaged
        f.seek(trusted + 70)
        f.write(b"\xff\xff")
    log = opened(path, big, clean=False)
    assert log.report.batches_scanned > 100, "the segment was validated from its start"
    assert log.log_end_offset < 400 and log.read(0, 1 << 30)
    log.close()


def _truncated_then_damaged(path: Path, config: LogConfig) -> tuple[PartitionLog, int]:
    """400 offsets fsynced and checkpointed, the log cut at 200, 100 new batches appended
    and not fsynced, one of them lost to the crash (zeros where it was). Returns the log
    (its files closed, as a crash leaves them) and the damaged batch's position."""
    log = opened(path, config, clean=False)
    for i in range(200):
        append(log, make(i))
    log.flush()
    log.write_recovery_checkpoint()
    log.truncate_to(200)
    for i in range(300, 400):
        append(log, make(i))
    segment = log._segments[0]
    damaged = segment.find_position(250)
    assert damaged is not None
    for s in log._segments:
        s.close()
    with path.joinpath(f"{0:020d}.log").open("r+b") as f:
        f.seek(damaged)
        f.write(bytes(40))
    return log, damaged


def test_a_truncation_lowers_the_persisted_recovery_point(path: Path) -> None:
    """Otherwise the stale checkpoint (400) makes recovery trust the batches appended after
    the cut, unfsynced: a batch the crash destroyed would be served."""
    big = LogConfig(segment_bytes=1 << 20, index_interval_bytes=200)
    _truncated_then_damaged(path, big)
    log = opened(path, big, clean=False)
    assert log.log_end_offset == 250, "cut at the destroyed batch"
    assert values(log) == [
        b"value-%d-%d" % (i, j) for i in [*range(100), *range(300, 325)] for j in (0, 1)
    ]
    log.close()


def test_without_the_lowered_checkpoint_recovery_serves_a_destroyed_batch(path: Path) -> None:
    """The anomaly the previous test guards against: the checkpoint put back to 400."""
    big = LogConfig(segment_bytes=1 << 20, index_interval_bytes=200)
    _truncated_then_damaged(path, big)
    path.joinpath("recovery-point").write_text("0\n400\n")
    log = opened(path, big, clean=False)
    assert log.log_end_offset == 400, "nothing cut"
    assert len(values(log)) == 250, "yet what it serves stops at the destroyed batch"
    log.close()


def test_retention_by_time(path: Path) -> None:
    log = opened(path, LogConfig(segment_bytes=600, retention_ms=10_000), clean=False)
    for i in range(30):
        append(log, make(i, ts=i * 1_000))
    bases = [s.base_offset for s in log.segments()]
    assert len(bases) > 3
    assert log.apply_retention(now_ms=5_000) == 0
    deleted = log.apply_retention(now_ms=25_000)  # timestamps < 15_000 expire
    assert deleted > 0
    assert log.log_start_offset == bases[deleted]
    for segment in log.segments()[:-1]:
        assert log.read(segment.base_offset, 1 << 20)
    with pytest.raises(KafkaError):
        log.read(0, 100)
    remaining = len(log.segments())
    assert log.apply_retention(now_ms=10**12) == remaining - 1
    assert len(log.segments()) == 1  # the active segment is never deleted
    start = log.log_start_offset
    assert start == log.segments()[0].base_offset and log.log_end_offset == 60
    log.close()
    assert opened(path).log_start_offset == start


def test_retention_by_bytes(path: Path) -> None:
    config = LogConfig(segment_bytes=600, retention_ms=-1, retention_bytes=1500)
    log = opened(path, config, clean=False)
    for i in range(30):
        append(log, make(i, ts=0))
    assert log.apply_retention(now_ms=10**12) > 0
    assert log.size_bytes() <= 1500 + 600
    assert log.size_bytes() - log.segments()[0].size_bytes < 1500 <= log.size_bytes()
    assert values(log)[-1] == b"value-29-1"
    log.close()


def test_offset_for_timestamp_and_max_timestamp(path: Path) -> None:
    log = opened(path, clean=False)
    for i in range(20):  # batch i holds offsets 2i (ts 100i) and 2i+1 (ts 100i+50)
        data = build_batch(
            [
                Record(None, b"a", timestamp_ms=100 * i),
                Record(None, b"b", timestamp_ms=100 * i + 50),
            ],
            timestamp_ms=0,
        )
        append(log, data)
    assert log.offset_for_timestamp(0) == (0, 0)
    assert log.offset_for_timestamp(501) == (11, 550)
    assert log.offset_for_timestamp(550) == (11, 550)
    assert log.offset_for_timestamp(551) == (12, 600)
    assert log.offset_for_timestamp(10**9) is None
    assert log.max_timestamp() == (1950, 39)
    log.close()
    assert opened(path / "empty").max_timestamp() == (-1, -1)


def test_truncate_to(path: Path) -> None:
    log = opened(path, clean=False)
    for i in range(40):
        append(log, make(i))
    log.truncate_to(31)  # inside batch [30, 31]: the whole batch goes
    assert log.log_end_offset == 30 and log.recovery_point <= 30
    assert offsets(log.read(0, 1 << 20)) == list(range(30))
    assert append(log, make(50)) == 30
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    assert append(log, make(51)) == 0
    log.close()


def test_scan_headers(path: Path) -> None:
    log = opened(path, clean=False)
    for i in range(30):
        append(log, make(i))
    headers = list(log.scan_headers(21))
    assert [h.base_offset for _, h in headers] == list(range(20, 60, 2))
    assert all(base <= h.base_offset for base, h in headers)
    log.close()


def test_delete_removes_the_directory(path: Path) -> None:
    log = opened(path, clean=False)
    append(log, make(0))
    log.delete()
    assert not path.exists()


def test_a_cut_log_keeps_its_earlier_aborted_transactions_and_fsyncs_the_cut_index(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cutting the log drops the aborted-transaction entries whose marker it removed and
    keeps the others, on disk too; the next flush fsyncs the cut index (an entry lost in a
    crash would make an aborted transaction read as committed)."""
    synced: list[list[str]] = []
    real = oncelog.storage.log.fsync_together

    def recording(fds: list[int]) -> None:
        synced.append(sorted(Path(file_of(fd)).suffix for fd in fds))
        real(fds)

    monkeypatch.setattr(oncelog.storage.log, "fsync_together", recording)
    log = opened(path, clean=False)
    for i in range(6):
        append(log, make(i))  # offsets 0-11
    entries = [AbortedTxn(7, first, first + 1, first + 2) for first in (0, 4, 8)]
    for entry in entries:
        log.append_aborted_txn(entry)
    log.flush()
    synced.clear()
    log.truncate_to(6)
    log.flush()
    index_cut, cut = synced  # the lowered checkpoint fsyncs the cut offset index first
    assert index_cut == [".index"] and {".log", ".txnindex"} <= set(cut)
    assert log.aborted_txns(0, 100) == entries[:2]
    log.close()
    reopened = opened(path)
    assert reopened.aborted_txns(0, 100) == entries[:2]
    reopened.close()


def test_flush_from_a_thread_while_appending(path: Path) -> None:
    log = opened(path, LogConfig(segment_bytes=200_000), clean=False)
    stop = threading.Event()
    points: list[int] = []
    errors: list[BaseException] = []

    def flusher() -> None:
        try:
            while not stop.is_set():
                points.append(log.flush())
        except BaseException as exc:  # surfaced to the main thread below
            errors.append(exc)

    thread = threading.Thread(target=flusher)
    thread.start()
    try:
        for i in range(10_000):
            assert append(log, make(i, n=1)) == i
            if i % 2500 == 0:
                assert log.flush() == i + 1  # waits for the thread's fsync, then its own
    finally:
        stop.set()
        thread.join()
    assert not errors
    assert points == sorted(points) and len(points) > 1
    assert log.flush() == 10_000
    for segment in log._segments:  # crash: no close(), no checkpoint
        segment.close()
    log = opened(path, clean=False)
    assert log.log_end_offset == 10_000 and log.report.bytes_truncated == 0
    assert values(log) == [b"value-%d-0" % i for i in range(10_000)]
    log.close()


def test_a_checkpoint_written_from_a_thread_during_close_does_not_collide_with_it(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The periodic checkpoint runs in a worker thread; the broker's stop closes the log,
    which writes the same checkpoint. Two writers of one temporary file: the second
    rename finds it gone (FileNotFoundError at broker stop, seen in CI)."""
    log = opened(path)
    append(log, make(0))
    log.flush()
    real_replace = os.replace
    renaming, other_renamed = threading.Event(), threading.Event()

    def replace(src: str | Path, dst: str | Path) -> None:
        if Path(dst).parent != path:  # another log's (a broker running in this process)
            real_replace(src, dst)
            return
        if threading.current_thread() is writer:
            renaming.set()
            other_renamed.wait(1.0)  # long enough for close() to write, unless it must wait
        else:
            other_renamed.set()
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    errors: list[BaseException] = []

    def checkpoint() -> None:
        try:
            log.write_recovery_checkpoint()
        except BaseException as exc:  # surfaced to the main thread below
            errors.append(exc)

    writer = threading.Thread(target=checkpoint)
    writer.start()
    assert renaming.wait(10)
    log.close()
    writer.join(10)
    assert errors == []
    assert read_checkpoint(path / RECOVERY_POINT_FILE) == 2


def test_a_checkpoint_after_close_or_delete_writes_nothing(path: Path) -> None:
    log = opened(path)
    append(log, make(0))
    log.close()
    write_checkpoint(path / RECOVERY_POINT_FILE, 0)  # stands in for any later value
    log.write_recovery_checkpoint()
    assert read_checkpoint(path / RECOVERY_POINT_FILE) == 0
    log = opened(path)
    log.delete()
    log.write_recovery_checkpoint()  # the directory is gone: nothing to write, no error
    assert not path.exists()


def _write_half_then_fail(monkeypatch: pytest.MonkeyPatch, error: int = 28) -> None:
    """The next os.write writes half its bytes, the one after raises (a disk filling up);
    later writes are real again."""
    real_write = os.write

    def fail(fd: int, data: object) -> int:
        monkeypatch.setattr(os, "write", real_write)
        raise OSError(error, os.strerror(error))

    def write_half(fd: int, data: bytes | memoryview) -> int:
        monkeypatch.setattr(os, "write", fail)
        view = memoryview(data)
        return real_write(fd, view[: len(view) // 2])

    monkeypatch.setattr(os, "write", write_half)


def test_a_write_that_fails_part_way_is_cut_off(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC after half a batch: the append fails, the torn half is removed, and the next
    batch lands where the log says it is. Without the cut, the O_APPEND descriptor puts it
    after the torn bytes: reads at its recorded position and recovery both break."""
    log = opened(path)
    append(log, make(0))
    _write_half_then_fail(monkeypatch)
    with pytest.raises(OSError):
        append(log, make(1))
    assert append(log, make(2)) == 2
    assert values(log) == [b"value-0-0", b"value-0-1", b"value-2-0", b"value-2-1"]
    log.close()
    reopened = opened(path, clean=False)
    assert values(reopened) == [b"value-0-0", b"value-0-1", b"value-2-0", b"value-2-1"]
    reopened.close()


def test_a_torn_write_that_cannot_be_cut_stops_the_log(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the cut fails too, the log goes offline as after a failed fsync: no later batch
    (nor a roll) may follow the tear, and the broker's stop must leave the next start to
    recover it (``failed``: no clean-shutdown marker), which trims the tear."""
    log = opened(path)
    append(log, make(0))
    _write_half_then_fail(monkeypatch, error=5)

    def cannot_cut(fd: int, length: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "ftruncate", cannot_cut)
    with pytest.raises(OSError):
        append(log, make(1))
    assert log.failed
    with pytest.raises(KafkaError, match="torn") as refused:
        append(log, make(2))
    assert refused.value.code == ErrorCode.kafka_storage_error
    log.maybe_roll(10**12)
    assert log.log_end_offset == 2
    monkeypatch.undo()
    log.close()
    reopened = opened(path, clean=False)
    assert values(reopened) == [b"value-0-0", b"value-0-1"]
    reopened.close()


def test_a_batch_whose_index_entry_fails_is_taken_back(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The data written, then its offset index entry fails (ENOSPC): the batch is cut off
    again. Left in the file with the segment's next offset unmoved, the next batch got the
    same offsets, and a reader found both (offsets 0, 1, 2, 3, 2, 3)."""
    log = opened(path, config=LogConfig(index_interval_bytes=1))  # an entry per batch
    append(log, make(0))
    append(log, make(1))  # the interval is passed: the next batch writes an index entry
    real_write = os.write
    index_fd = [-1]

    def failing_index_write(fd: int, data: bytes | memoryview) -> int:
        if Path(file_of(fd)).suffix == ".index":
            index_fd[0] = fd
            monkeypatch.setattr(os, "write", real_write)
            raise OSError(28, os.strerror(28))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", failing_index_write)
    with pytest.raises(OSError):
        append(log, make(2))
    assert index_fd[0] != -1, "no index entry was written"
    assert append(log, make(3)) == 4
    expected = [0, 1, 2, 3, 4, 5]  # batches 0, 1 and 3, two records each
    assert offsets(log.read(0, 1 << 30)) == expected
    assert values(log)[-2:] == [b"value-3-0", b"value-3-1"]
    log.close()
    reopened = opened(path, config=LogConfig(index_interval_bytes=1), clean=False)
    assert offsets(reopened.read(0, 1 << 30)) == expected
    reopened.close()


def test_an_index_entry_written_in_part_takes_its_batch_back(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk may take half of an 8-byte index entry. Unnoticed, two such entries
    left the file a whole number of entries again but shifted by half of one: a clean
    start loaded it (positions and offsets both still rise) and looked batches up at
    positions that were relative offsets. A short write fails like ENOSPC: the batch is
    taken back and the file stays whole entries."""
    config = LogConfig(index_interval_bytes=1)  # an entry per batch
    log = opened(path, config=config)
    append(log, make(0))
    real_write = os.write
    halves = [0]

    def half_an_index_entry(fd: int, data: bytes | memoryview) -> int:
        if halves[0] < 2 and Path(file_of(fd)).suffix == ".index":
            halves[0] += 1
            return real_write(fd, memoryview(data)[: len(data) // 2])
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", half_an_index_entry)
    kept = [0, 1]  # batch 0's two records
    for i in range(1, 8):
        try:
            first = append(log, make(i))
        except OSError:
            continue
        kept += [first, first + 1]
    monkeypatch.undo()
    assert halves[0] == 2
    assert offsets(log.read(0, 1 << 30)) == kept
    log.close()
    assert (path / f"{0:020d}.index").stat().st_size % 8 == 0
    reopened = opened(path, config=config)  # a clean start: the index file is loaded
    for offset in kept:
        assert offsets(reopened.read(offset, 1 << 30))[0] <= offset, f"read at {offset}"
    assert offsets(reopened.read(0, 1 << 30)) == kept
    reopened.close()
