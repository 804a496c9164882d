"""Readers: batch and micro-batch streaming, as Spark's Kafka source plans them.

The driver lists partitions and offsets (`Cluster`), decides each batch's offsets
(`offsets`: rate limits, delayed triggers, split and combined ranges) and hands each Spark
task its offset ranges (one, or several small ones); the task reads them one after the
other with `consume.read_range`. Everything that opens a socket
runs inside methods that execute on the driver's data-source runner or on executors; the
admin client is made on first use and dropped when the reader is pickled for the tasks.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from oncelog.spark import offsets as off
from oncelog.spark.client import Cluster
from oncelog.spark.consume import DataLossError, read_range
from oncelog.spark.options import (
    EARLIEST,
    LATEST,
    Earliest,
    GlobalTimestamp,
    Latest,
    OffsetLimit,
    OptionError,
    ReadOptions,
    SpecificOffsets,
    SpecificTimestamps,
)

log = logging.getLogger(__name__)


class OffsetRangePartition(InputPartition):
    """One Spark input partition: offset ranges of distinct topic-partitions, read in order."""

    def __init__(self, index: int, ranges: tuple[off.OffsetRange, ...]) -> None:
        super().__init__(index)
        self.ranges = ranges


def task_plan(options: ReadOptions) -> off.TaskPlan:
    """The plan the options ask for, for a batch planned now."""
    return off.TaskPlan(
        options.min_partitions, options.max_records_per_partition, options.combine_ranges_up_to
    )


def _input_partitions(
    plan: off.TaskPlan, ranges: Sequence[off.OffsetRange]
) -> list[OffsetRangePartition]:
    """Spark's input partitions of a batch: one per task of `plan`, numbered in order."""
    return [OffsetRangePartition(i, task) for i, task in enumerate(off.plan_tasks(ranges, plan))]


def _group_id(options: ReadOptions, default_prefix: str) -> str:
    """The executors' consumer group, as Spark names it: `kafka.group.id` when given, else
    a fresh one per query under `groupIdPrefix`. The consumers never join it."""
    if options.group_id is not None:
        return options.group_id
    return f"{options.group_id_prefix or default_prefix}-{uuid.uuid4()}-executor"


def _cluster_for(options: ReadOptions) -> Cluster:
    return Cluster(
        options.client,
        options.fetch_offset_retries,
        options.fetch_offset_retry_interval_ms,
        retries_option="fetchOffset.numRetries",
    )


def resolve(
    cluster: Cluster,
    options: ReadOptions,
    limit: OffsetLimit,
    tps: Sequence[off.TopicPartitionKey],
    starting: bool,
) -> off.Offsets:
    """Concrete offsets of `tps` for one end of a range."""
    if isinstance(limit, (Earliest, Latest)):
        which = "earliest" if isinstance(limit, Earliest) else "latest"
        return cluster.offsets(tps, which, options.read_committed)
    if isinstance(limit, SpecificOffsets):
        _same_partitions(
            limit.option, set(limit.offsets), tps, "Use -1 for latest, -2 for earliest."
        )
        special = {tp for tp, o in limit.offsets.items() if o in (EARLIEST, LATEST)}
        earliest = cluster.offsets(
            [tp for tp in special if limit.offsets[tp] == EARLIEST],
            "earliest",
            options.read_committed,
        )
        latest = cluster.offsets(
            [tp for tp in special if limit.offsets[tp] == LATEST], "latest", options.read_committed
        )
        return {tp: earliest.get(tp, latest.get(tp, limit.offsets[tp])) for tp in tps}
    if isinstance(limit, SpecificTimestamps):
        _same_partitions(limit.option, set(limit.timestamps), tps, "")
        timestamps = dict(limit.timestamps)
    else:
        assert isinstance(limit, GlobalTimestamp)
        timestamps = dict.fromkeys(tps, limit.timestamp)
    found = cluster.offsets_for_times(timestamps, options.read_committed)
    unmatched = sorted(tp for tp in tps if found[tp] is None)
    if unmatched and not limit.latest_when_none:
        tp = unmatched[0]
        bound = "last stable offset" if options.read_committed else "high watermark"
        raise OptionError(
            f"option {limit.option}: no offset matched from request of topic-partition "
            f"{tp[0]}-{tp[1]} and timestamp {timestamps[tp]} (no record that late below the "
            f"{bound}; set startingOffsetsByTimestampStrategy=latest to start at the latest "
            "offset instead)"
        )
    latest = cluster.offsets(unmatched, "latest", options.read_committed)
    return {tp: latest[tp] if found[tp] is None else found[tp] for tp in tps}  # type: ignore[misc]


