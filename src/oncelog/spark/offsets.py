"""Offsets, offset ranges and the decisions made on them: plain data, no clients, no Spark.

A streaming offset is the JSON object Spark keeps in its checkpoint:
`{"topic": {"0": 42, "1": 7}}`, the next offset to read per partition (exclusive end
of the batch that produced it). Inside Python it is `dict[(topic, partition), offset]`.
Beside the topics, keys of oncelog's own (no topic can be named so) carry what a replay
needs: the task plan of the batch an offset ends, and in the first batch's end offset the
start it was planned from.

The rules follow Spark's Kafka source: how a trigger's offsets are capped
(`maxOffsetsPerTrigger`, `KafkaMicroBatchStream.rateLimit`), when a trigger is put off
(`minOffsetsPerTrigger` with `maxTriggerDelay`, `delayBatch`) and how large partitions are
cut into several Spark tasks (`minPartitions`, `maxRecordsPerPartition`,
`KafkaOffsetRangeCalculator`). One rule is oncelog's own: small ranges of one batch share a
Spark task (`combine_ranges`, option `combineRangesUpTo`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

TopicPartitionKey = tuple[str, int]
Offsets = dict[TopicPartitionKey, int]


# Keys of a streaming offset that are not topics (Kafka's topic names allow letters,
# digits, '.', '_' and '-' only). PLAN_KEY holds the task plan of the batch the offset
# ends; INITIAL_KEY marks the offset `initialOffset` returns; FROM_KEY holds, in the first
# batch's end offset, the start that batch was planned from.
OWN_KEY_PREFIX = "oncelog:"
PLAN_KEY = OWN_KEY_PREFIX + "plan"
INITIAL_KEY = OWN_KEY_PREFIX + "initial"
FROM_KEY = OWN_KEY_PREFIX + "from"


@dataclass(frozen=True)
class TaskPlan:
    """The options that group a batch's ranges into Spark tasks. A streaming batch's end
    offset carries the plan it was made with, and a replay plans from it: the exactly-once
    sink fences by task, so a replayed batch must give each task the same records whatever
    the options or oncelog's defaults are when the query restarts."""

    min_partitions: int | None
    max_records_per_partition: int | None
    combine_up_to: int

    def to_json(self) -> dict[str, int]:
        return {
            "minPartitions": self.min_partitions or 0,
            "maxRecordsPerPartition": self.max_records_per_partition or 0,
            "combineRangesUpTo": self.combine_up_to,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, int]) -> TaskPlan:
        # a field missing is 0: a later oncelog may add one without breaking older plans
        return cls(
            int(data.get("minPartitions", 0)) or None,
            int(data.get("maxRecordsPerPartition", 0)) or None,
            int(data.get("combineRangesUpTo", 0)),
        )


def to_json(
    offsets: Mapping[TopicPartitionKey, int],
    plan: TaskPlan | None = None,
    start: Mapping[TopicPartitionKey, int] | None = None,
) -> dict[str, Any]:
    """The checkpoint's JSON of `offsets`; an end offset carries its batch's `plan`, and the
    first batch's its `start`."""
    out: dict[str, Any] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    if plan is not None:
        out[PLAN_KEY] = plan.to_json()
    if start is not None:
        out[FROM_KEY] = to_json(start)
    return out


def initial_json(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, Any]:
    """`initialOffset`'s JSON: the first batch's start, marked as such so that the first
    `latestOffset` records it in the batch's end offset (`is_initial`)."""
    return {**to_json(offsets), INITIAL_KEY: {}}


def is_initial(data: Mapping[str, Any] | None) -> bool:
    """Whether `data` is the start `initialOffset` gave: the batch ending at the next
    `latestOffset` is the query's first."""
    return data is not None and INITIAL_KEY in data


def from_json(data: Mapping[str, Any] | None) -> Offsets:
    """The positions of a checkpoint's JSON, without oncelog's own keys."""
    if not data:
        return {}
    return {
        (topic, int(p)): int(o)
        for topic, per in data.items()
        if not topic.startswith(OWN_KEY_PREFIX)
        for p, o in per.items()
    }


