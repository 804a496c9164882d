"""Two flushes of one log at once: the group-commit flusher runs a partition's flushes one
after another (its own, split in two on the loop: `begin_flush`, `end_flush`), but
`close()` (a dropped replica, on the event loop) flushes whenever it is called. The second
flush finds the segments already claimed by the first, so nothing is dirty: answering at
once, it raised the recovery point over data whose fsync was still running, and `close()`
checkpointed it (found in the review of txn16, 2026-11-25). And a truncation on the loop
(a follower's divergence, a demoted leader) while a flush's fsync runs: the flush must not
raise the recovery point to the end it saw before the cut."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

import oncelog.storage.log as log_module
from oncelog.storage import PartitionLog

from .test_index_durability import CONFIG, append_batches, recording


def hold_fsyncs_of(
    thread_name: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[threading.Event, threading.Event]:
    """Make the thread named ``thread_name`` stop in its fsync: the first event is set when
    it gets there, and it goes on (fsyncs for real) once the second is set."""
    fsyncing, release = threading.Event(), threading.Event()
    real = log_module.fsync_together

    def held(fds: list[int]) -> None:
        if threading.current_thread().name == thread_name:
            fsyncing.set()
            release.wait(5)
        real(fds)

    monkeypatch.setattr(log_module, "fsync_together", held)
    return fsyncing, release


def test_a_second_flush_waits_for_the_fsync_of_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = PartitionLog.open(tmp_path / "t-0", CONFIG, clean_shutdown=False)
    append_batches(log, 0, 10)  # offsets 0-19, none durable yet
    events, _ = recording(monkeypatch, tmp_path)
    fsyncing, release = hold_fsyncs_of("first", monkeypatch)
    answers: list[int] = []
    first = threading.Thread(target=log.flush, name="first")
    second = threading.Thread(target=lambda: answers.append(log.flush()), name="second")
    closer = threading.Thread(target=log.close, name="closer")
    first.start()
    try:
        assert fsyncing.wait(5), "the first flush never fsynced"
        second.start()
        closer.start()
        second.join(1)
        closer.join(1)
        early, early_events = list(answers), list(events)
    finally:
        release.set()
        for thread in (first, second, closer):
            thread.join(5)
    assert early == [], f"a flush returned recovery point {early} while its data's fsync ran"
    assert not any(e.startswith("checkpoint") for e in early_events), early_events
    assert answers == [20]
    # the first flush's fsync (its .log; its index too while the shared file cache is
    # crowded), then close's checkpoint of what it covered
    assert events[0].startswith("fsync") and ".log" in events[0].split(), events
    assert "checkpoint 20" in events, events


@pytest.mark.parametrize("cut", ["truncate_to", "start_over_at"])
def test_a_flush_overlapping_a_truncation_does_not_cover_what_followed_the_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cut: str
) -> None:
    """Offsets 0-19, a flush holding them in its fsync; the loop cuts the log back (to 10,
    or empties it at 10) and appends 20 records (10-29) that no fsync has seen. Raising
    the recovery point to the flush's target of 20 would answer acks=all for 10-19 at once
    and let the next checkpoint make recovery trust them."""
    log = PartitionLog.open(tmp_path / "t-0", CONFIG, clean_shutdown=False)
    append_batches(log, 0, 10)
    fsyncing, release = hold_fsyncs_of("flusher", monkeypatch)
    answers: list[int] = []
    flusher = threading.Thread(target=lambda: answers.append(log.flush()), name="flusher")
    flusher.start()
    try:
        assert fsyncing.wait(5), "the flush never fsynced"
        getattr(log, cut)(10)
        append_batches(log, 100, 10)
        assert log.log_end_offset == 30
    finally:
        release.set()
        flusher.join(5)
    assert answers and answers[0] <= 10, f"recovery point {answers} covers unsynced 10-19"
    assert log.recovery_point <= 10
    assert log.flush() == 30  # the next flush syncs them
    log.close()


def test_a_flush_while_a_split_one_runs_fsyncs_its_files_and_leaves_the_point_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group-commit flusher has claimed 0-19 (``begin_flush``) and its fsync runs on a
    thread of its own; ``close()`` on the loop flushes meanwhile. It must not wait for the
    split flush (its end runs on the loop: a wait would never end), must fsync what that
    one claimed (found clean, it would fsync nothing), and must not raise the recovery
    point while the split flush runs: its fsync may have taken the writeback error this
    one should have seen. The split flush, ending alone, raises it."""
    log = PartitionLog.open(tmp_path / "t-0", CONFIG, clean_shutdown=False)
    append_batches(log, 0, 10)  # offsets 0-19, none durable yet
    events, _ = recording(monkeypatch, tmp_path)
    claim = log.begin_flush()
    assert claim is not None and claim.target == 20
    closer = threading.Thread(target=log.close, name="closer")
    closer.start()
    closer.join(5)
    assert not closer.is_alive(), "close waited for the split flush"
    assert events[0] == "fsync .log", events  # the split flush's claim, fsynced by close
    assert log.recovery_point == 0
    assert "checkpoint 20" not in events, events
    for fd in claim.to_fsync:  # the split flush's own fsync, then its end
        os.fsync(fd)
    assert log.end_flush(claim, None) == 20


def test_a_flush_ending_while_another_runs_does_not_raise_the_recovery_point(
    tmp_path: Path,
) -> None:
    """Two overlapping flushes of the same files: the later one succeeds first, the
    earlier one fails (EIO). Only the first fsync to look at a file's writeback error
    reports it, so the success proves nothing: the point stays, and the failure takes the
    log offline."""
    log = PartitionLog.open(tmp_path / "t-0", CONFIG, clean_shutdown=False)
    append_batches(log, 0, 10)
    first = log.begin_flush()
    append_batches(log, 100, 5)
    second = log.begin_flush()
    assert first is not None and second is not None
    assert set(first.fds) <= set(second.fds), "the second flush does not cover the first's files"
    assert log.end_flush(second, None) == 0
    assert log.end_flush(first, OSError(errno.EIO, "Input/output error (injected)")) == 0
    assert log.failed
    log.close()


def test_a_split_flush_whose_directory_fails_to_close_still_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim after a cut fsyncs the directory too; closing that descriptor fails (EIO):
    the flush ends all the same, failed (the log goes offline). Left running, it kept its
    files pinned and no later flush would have raised the recovery point."""
    log = PartitionLog.open(tmp_path / "t-0", CONFIG, clean_shutdown=False)
    append_batches(log, 0, 10)
    log.truncate_to(10)  # the directory changed: the next flush fsyncs it
    claim = log.begin_flush()
    assert claim is not None and claim.dir_fd is not None
    for fd in claim.to_fsync:
        os.fsync(fd)
    real_close, dir_fd = os.close, claim.dir_fd

    def close(fd: int) -> None:
        real_close(fd)
        if fd == dir_fd:
            raise OSError(errno.EIO, "Input/output error (injected)")

    monkeypatch.setattr(os, "close", close)
    log.end_flush(claim, None)
    monkeypatch.undo()
    assert log.failed
    assert claim.files and all(f.pins == 0 for f in claim.files), "its files stay pinned"
    log.close()