def _same_partitions(
    option: str,
    named: set[off.TopicPartitionKey],
    tps: Sequence[off.TopicPartitionKey],
    hint: str,
) -> None:
    if named != set(tps):
        raise OptionError(
            f"option {option} must give every partition read, and only those. {hint} "
            f"Specified: {_names(named)}; assigned: {_names(tps)}"
        )


def _names(tps: Any) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(tps)) or "none"


def _read(
    options: ReadOptions, group_id: str, partition: InputPartition
) -> Iterator[pa.RecordBatch]:
    # PySpark hands an empty plan one placeholder partition: nothing to read
    if isinstance(partition, OffsetRangePartition):
        for rng in partition.ranges:
            yield from read_range(options, rng, group_id)


class OncelogBatchReader(DataSourceReader):
    """``spark.read.format("oncelog")``: one input partition per topic-partition range."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.group_id = _group_id(options, "spark-kafka-relation")

    def partitions(self) -> Sequence[InputPartition]:
        options = self.options
        cluster = _cluster_for(options)
        tps = cluster.partitions(options.subscription)
        if not tps:
            log.warning("%s matches no topic: nothing to read", options.subscription.describe())
            return []
        start = resolve(cluster, options, options.starting, tps, starting=True)
        end = resolve(cluster, options, options.ending, tps, starting=False)
        latest = cluster.offsets(tps, "latest", options.read_committed)
        beyond = sorted(tp for tp in tps if end[tp] > latest[tp])
        if beyond:
            raise OptionError(
                "the ending offsets are past what can be read now ("
                + ("the last stable offset" if options.read_committed else "the high watermark")
                + "): "
                + ", ".join(f"{t}-{p}: {end[(t, p)]} > {latest[(t, p)]}" for t, p in beyond)
            )
        for tp in tps:
            if start[tp] > end[tp]:
                raise OptionError(
                    f"{tp[0]}-{tp[1]}: the starting offset {start[tp]} is after the ending "
                    f"offset {end[tp]}"
                )
        return _input_partitions(task_plan(options), off.plan_ranges(start, end, {}))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from _read(self.options, self.group_id, partition)


class OncelogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader. Offsets end at the LSO under read_committed (the high watermark
    under read_uncommitted); partitions that appear later start at their earliest offset."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.group_id = _group_id(options, "spark-kafka-source")
        self._cluster: Cluster | None = None
        self._initial: dict | None = None  # initialOffset's answer in this run
        self._target: off.Offsets | None = None  # availableNow: never read past this
        self._latest: off.Offsets | None = None  # for reportLatestOffset
        self._last_trigger_ms = 0  # minOffsetsPerTrigger: when a batch last ran

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cluster"] = None  # a client is not picklable; tasks do not need it
        return state

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            self._cluster = _cluster_for(self.options)
        return self._cluster

    def initialOffset(self) -> dict:
        """The first batch's start, marked so that `latestOffset` records it in the batch's
        end offset. Spark asks for it again, instead of reading it from its offset log,
        whenever it runs batch 0: in the first attempt and in a replay after a restart
        (`MicroBatchExecution.runBatch`; its own Kafka source keeps it in the checkpoint,
        which a Python source cannot). Under startingOffsets=latest, or earliest with a
        log start moved since, that start differs: `partitions` plans from the recorded
        one. Kept: the second request in the same run gets the same answer without asking
        the cluster again; a new run (a replay) resolves the options again, so they must
        still resolve then (a JSON `startingOffsets` must name every partition read)."""
        if self._initial is None:
            tps = self.cluster.partitions(self.options.subscription)
            self._initial = off.initial_json(
                resolve(self.cluster, self.options, self.options.starting, tps, starting=True)
            )
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self.cluster.partitions(self.options.subscription)
        self._target = self.cluster.offsets(tps, "latest", self.options.read_committed)

    def _latest_offsets(
        self, tps: Sequence[off.TopicPartitionKey], known: off.Offsets
    ) -> off.Offsets:
        """The latest offsets, asked again (fetchOffset.numRetries, retryIntervalMs) while
        some partition's is below the offset already read, as Spark's source does."""
        attempt = 1
        while True:
            latest = self.cluster.offsets(tps, "latest", self.options.read_committed)
            behind = sorted(tp for tp in tps if tp in known and latest[tp] < known[tp])
            if not behind or attempt >= self.options.fetch_offset_retries:
                if behind:
                    log.warning(
                        "latest offsets still below the offsets already read after "
                        "fetchOffset.numRetries attempts (the batch reports it as data loss): %s",
                        {f"{t}-{p}": (known[(t, p)], latest[(t, p)]) for t, p in behind},
                    )
                return latest
            attempt += 1
            time.sleep(self.options.fetch_offset_retry_interval_ms / 1000)

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        current = off.from_json(start)
        if self._target is not None:
            # availableNow: partitions created after the target was taken are not read
            tps = sorted(self._target)
            available = dict(self._target)
        else:
            tps = self.cluster.partitions(self.options.subscription)
            available = self._latest_offsets(tps, current)
        new = [tp for tp in tps if tp not in current]
        starts = dict(current)
        starts.update(self.cluster.offsets(new, "earliest", self.options.read_committed))
        self._latest = available
        admitted = self._admitted(current, starts, available, limit)
        # As Spark's source: the end is the latest offsets (a batch put off ends where it
        # starts), below the start where a topic was made again, and without the
        # partitions that are gone; `partitions` reports both (failOnDataLoss).
        end = dict(current) if admitted is None else admitted
        # the batch ending here is planned (and replayed) with today's task options
        return dict(off.end_json(start, end, task_plan(self.options)))

    def _admitted(
        self,
        current: off.Offsets,
        starts: off.Offsets,
        available: off.Offsets,
        limit: ReadLimit | None,
    ) -> off.Offsets | None:
        """The end of the next batch under the query's limits, None to put the batch off
        (Spark's order: minOffsetsPerTrigger first, then the cap). Under availableNow the
        minimum does not apply: the target is all there will be."""
        if limit is None or isinstance(limit, ReadAllAvailable):
            return available
        options = self.options
        if options.min_offsets_per_trigger is not None and self._target is None:
            decision = off.admit_trigger(
                current,
                available,
                options.min_offsets_per_trigger,
                options.max_trigger_delay_ms,
                self._last_trigger_ms,
                int(time.time() * 1000),
            )
            self._last_trigger_ms = decision.fired_at_ms
            if not decision.run:
                return None
        if options.max_offsets_per_trigger is not None:
            return off.rate_limit(starts, available, options.max_offsets_per_trigger)
        return available

    def reportLatestOffset(self) -> dict | None:
        """The latest offsets seen by the last `latestOffset`: Spark's progress reports
        show them as the source's `latestOffset`."""
        return off.to_json(self._latest) if self._latest else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """The batch's tasks, planned as its end offset records (a replay after a restart
        with other options, or another oncelog, gets the same tasks; an end offset of an
        oncelog that did not record it was planned a task per range). The first batch
        starts where its end offset says it was planned from, not at the `start` Spark
        passes, which is a fresh `initialOffset` (an end offset without it, from an
        older oncelog, starts there). A partition that is new in this batch is planned
        from offset 0, not from its log start now, which a replay could find moved: its
        reader skips to the log start under failOnDataLoss=false, as Spark's does.
        Partitions gone, or whose offsets went back, fail the batch under failOnDataLoss
        (`off.data_loss`) and are left out of it otherwise, as Spark's source does."""
        recorded = off.planned_from(end)
        begin = off.from_json(start) if recorded is None else recorded
        finish = off.from_json(end)
        # a fresh initialOffset against a first batch's end that did not record its start
        # (an older oncelog's) is no start the batch had: nothing to compare
        fresh = recorded is None and off.is_initial(start)
        lost = off.data_loss({} if fresh else begin, finish)
        if lost and self.options.fail_on_data_loss:
            raise DataLossError(
                f"{lost.describe()}. Set failOnDataLoss=false to go on without them (from "
                "the partitions' new offsets)."
            )
        if lost:
            log.warning("%s (failOnDataLoss=false: going on)", lost.describe())
        if self.options.fail_on_data_loss:
            new = [tp for tp in finish if tp not in begin]
            new_start = self.cluster.offsets(new, "earliest", self.options.read_committed)
            late = sorted(tp for tp, o in new_start.items() if o != 0)
            if late:
                raise DataLossError(
                    "added partitions do not start at offset 0 ("
                    + ", ".join(f"{t}-{p} starts at {new_start[(t, p)]}" for t, p in late)
                    + "): their first records are gone. Set failOnDataLoss=false to read "
                    "from the log start instead."
                )
        unrecorded = off.TaskPlan(
            self.options.min_partitions, self.options.max_records_per_partition, 0
        )
        plan = off.plan_of(end, unrecorded)
        return _input_partitions(plan, off.plan_ranges(begin, finish, {}))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from _read(self.options, self.group_id, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: the checkpoint is the source's only state (no group offsets)."""