def end_json(start: Mapping[str, Any] | None, end: Offsets, plan: TaskPlan) -> Mapping[str, Any]:
    """The JSON `latestOffset` returns for a batch from `start` (as Spark passed it) to `end`,
    planned with `plan`. The first batch's records its start: Spark gives a replay of batch 0
    a fresh `initialOffset`. With nothing new, `start` itself: Spark runs a batch whenever
    the JSON differs, and an end that differed from the start only by oncelog's keys (the
    first batch's start, a plan made under other options or by an older oncelog) would run
    an empty one."""
    positions = from_json(start)
    if is_initial(start):
        return to_json(end, plan, start=positions)
    if start is not None and end == positions:
        return start
    return to_json(end, plan)


def planned_from(end: Mapping[str, Any]) -> Offsets | None:
    """The start the first batch was planned from, recorded in its end offset; None in
    every other end offset (its start is the previous batch's end, in Spark's offset log)
    and in one written before oncelog recorded it."""
    recorded = end.get(FROM_KEY)
    return None if recorded is None else from_json(recorded)


def plan_of(data: Mapping[str, Any], unrecorded: TaskPlan) -> TaskPlan:
    """The plan an end offset records; `unrecorded` for one written before offsets carried
    it (oncelog then made a task per range)."""
    recorded = data.get(PLAN_KEY)
    return unrecorded if recorded is None else TaskPlan.from_json(recorded)


