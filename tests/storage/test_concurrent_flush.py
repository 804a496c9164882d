"""Two flushes of one log at once: the group-commit flusher runs a partition's flushes one
after another, but `close()` (a dropped replica, on the event loop) flushes whenever it is
called. The second flush finds the segments already claimed by the first, so nothing is
dirty: answering at once, it raised the recovery point over data whose fsync was still
running, and `close()` checkpointed it (found in the review of txn16, 2026-11-25)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import oncelog.storage.log as log_module
from oncelog.storage import PartitionLog

from .test_index_durability import CONFIG, append_batches, recording


def test_a_second_flush_waits_for_the_fsync_of_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = PartitionLog.open(tmp_path / "t-0", CONFIG, clean_shutdown=False)
    append_batches(log, 0, 10)  # offsets 0-19, none durable yet
    events, _ = recording(monkeypatch)
    fsyncing, release = threading.Event(), threading.Event()
    recorded = log_module.fsync_together

    def held(fds: list[int]) -> None:
        if threading.current_thread().name == "first":
            fsyncing.set()
            release.wait(5)
        recorded(fds)

    monkeypatch.setattr(log_module, "fsync_together", held)
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
