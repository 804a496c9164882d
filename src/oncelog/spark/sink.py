"""The exactly-once sink's decision for one task, as a pure function of its progress.

Each task slot `k` of sink `S` has a progress entry: the committed offset `N` of consumer
group `oncelog-sink-S` for partition `k` of the progress topic, written in the same Kafka
transaction as the task's output. `N` means "this slot has written batches up to N - 1";
its metadata records how many rows the slot wrote in batch N - 1, which writer (producer
transactional.id) wrote them and the offset of that writer's claim (`claims`: the zombie
fence).

For batch `B` the decision is:

- `N < B + 1`: **write** (begin a transaction, produce, commit output and progress B + 1);
- `N == B + 1`: **skip** (an earlier attempt or run committed this batch), after checking
  that the replayed input has as many rows as were written;
- `N > B + 1`: **refuse** (the checkpoint was reset, or another query uses this sink.id).

The row count is the guard against a replay that is partitioned differently (another number
of output tasks gives a task other rows): it costs nothing per record. It cannot see a
task that gets the same number of other rows, nor a task that had not committed; PySpark
tells a task neither its stage's task count nor anything else that would.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

PROGRESS_FORMAT = 3  # 1 also recorded a per-record digest; 2 had no claim


@dataclass(frozen=True)
class Progress:
    """What the progress topic says about one task slot of one sink."""

    sink_id: str
    topic: str  # the progress topic
    slots: int  # its partitions: the most tasks a write may have
    next_batch: int = 0  # batches below this one are written by the slot
    rows: int | None = None  # rows the slot wrote in batch next_batch - 1, when recorded
    writer: str | None = None  # the transactional.id that wrote it, when recorded
    claim: int | None = None  # the offset of that writer's claim, when recorded

    @classmethod
    def from_committed(
        cls, sink_id: str, topic: str, slots: int, offset: int, metadata: str | None
    ) -> Progress:
        """From a committed offset (negative: nothing committed) and its metadata."""
        try:
            recorded = json.loads(metadata or "{}")
        except json.JSONDecodeError:
            recorded = {}
        if not isinstance(recorded, dict):
            recorded = {}
        rows, writer, claim = (recorded.get(k) for k in ("rows", "writer", "claim"))
        return cls(
            sink_id,
            topic,
            slots,
            max(offset, 0),
            rows if isinstance(rows, int) else None,
            writer if isinstance(writer, str) else None,
            claim if isinstance(claim, int) else None,
        )


@dataclass(frozen=True)
class Write:
    """Write the batch in one transaction with the progress `next_batch`."""

    next_batch: int

    def metadata(
        self, progress: Progress, partition: int, rows: int, writer: str, claim: int, now_ms: int
    ) -> str:
        return json.dumps(
            {
                "v": PROGRESS_FORMAT,
                "sink": progress.sink_id,
                "batch": self.next_batch - 1,
                "task": partition,
                "rows": rows,
                "writer": writer,
                "claim": claim,
                "at": now_ms,
            },
            separators=(",", ":"),
        )


@dataclass(frozen=True)
class Skip:
    """The batch is already written by this slot: write nothing."""

    rows: int | None  # as recorded then


@dataclass(frozen=True)
class Refuse:
    """Going on could write a record twice or lose one."""

    reason: str


Decision = Write | Skip | Refuse


def decide(progress: Progress, batch_id: int, partition: int) -> Decision:
    """What task `partition` does with batch `batch_id`, given its slot's progress."""
    if partition >= progress.slots:
        return Refuse(
            f"task {partition} has no progress slot: topic {progress.topic} has "
            f"{progress.slots} partitions and the write has more tasks. Create the sink with "
            "a larger sink.progress.partitions (or name a bigger topic in sink.progress.topic)."
        )
    if progress.next_batch > batch_id + 1:
        return Refuse(
            f"sink {progress.sink_id!r} task {partition} already wrote batch "
            f"{progress.next_batch - 1}, ahead of batch {batch_id}: the query's checkpoint was "
            "reset or another query uses the same sink.id (or a batch write reused an older "
            "write.id). Use a new sink.id."
        )
    if progress.next_batch == batch_id + 1:
        return Skip(progress.rows)
    return Write(batch_id + 1)


def check_replay(
    skip: Skip, rows: int, progress: Progress, batch_id: int, partition: int
) -> Refuse | None:
    """A skipped batch's input must have the rows that were written: refuse otherwise."""
    if skip.rows is None or skip.rows == rows:
        return None
    return Refuse(
        f"sink {progress.sink_id!r} task {partition}: batch {batch_id} was already written "
        f"with {skip.rows} rows and its replay has {rows}. The input of a replayed batch "
        "changed: a different number of output partitions, a different partitioning, or "
        "non-deterministic input. Writing would duplicate or lose records; restore the "
        "query as it was, or use a new sink.id."
    )
