"""The exactly-once sink's decision core: write, skip or refuse (pure, no clients)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from oncelog.spark.sink import Progress, Refuse, Skip, Write, check_replay, decide


def _progress(next_batch: int = 0, rows: int | None = None, slots: int = 4) -> Progress:
    return Progress("s", "__progress", slots, next_batch, rows)


def test_write_skip_refuse() -> None:
    assert decide(_progress(), 0, 0) == Write(1)
    assert decide(_progress(5), 7, 1) == Write(8)  # the slot wrote nothing in batches 5, 6
    assert decide(_progress(8, rows=3), 7, 1) == Skip(3)
    ahead = decide(_progress(9), 7, 1)
    assert isinstance(ahead, Refuse) and "already wrote batch 8, ahead of batch 7" in ahead.reason
    no_slot = decide(_progress(slots=2), 0, 2)
    assert isinstance(no_slot, Refuse) and "sink.progress.partitions" in no_slot.reason


def test_progress_metadata_round_trip() -> None:
    write = Write(8)
    metadata = write.metadata(_progress(7), 2, 40, "producer-1", 17, 123)
    assert json.loads(metadata) == {
        "v": 3,
        "sink": "s",
        "batch": 7,
        "task": 2,
        "rows": 40,
        "writer": "producer-1",
        "claim": 17,
        "at": 123,
    }
    read = Progress.from_committed("s", "__progress", 4, 8, metadata)
    assert (read.next_batch, read.rows, read.writer, read.claim) == (8, 40, "producer-1", 17)
    assert Progress.from_committed("s", "p", 4, -1001, None).next_batch == 0  # none committed
    assert Progress.from_committed("s", "p", 4, 3, "not json").rows is None


def test_a_replay_must_have_the_rows_that_were_written() -> None:
    progress = _progress(8, rows=40)
    assert check_replay(Skip(40), 40, progress, 7, 1) is None
    assert check_replay(Skip(None), 39, progress, 7, 1) is None  # nothing recorded to compare
    refused = check_replay(Skip(40), 39, progress, 7, 1)
    assert isinstance(refused, Refuse)
    assert "already written with 40 rows and its replay has 39" in refused.reason


@given(st.integers(0, 50), st.integers(0, 50), st.integers(0, 5), st.integers(1, 5))
def test_each_batch_is_written_by_a_slot_at_most_once(
    next_batch: int, batch: int, partition: int, slots: int
) -> None:
    """Against the model: a slot's batches are written in order, each once."""
    decision = decide(_progress(next_batch, slots=slots), batch, partition)
    if partition >= slots or next_batch > batch + 1:
        assert isinstance(decision, Refuse)
    elif next_batch == batch + 1:
        assert isinstance(decision, Skip)
    else:
        assert decision == Write(batch + 1)
        # after the write commits, the same batch is never written again
        assert isinstance(decide(_progress(batch + 1, slots=slots), batch, partition), Skip)


@given(
    st.lists(
        st.sampled_from(["commit", "die before commit", "die after commit", "driver dies"]),
        max_size=40,
    )
)
def test_whatever_fails_a_slot_writes_every_batch_exactly_once(events: list[str]) -> None:
    """The engine's side as Spark runs it: a task that dies before its commit is retried
    (same batch); one that dies after its commit, or a driver that dies before recording the
    batch, makes the batch run again. The slot's output must hold every batch once."""
    next_batch, rows = 0, None  # the slot's progress, as the progress topic holds it
    batch = 0  # the batch the engine runs
    written: list[int] = []
    for event in events:
        decision = decide(_progress(next_batch, rows), batch, 0)
        assert not isinstance(decision, Refuse)
        if isinstance(decision, Write) and event != "die before commit":
            next_batch, rows = decision.next_batch, 10
            written.append(batch)  # output and progress committed together
        if event == "commit":
            batch += 1  # Spark records the batch and goes on
    assert written == sorted(set(written))
    assert set(written) >= set(range(batch))
