"""The source's decisions on offsets: rate limits, delayed triggers, split ranges (pure)."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from oncelog.spark import offsets as off
from oncelog.spark.consume import DataLossError
from oncelog.spark.offsets import OffsetRange, TaskPlan
from oncelog.spark.options import parse_read_options
from oncelog.spark.reader import OncelogStreamReader


def test_offsets_json_round_trip() -> None:
    offsets = {("b", 1): 7, ("a", 0): 3, ("a", 10): 0}
    encoded = off.to_json(offsets)
    assert encoded == {"a": {"0": 3, "10": 0}, "b": {"1": 7}}
    assert off.from_json(encoded) == offsets


def test_plan_ranges_starts_new_partitions_at_their_earliest() -> None:
    ranges = off.plan_ranges({("t", 0): 5}, {("t", 0): 9, ("t", 1): 4}, {("t", 1): 2})
    assert ranges == [OffsetRange("t", 0, 5, 9), OffsetRange("t", 1, 2, 4)]


def test_rate_limit_shares_in_proportion_as_spark_does() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 10}
    available = {("t", 0): 30, ("t", 1): 10, ("t", 2): 10}
    assert off.rate_limit(start, available, 8) == {("t", 0): 6, ("t", 1): 2, ("t", 2): 10}
    assert off.rate_limit(start, available, 1000) == available
    # a share below one offset is rounded up: small partitions are not starved
    skewed = off.rate_limit({("t", 0): 0, ("t", 1): 0}, {("t", 0): 1000, ("t", 1): 1}, 10)
    assert skewed == {("t", 0): 9, ("t", 1): 1}


def test_a_trigger_waits_for_min_offsets_until_the_delay_passes() -> None:
    start = {("t", 0): 100}
    few = {("t", 0): 104}
    # Spark's first trigger runs at once (nothing ran yet)
    assert off.admit_trigger(start, few, 10, 60_000, 0, 1_000_000) == off.TriggerDecision(
        True, 1_000_000
    )
    held = off.admit_trigger(start, few, 10, 60_000, 1_000_000, 1_030_000)
    assert held == off.TriggerDecision(False, 1_000_000)
    enough = off.admit_trigger(start, {("t", 0): 110}, 10, 60_000, 1_000_000, 1_030_000)
    assert enough == off.TriggerDecision(True, 1_030_000)
    late = off.admit_trigger(start, few, 10, 60_000, 1_000_000, 1_060_000)
    assert late == off.TriggerDecision(True, 1_060_000)
    # a partition not in the start counts from offset 0
    assert off.admit_trigger({}, {("u", 0): 12}, 10, 60_000, 1_000_000, 1_000_001).run


def test_min_partitions_splits_large_ranges_as_spark_does() -> None:
    ranges = [OffsetRange("t", 0, 0, 900), OffsetRange("t", 1, 0, 100), OffsetRange("t", 2, 5, 5)]
    assert off.split_ranges(ranges) == ranges[:2]  # empty ranges dropped
    assert off.split_ranges(ranges, min_partitions=2) == ranges[:2]
    split = off.split_ranges(ranges, min_partitions=10)
    # partition 1's share rounds to one task: it stays whole; partition 0 takes the other 9
    assert [r for r in split if r.partition == 1] == [ranges[1]]
    zero = [r for r in split if r.partition == 0]
    assert len(zero) == 9 and [r.size for r in zero] == [100] * 9
    assert zero[0].start == 0 and zero[-1].end == 900
    assert all(a.end == b.start for a, b in itertools.pairwise(zero))


def test_max_records_per_partition_then_min_partitions() -> None:
    ranges = [OffsetRange("t", 0, 0, 250), OffsetRange("t", 1, 0, 40)]
    pieces = off.split_ranges(ranges, max_records_per_partition=100)
    assert [(r.partition, r.start, r.end) for r in pieces] == [
        (0, 0, 83),
        (0, 83, 166),
        (0, 166, 250),
        (1, 0, 40),
    ]
    more = off.split_ranges(ranges, min_partitions=8, max_records_per_partition=100)
    assert len(more) >= 7 and all(r.size <= 100 for r in more)


@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(0, 2000)), min_size=1, max_size=6),
    st.one_of(st.none(), st.integers(1, 40)),
    st.one_of(st.none(), st.integers(1, 500)),
)
def test_split_ranges_cover_every_offset_once(
    spans: list[tuple[int, int]], min_partitions: int | None, max_records: int | None
) -> None:
    ranges = [OffsetRange("t", p, start, start + size) for p, (start, size) in enumerate(spans)]
    split = off.split_ranges(ranges, min_partitions, max_records)
    for rng in ranges:
        pieces = sorted((r for r in split if r.partition == rng.partition), key=lambda r: r.start)
        covered = [o for r in pieces for o in range(r.start, r.end)]
        assert covered == list(range(rng.start, rng.end))
    if max_records is not None:
        assert all(r.size <= max_records for r in split)


def test_small_ranges_share_a_task_up_to_the_limit() -> None:
    ranges = [
        OffsetRange("a", 0, 0, 20),
        OffsetRange("a", 1, 5, 35),
        OffsetRange("b", 0, 0, 60),
        OffsetRange("b", 1, 0, 10),
    ]
    assert off.combine_ranges(ranges, 1000) == [tuple(ranges)]
    # consecutive ranges while together at most the limit; a larger one alone
    assert off.combine_ranges(ranges, 50) == [tuple(ranges[:2]), (ranges[2],), (ranges[3],)]
    assert off.combine_ranges(ranges, 0) == [(r,) for r in ranges]  # Spark's plan
    assert off.plan_tasks(ranges, TaskPlan(None, None, 1000)) == [tuple(ranges)]
    # minPartitions or maxRecordsPerPartition: Spark's plan (the options refuse combining)
    assert off.plan_tasks(ranges, TaskPlan(2, None, 0)) == [(r,) for r in ranges]
    pieces = off.plan_tasks(ranges, TaskPlan(None, 25, 0))
    assert len(pieces) == 7 and all(len(task) == 1 and task[0].size <= 25 for task in pieces)
    assert off.plan_tasks([OffsetRange("a", 0, 7, 7)], TaskPlan(None, None, 1000)) == []


def test_an_end_offset_carries_its_plan_and_a_replay_plans_from_it() -> None:
    offsets = {("b", 1): 7, ("a", 0): 3}
    combined = TaskPlan(None, None, 1000)
    encoded = off.to_json(offsets, combined)
    assert encoded[off.PLAN_KEY] == {
        "minPartitions": 0,
        "maxRecordsPerPartition": 0,
        "combineRangesUpTo": 1000,
    }
    assert off.from_json(encoded) == offsets  # the plan is not a topic
    # a batch planned under one plan and replayed under another: the recorded one wins
    spark_plan = TaskPlan(2, None, 0)
    assert off.plan_of(json.loads(json.dumps(encoded)), spark_plan) == combined
    assert off.plan_of(off.to_json(offsets, spark_plan), combined) == spark_plan
    # an end offset of an oncelog that did not record a plan: the caller's (a task per range)
    assert off.plan_of(off.to_json(offsets), spark_plan) == spark_plan


def test_a_replayed_batch_gets_the_tasks_it_was_planned_with_whatever_the_options() -> None:
    def reader(**options: str) -> OncelogStreamReader:
        return OncelogStreamReader(
            parse_read_options(
                {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t", **options}, True
            )
        )

    start = {"t": {"0": 0, "1": 0, "2": 0}}
    ends = {"t": {"0": 10, "1": 10, "2": 10}}

    def tasks(stream: OncelogStreamReader, end: dict) -> list[tuple[OffsetRange, ...]]:
        return [p.ranges for p in stream.partitions(start, end)]  # type: ignore[attr-defined]

    one_per_range = [(OffsetRange("t", p, 0, 10),) for p in range(3)]
    one = [tuple(r for (r,) in one_per_range)]
    split_end = {**ends, off.PLAN_KEY: TaskPlan(None, None, 0).to_json()}
    combined_end = {**ends, off.PLAN_KEY: TaskPlan(None, None, 1000).to_json()}
    for stream in (reader(), reader(combineRangesUpTo="0"), reader(minPartitions="2")):
        assert tasks(stream, split_end) == one_per_range
        assert tasks(stream, combined_end) == one
        assert tasks(stream, ends) == one_per_range  # planned by an oncelog before the plan


class _Log:
    """A cluster for the driver's calls: every partition's earliest and latest offsets."""

    def __init__(self, latest: dict[off.TopicPartitionKey, int]) -> None:
        self.latest = latest

    def partitions(self, subscription: object) -> list[off.TopicPartitionKey]:
        return sorted(self.latest)

    def offsets(
        self, tps: list[off.TopicPartitionKey], which: str, read_committed: bool
    ) -> dict[off.TopicPartitionKey, int]:
        return {tp: self.latest[tp] if which == "latest" else 0 for tp in tps}


def _stream(log: _Log, **options: str) -> OncelogStreamReader:
    stream = OncelogStreamReader(
        parse_read_options(
            {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t", **options}, True
        )
    )
    stream._cluster = log  # type: ignore[assignment]
    return stream


def _stored(offset: dict) -> dict:
    return json.loads(json.dumps(offset))  # as Spark keeps it and hands it back


def test_the_first_batch_records_its_start_and_a_replay_plans_from_it() -> None:
    t0, t1 = ("t", 0), ("t", 1)
    log = _Log({t0: 10, t1: 10})
    stream = _stream(log)  # startingOffsets=latest, a streaming query's default
    start = _stored(stream.initialOffset())
    assert off.from_json(start) == {t0: 10, t1: 10} and off.is_initial(start)
    log.latest = {t0: 15, t1: 12}  # records arrive before the first batch is planned
    end = _stored(stream.latestOffset(start, ReadAllAvailable()))
    assert off.from_json(end) == {t0: 15, t1: 12}
    assert off.planned_from(end) == {t0: 10, t1: 10}
    batch_0 = [(OffsetRange("t", 0, 10, 15), OffsetRange("t", 1, 10, 12))]

    # Spark asks for initialOffset again when it runs batch 0, after more records arrived:
    # the same reader answers as before; a replay after a restart (a new reader, other
    # options) resolves "latest" afresh, and plans from the recorded start
    log.latest = {t0: 30, t1: 30}
    assert _stored(stream.initialOffset()) == start
    assert [p.ranges for p in stream.partitions(start, end)] == batch_0  # type: ignore[attr-defined]
    replay = _stream(log, combineRangesUpTo="0")
    fresh = _stored(replay.initialOffset())
    assert off.from_json(fresh) == {t0: 30, t1: 30}
    assert [p.ranges for p in replay.partitions(fresh, end)] == batch_0  # type: ignore[attr-defined]
    # an end offset written before oncelog recorded the start: planned from the fresh one
    legacy = {k: v for k, v in end.items() if k != off.FROM_KEY}
    assert replay.partitions(fresh, legacy) == []

    # the next batch starts at batch 0's end (Spark's offset log) and records no start
    end_1 = _stored(stream.latestOffset(end, ReadAllAvailable()))
    assert off.planned_from(end_1) is None and off.from_json(end_1) == {t0: 30, t1: 30}
    assert [p.ranges for p in stream.partitions(end, end_1)] == [  # type: ignore[attr-defined]
        (OffsetRange("t", 0, 15, 30), OffsetRange("t", 1, 12, 30))
    ]


def test_the_first_batch_records_its_start_under_limits_and_new_partitions() -> None:
    t0, t1, t2 = ("t", 0), ("t", 1), ("t", 2)
    log = _Log({t0: 100, t1: 100})
    capped = _stream(log, maxOffsetsPerTrigger="10")
    start = _stored(capped.initialOffset())
    log.latest = {t0: 200, t1: 200, t2: 50}  # records, and a partition new since the start
    end = _stored(capped.latestOffset(start, ReadMaxRows(10)))
    # the start, not the capped end; the new partition is not in it (planned from 0)
    assert off.planned_from(end) == {t0: 100, t1: 100}
    assert off.from_json(end) == {t0: 104, t1: 104, t2: 2}  # 10 shared by backlog
    replay = _stream(log)
    ranges = [r for p in replay.partitions(_stored(replay.initialOffset()), end) for r in p.ranges]  # type: ignore[attr-defined]
    assert ranges == [
        OffsetRange("t", 0, 100, 104),
        OffsetRange("t", 1, 100, 104),
        OffsetRange("t", 2, 0, 2),
    ]


def test_the_end_offsets_json_is_chosen_from_the_start_alone() -> None:
    plan, other = TaskPlan(None, None, 1000), TaskPlan(None, None, 0)
    at = {("t", 0): 10}
    initial = off.initial_json(at)
    first = off.end_json(initial, {("t", 0): 12}, plan)
    assert first == off.to_json({("t", 0): 12}, plan, start=at)
    assert off.end_json(initial, at, plan) == off.to_json(at, plan, start=at)  # batch 0 runs
    # nothing new: the start as Spark passed it, whatever keys it carries
    assert off.end_json(first, {("t", 0): 12}, other) is first
    assert off.end_json(off.to_json(at), at, plan) == off.to_json(at)  # an older oncelog's
    later = off.end_json(first, {("t", 0): 20}, other)
    assert later == off.to_json({("t", 0): 20}, other)  # no start beyond the first batch


def test_with_nothing_new_the_start_comes_back_as_it_is() -> None:
    """Spark runs a batch when the end differs from the start as JSON: an end that differs
    by oncelog's keys alone (the first batch's start, another plan) would run an empty one."""
    log = _Log({("t", 0): 10, ("t", 1): 10})
    stream = _stream(log)
    end_0 = _stored(stream.latestOffset(_stored(stream.initialOffset()), ReadAllAvailable()))
    assert off.FROM_KEY in end_0  # the first batch always runs, empty or not
    # compared as Spark compares them: the JSON text
    assert json.dumps(stream.latestOffset(end_0, ReadAllAvailable())) == json.dumps(end_0)
    # the next start under other options: no batch until records arrive
    other = _stream(log, combineRangesUpTo="0")
    assert json.dumps(other.latestOffset(end_0, ReadAllAvailable())) == json.dumps(end_0)
    log.latest = {("t", 0): 11, ("t", 1): 10}
    moved = other.latestOffset(end_0, ReadAllAvailable())
    assert off.from_json(moved) == {("t", 0): 11, ("t", 1): 10}
    assert off.plan_of(moved, TaskPlan(None, None, 1000)) == TaskPlan(None, None, 0)


@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(0, 300)), min_size=1, max_size=8),
    st.integers(0, 700),
    st.one_of(st.none(), st.integers(1, 10)),
    st.one_of(st.none(), st.integers(1, 200)),
    st.randoms(),
)
def test_tasks_cover_every_offset_once_in_order_and_a_replay_plans_the_same(
    spans: list[tuple[int, int]],
    combine_up_to: int,
    min_partitions: int | None,
    max_records: int | None,
    rnd: random.Random,
) -> None:
    if min_partitions is not None or max_records is not None:
        combine_up_to = 0  # the options refuse combining with a split
    plan = TaskPlan(min_partitions, max_records, combine_up_to)
    ranges = [OffsetRange("t", p, start, start + size) for p, (start, size) in enumerate(spans)]
    tasks = off.plan_tasks(ranges, plan)
    # what the tasks read, in the order they read it, per partition: every offset once, in order
    for rng in ranges:
        read = [
            o
            for task in tasks
            for r in task
            if r.partition == rng.partition
            for o in range(r.start, r.end)
        ]
        assert read == list(range(rng.start, rng.end))
    for task in tasks:
        assert task and all(r.size > 0 for r in task)
        if len(task) > 1:  # several ranges: at most the limit together, distinct partitions
            assert sum(r.size for r in task) <= combine_up_to
            assert len({r.partition for r in task}) == len(task)
    # a replay reads the batch's offsets back from the checkpoint's JSON, in any key order
    start = {(r.topic, r.partition): r.start for r in ranges}
    end = {(r.topic, r.partition): r.end for r in ranges}
    items = list(off.to_json(end, plan).items())
    rnd.shuffle(items)
    stored = json.loads(json.dumps(dict(items)))
    again = off.plan_tasks(
        off.plan_ranges(start, off.from_json(stored), {}), off.plan_of(stored, plan)
    )
    assert again == tasks


def test_partitions_gone_or_moved_back_are_data_loss_as_spark_reports_them() -> None:
    t0, t1, u0 = ("t", 0), ("t", 1), ("u", 0)
    assert not off.data_loss({t0: 5, t1: 5}, {t0: 5, t1: 9, u0: 3})
    lost = off.data_loss({t0: 10, t1: 5, u0: 4}, {t0: 3, t1: 5})
    assert lost.gone == (u0,) and lost.moved_back == ((t0, 10, 3),)
    assert lost.describe() == (
        "partitions gone: u-0; partition t-0's offset was changed from 10 to 3: "
        "some data may have been missed"
    )

    # a topic made again: its latest offset falls below the batch's start. The end goes
    # back with it (as Spark's), and the batch fails, or goes on from there without
    # failOnDataLoss, reading nothing of that partition in this batch
    log = _Log({t0: 3, t1: 9})
    start = {"t": {"0": 10, "1": 5}}
    strict = _stream(log, **{"fetchOffset.numRetries": "1"})
    end = _stored(strict.latestOffset(start, ReadAllAvailable()))
    assert off.from_json(end) == {t0: 3, t1: 9}
    with pytest.raises(DataLossError, match="t-0's offset was changed from 10 to 3"):
        strict.partitions(start, end)
    lenient = _stream(log, failOnDataLoss="false", **{"fetchOffset.numRetries": "1"})
    assert [p.ranges for p in lenient.partitions(start, end)] == [  # type: ignore[attr-defined]
        (OffsetRange("t", 1, 5, 9),)
    ]
    # a partition gone from the subscription is not kept in the end either
    log.latest = {t1: 9}
    end = _stored(strict.latestOffset(start, ReadAllAvailable()))
    assert off.from_json(end) == {t1: 9}
    with pytest.raises(DataLossError, match="partitions gone: t-0"):
        strict.partitions(start, end)