@dataclass(frozen=True)
class OffsetRange:
    """Offsets [start, end) of one partition: the unit of one Spark input partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


@dataclass(frozen=True)
class DataLoss:
    """What a streaming batch's offsets say was lost, as Spark's Kafka source reports it
    (`getOffsetRangesFromResolvedOffsets`): partitions its start had and its end has not
    (deleted), and partitions whose end is below their start (the topic deleted and made
    again, its offsets reset: the records it got before this batch are not read). Under
    failOnDataLoss the batch fails; otherwise it goes on without them, warned."""

    gone: tuple[TopicPartitionKey, ...]
    moved_back: tuple[tuple[TopicPartitionKey, int, int], ...]  # (partition, start, end)

    def __bool__(self) -> bool:
        return bool(self.gone or self.moved_back)

    def describe(self) -> str:
        parts = []
        if self.gone:
            parts.append("partitions gone: " + ", ".join(f"{t}-{p}" for t, p in self.gone))
        for (t, p), was, now in self.moved_back:
            parts.append(f"partition {t}-{p}'s offset was changed from {was} to {now}")
        return "; ".join(parts) + ": some data may have been missed"


def data_loss(
    start: Mapping[TopicPartitionKey, int], end: Mapping[TopicPartitionKey, int]
) -> DataLoss:
    """The partitions of `start` missing from `end`, and those whose end is below their
    start."""
    return DataLoss(
        tuple(sorted(tp for tp in start if tp not in end)),
        tuple(
            sorted((tp, start[tp], end[tp]) for tp in start if tp in end and end[tp] < start[tp])
        ),
    )


def plan_ranges(
    start: Mapping[TopicPartitionKey, int],
    end: Mapping[TopicPartitionKey, int],
    new_partition_start: Mapping[TopicPartitionKey, int],
) -> list[OffsetRange]:
    """One range per partition of `end`, in a stable order. A partition missing from `start`
    is new and starts where `new_partition_start` says (its earliest offset)."""
    ranges = []
    for tp in sorted(end):
        first = start.get(tp, new_partition_start.get(tp, 0))
        ranges.append(OffsetRange(tp[0], tp[1], first, max(first, end[tp])))
    return ranges


def rate_limit(
    start: Mapping[TopicPartitionKey, int], available: Mapping[TopicPartitionKey, int], limit: int
) -> Offsets:
    """Cap a trigger at about `limit` offsets, shared in proportion to each partition's
    backlog as Spark's Kafka source shares it: a share below one offset is rounded up (no
    partition is starved), others down. A partition missing from `start` is not capped."""
    sizes = {
        tp: available[tp] - start[tp]
        for tp in available
        if tp in start and available[tp] - start[tp] > 0
    }
    total = sum(sizes.values())
    if total < 1:
        return dict(available)
    capped: Offsets = {}
    for tp, end in available.items():
        if tp not in sizes:
            capped[tp] = end
            continue
        share = limit * (sizes[tp] / total)
        capped[tp] = min(end, start[tp] + (math.ceil(share) if share < 1 else math.floor(share)))
    return capped


@dataclass(frozen=True)
class TriggerDecision:
    """Whether to run a batch now; `fired_at_ms` is the time to remember as the last trigger."""

    run: bool
    fired_at_ms: int


def admit_trigger(
    start: Mapping[TopicPartitionKey, int],
    available: Mapping[TopicPartitionKey, int],
    min_rows: int,
    max_delay_ms: int,
    last_trigger_ms: int,
    now_ms: int,
) -> TriggerDecision:
    """`minOffsetsPerTrigger`: put a batch off while fewer than `min_rows` new offsets are
    available, unless `max_delay_ms` has passed since the last batch ran. Offsets of a
    partition missing from `start` count from 0, as in Spark."""
    if now_ms - last_trigger_ms >= max_delay_ms:
        return TriggerDecision(True, now_ms)
    new = sum(end - start.get(tp, 0) for tp, end in available.items())
    if new < min_rows:
        return TriggerDecision(False, last_trigger_ms)
    return TriggerDecision(True, now_ms)


def _cut(rng: OffsetRange, parts: int) -> list[OffsetRange]:
    """`rng` in `parts` consecutive pieces of (nearly) equal size; the last takes the rest."""
    out = []
    remaining, begin = rng.size, rng.start
    for part in range(parts):
        this = remaining // (parts - part)
        remaining -= this
        end = min(begin + this, rng.end)
        out.append(OffsetRange(rng.topic, rng.partition, begin, end))
        begin = end
    return [r for r in out if r.size > 0]


def _part_count(size: int, total: int, min_parts: int) -> int:
    # Scala's math.round: half up
    return max(math.floor(size / total * min_parts + 0.5), 1)


def split_ranges(
    ranges: Sequence[OffsetRange],
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """Spark tasks for a batch's ranges, as Spark's Kafka source plans them. Empty ranges
    are dropped. With `maxRecordsPerPartition`, a range larger than that is cut into
    ceil(size / max) pieces. Then, with `minPartitions` larger than the number of ranges,
    large ranges are cut in proportion to their share of all offsets so that there are
    about `minPartitions` tasks (ranges whose share rounds to one task stay whole)."""
    out = [r for r in ranges if r.size > 0]
    if max_records_per_partition is not None:
        out = [
            piece
            for r in out
            for piece in _cut(r, max(1, math.ceil(r.size / max_records_per_partition)))
        ]
    if min_partitions is None or len(out) >= min_partitions:
        return out
    total = sum(r.size for r in out)
    whole = [r for r in out if _part_count(r.size, total, min_partitions) == 1]
    split_total = total - sum(r.size for r in whole)
    split_min = max(min_partitions - len(whole), 1)
    result = []
    for r in out:
        parts = 1 if r in whole else _part_count(r.size, split_total, split_min)
        result.extend(_cut(r, parts))
    return result


def combine_ranges(
    ranges: Sequence[OffsetRange], offsets_per_task: int
) -> list[tuple[OffsetRange, ...]]:
    """Spark tasks for a batch's ranges: consecutive ranges share one task while their
    offsets together are at most `offsets_per_task` (0: one task per range, Spark's plan).

    Spark's Kafka source makes a task per range however small. At the log tail a batch is
    a few records per partition, and each task costs PySpark a Python worker's round trip
    and the exactly-once sink a transaction; with more ranges than cores the tasks also run
    in waves. Combining never reorders a partition's records (a task reads its ranges one
    after the other, each in offset order) and is a function of the batch's offsets and
    the option alone, so a replayed batch gets the same tasks with the same records, which
    the exactly-once sink relies on."""
    tasks: list[list[OffsetRange]] = []
    together = 0
    for rng in ranges:
        if tasks and together + rng.size <= offsets_per_task:
            tasks[-1].append(rng)
            together += rng.size
        else:
            tasks.append([rng])
            together = rng.size
    return [tuple(task) for task in tasks]


def plan_tasks(ranges: Sequence[OffsetRange], plan: TaskPlan) -> list[tuple[OffsetRange, ...]]:
    """The ranges of each Spark task of a batch: split as Spark splits them, then small ones
    combined (the options refuse combining together with a split)."""
    split = split_ranges(ranges, plan.min_partitions, plan.max_records_per_partition)
    return combine_ranges(split, plan.combine_up_to)
