"""An acknowledged append waits for the fsync of its ``.log`` file only; the offset index is
fsynced before the recovery-point checkpoint that makes recovery trust it (issue 12).

A crash may therefore leave an index whose entries past the checkpointed recovery point are
lost, torn or garbled: recovery rebuilds them from the log (those tests pass on main too:
they test recovery's trust rule, with a control). What must never happen is a checkpoint
written ahead of the index fsync: recovery would then trust entries the crash may have
garbled (the control shows what that serves); the order is tested with ``recording``.
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

import oncelog.storage.log as log_module
from oncelog.protocol.record_batch import Record, build_batch, decode_records, split_batches
from oncelog.storage import LogConfig, PartitionLog
from oncelog.storage.checkpoint import read_checkpoint, write_checkpoint
from oncelog.storage.log import RECOVERY_POINT_FILE

from .failures import file_of
from .isolation import fresh_file_cache

CONFIG = LogConfig(segment_bytes=1 << 20, index_interval_bytes=200)
ENTRY = struct.Struct(">II")  # relative offset, position (offset_index.py)
INDEX = f"{0:020d}.index"


def append_batches(log: PartitionLog, first: int, count: int) -> None:
    """``count`` batches of two records each, values naming their batch."""
    for i in range(first, first + count):
        batch = build_batch(
            [Record(b"k", b"value-%d-%d" % (i, j)) for j in (0, 1)], timestamp_ms=1_000 + i
        )
        [(header, view)] = split_batches(batch)
        log.append(view, header, 0)


def batch_offsets(data: bytes) -> list[int]:
    return [record.offset for record in decode_records(memoryview(data))]


def index_entries(path: Path) -> list[tuple[int, int]]:
    return list(ENTRY.iter_unpack(path.read_bytes()))


@pytest.fixture(autouse=True)
def own_file_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fsync rounds asserted here are those of an uncrowded cache (tests/storage/
    isolation.py): after a test that left written files open they were not."""
    fresh_file_cache(monkeypatch)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "topic-0"


def acknowledged_then_crashed(path: Path) -> tuple[bytes, int]:
    """Offsets 0-199 flushed and checkpointed, 200-399 flushed (acknowledged) but not
    checkpointed, then the process dies: its descriptors close, nothing else is written.
    Returns the index file as it was and the position of the batch holding offset 300."""
    log = PartitionLog.open(path, CONFIG, clean_shutdown=False)
    append_batches(log, 0, 100)
    assert log.flush() == 200
    log.write_recovery_checkpoint()
    append_batches(log, 100, 100)
    assert log.flush() == 400
    assert read_checkpoint(path / RECOVERY_POINT_FILE) == 200
    later = log._segments[0].find_position(300)
    assert later is not None
    for segment in log._segments:
        segment.close()
    return (path / INDEX).read_bytes(), later


def crash_leftover(kind: str, index: bytes, later: int) -> bytes:
    """The index file a crash may leave: the entries below the checkpointed recovery
    point (fsynced before it) kept, the rest lost, torn, zeroed or garbled."""
    entries = list(ENTRY.iter_unpack(index))
    kept = b"".join(ENTRY.pack(*e) for e in entries if e[0] < 200)
    assert 0 < len(kept) < len(index)
    return {
        "lost": kept,
        "torn": kept + index[len(kept) : len(kept) + 3],
        "zeroed": kept + bytes(len(index) - len(kept)),
        # plausible yet wrong: offset 250 said to be where offset 300's batch is
        "garbled": kept + ENTRY.pack(250, later),
    }[kind]


@pytest.mark.parametrize("kind", ["lost", "torn", "zeroed", "garbled"])
def test_an_index_that_lost_its_unsynced_tail_is_rebuilt_and_every_record_read_by_offset(
    path: Path, kind: str
) -> None:
    index, later = acknowledged_then_crashed(path)
    (path / INDEX).write_bytes(crash_leftover(kind, index, later))
    log = PartitionLog.open(path, CONFIG, clean_shutdown=False)
    assert log.log_end_offset == 400
    for offset in range(400):
        assert offset in batch_offsets(log.read(offset, 1)), f"offset {offset}"
    log.close()
    assert (path / INDEX).read_bytes() == index, "the index was not rebuilt entry for entry"


def test_control_a_checkpoint_ahead_of_the_index_serves_the_wrong_batch(path: Path) -> None:
    """The same garbled index, with the checkpoint put at 400 as if written before the
    index was fsynced: recovery trusts the garbled entry, and offset 250 reads as 300."""
    index, later = acknowledged_then_crashed(path)
    (path / INDEX).write_bytes(crash_leftover("garbled", index, later))
    write_checkpoint(path / RECOVERY_POINT_FILE, 400)
    log = PartitionLog.open(path, CONFIG, clean_shutdown=False)
    assert log.log_end_offset == 400
    assert batch_offsets(log.read(250, 1))[0] == 300, "the anomaly did not show"
    log.close()


def recording(
    monkeypatch: pytest.MonkeyPatch, root: Path, fail_on: str | None = None
) -> tuple[list[str], Callable[[], None]]:
    """Record every fsync round of the log module (the suffixes of its files) and every
    checkpoint write, in order, of the files under ``root`` (the test's own: a broker
    another test left running in this process, such as the session's, writes its own
    checkpoints meanwhile); with ``fail_on``, a round covering a file with that suffix
    fails (EIO). Returns the events and a function that lets the disk answer again."""
    events: list[str] = []
    failing = [fail_on]
    real_sync, real_write = log_module.fsync_together, log_module.write_checkpoint
    root = root.resolve()

    def ours(file: str | Path) -> bool:
        return root in Path(file).resolve().parents

    def sync(fds: list[int]) -> None:
        files = [file_of(fd) for fd in fds]
        if not any(ours(f) for f in files):
            real_sync(fds)
            return
        suffixes = sorted(Path(f).suffix for f in files)
        events.append("fsync " + " ".join(suffixes))
        if failing[0] in suffixes:
            raise OSError(errno.EIO, "Input/output error (injected)")
        real_sync(fds)

    def write(target: Path, value: int) -> None:
        if ours(target):
            events.append(f"checkpoint {value}")
        real_write(target, value)

    monkeypatch.setattr(log_module, "fsync_together", sync)
    monkeypatch.setattr(log_module, "write_checkpoint", write)
    return events, lambda: failing.__setitem__(0, None)


def test_data_waits_for_the_log_file_and_the_index_is_fsynced_before_the_checkpoint(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events, _ = recording(monkeypatch, path.parent)
    log = PartitionLog.open(path, CONFIG, clean_shutdown=False)
    append_batches(log, 0, 10)
    assert len(log._segments[0].index) > 0
    log.flush()
    assert events == ["fsync .log"], "acknowledged data waited for the index"
    events.clear()
    log.write_recovery_checkpoint()
    assert events == ["fsync .index", "checkpoint 20"]
    events.clear()
    log.write_recovery_checkpoint()  # nothing moved: nothing to do
    append_batches(log, 10, 1)  # no new index entry
    log.flush()
    log.write_recovery_checkpoint()
    assert events == ["fsync .log", "checkpoint 22"], "an unchanged index fsynced again"
    events.clear()
    append_batches(log, 11, 10)
    log.close()  # a clean start loads the index: fsynced before the close
    assert events == ["fsync .log", "fsync .index", "checkpoint 42"]


def test_a_failed_index_fsync_writes_no_checkpoint_and_takes_the_log_offline(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk answers again after the failure: a retried fsync could succeed without
    the pages it dropped, so no checkpoint is written until a restart recovers the log."""
    events, disk_answers_again = recording(monkeypatch, path.parent, fail_on=".index")
    log = PartitionLog.open(path, CONFIG, clean_shutdown=False)
    append_batches(log, 0, 10)
    assert log.flush() == 20  # acknowledged: the data's fsync covers no index
    with pytest.raises(OSError, match="injected"):
        log.write_recovery_checkpoint()
    assert log.failed and read_checkpoint(path / RECOVERY_POINT_FILE) is None
    disk_answers_again()
    log.write_recovery_checkpoint()
    log.close()
    assert events == ["fsync .log", "fsync .index"], "a checkpoint followed the failure"
    assert read_checkpoint(path / RECOVERY_POINT_FILE) is None
    reopened = PartitionLog.open(path, CONFIG, clean_shutdown=False)
    assert not reopened.failed and reopened.log_end_offset == 20
    assert [batch_offsets(reopened.read(o, 1))[0] for o in (0, 19)] == [0, 18]
    reopened.close()


def test_an_index_rebuilt_at_an_unclean_start_is_fsynced_before_the_checkpoint(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A segment below the recovery point is loaded, not recovered; if its index fails its
    checks it is rebuilt, and the checkpoint written after the recovery covers it."""
    config = LogConfig(segment_bytes=2000, index_interval_bytes=200)
    log = PartitionLog.open(path, config, clean_shutdown=False)
    append_batches(log, 0, 30)
    log.flush()
    log.write_recovery_checkpoint()
    assert len(log.segments()) > 1
    for segment in log._segments:  # a crash
        segment.close()
    (path / INDEX).write_bytes(bytes(13))  # the first segment's: fails its checks
    events, _ = recording(monkeypatch, path.parent)
    reopened = PartitionLog.open(path, config, clean_shutdown=False)
    assert events == ["fsync .index", "checkpoint 60"]
    assert len(index_entries(path / INDEX)) > 0
    reopened.close()


@pytest.mark.parametrize("damage", ["missing", "garbled"])
def test_an_index_rebuilt_at_a_clean_start_is_fsynced_before_open_returns(
    path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    """A clean start loads every index, rebuilding one that is missing or fails its
    checks; the recovery point need not move for a while (a quiet partition), so the
    rebuilt file is fsynced at once: a later crash's recovery trusts it below the
    checkpoint."""
    log = PartitionLog.open(path, CONFIG, clean_shutdown=False)
    append_batches(log, 0, 20)
    log.close()
    if damage == "missing":
        (path / INDEX).unlink()
    else:
        (path / INDEX).write_bytes(bytes(13))
    events, _ = recording(monkeypatch, path.parent)
    reopened = PartitionLog.open(path, CONFIG, clean_shutdown=True)
    assert events == ["fsync .index"]
    assert len(index_entries(path / INDEX)) > 0
    reopened.close()


def test_a_clean_close_fsyncs_an_index_cut_back_though_the_recovery_point_did_not_move(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append whose index entry fails is taken back: the index is cut, the recovery
    point stays. A clean start then loads the index as it is on disk: close fsyncs it."""
    config = LogConfig(index_interval_bytes=1)  # an entry for every batch after the first
    log = PartitionLog.open(path, config, clean_shutdown=False)
    append_batches(log, 0, 10)
    log.flush()
    log.write_recovery_checkpoint()
    real_write = os.write

    def failing_index_write(fd: int, data: bytes | memoryview) -> int:
        if Path(file_of(fd)).suffix == ".index":
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", failing_index_write)
    with pytest.raises(OSError, match="injected"):
        append_batches(log, 10, 1)
    monkeypatch.setattr(os, "write", real_write)
    assert not log.failed and log.log_end_offset == 20
    events, _ = recording(monkeypatch, path.parent)
    log.close()
    assert events == ["fsync .log", "fsync .index"], "the cut index was left unsynced"
