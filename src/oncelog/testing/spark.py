"""Fault injection for the Spark sink, for tests and the demonstration; never in production.

`format("oncelog_faults")` is the `oncelog` data source with two more sink options:

- `failAfter=N`: the first attempt of every task writes N records, flushes them to the
  broker and then dies as a crashed worker would, its transaction left open, nothing
  aborted. Spark retries the task; the retry's producer must fence the dead attempt and
  write everything again, and the N records stay in the log, in a transaction that is
  aborted.
- `holdCommitsWhile=PATH`: a streaming query's driver-side commit of a batch waits while
  the file PATH exists (at most `HOLD_LIMIT_S`). Between the tasks' commits and that
  commit's return, Spark has not recorded the batch as done (no `commits/N` in the
  checkpoint): the demonstration creates the file when it aims its driver kill at that
  moment, which lasts only some milliseconds otherwise, so the kill always finds a batch
  that is fully written and will be replayed.

- `trustInputEnd=true`: the sink takes an end of its input for the end (without
  `input_end`'s check): the control of the tests that cut a task's input off.

And one source option:

- `holdAfterInitialOffset=DIR`: a streaming query's `initialOffset`, once it has the first
  batch's start, writes it to DIR/initial.json and waits while DIR/hold exists (at most
  `HOLD_LIMIT_S`). Records a test produces meanwhile arrive between the first batch's
  start and its end, as records do that arrive while a query starts at the latest offsets.

The production writer takes the hook as an argument (`writer.Faults`); only this data
source passes one. The source's hook is a subclass of the stream reader.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import StructType

from oncelog.spark.options import (
    OptionError,
    ReadOptions,
    WriteOptions,
    parse_read_options,
    parse_write_options,
)
from oncelog.spark.reader import OncelogStreamReader
from oncelog.spark.schema import spark_schema
from oncelog.spark.source import OncelogDataSource
from oncelog.spark.writer import OncelogBatchWriter, OncelogStreamWriter, TaskAttempt

FAIL_AFTER = "failAfter"
HOLD_COMMITS_WHILE = "holdCommitsWhile"
HOLD_AFTER_INITIAL_OFFSET = "holdAfterInitialOffset"
TRUST_INPUT_END = "trustInputEnd"
HOLD_LIMIT_S = 300.0  # a demonstration that never kills its driver does not hang it for ever


class SimulatedCrash(BaseException):  # not an Exception: nothing may handle it
    """A task attempt dying as if its worker had been killed."""


@dataclass(frozen=True)
class FailAfter:
    """The first attempt of every task dies after writing `records` records."""

    records: int

    def input(
        self, batches: Iterator[pa.RecordBatch], task: TaskAttempt, flush: Callable[[], object]
    ) -> Iterator[pa.RecordBatch]:
        if task.attempt > 0:
            yield from batches
            return
        left = self.records
        for batch in batches:
            if batch.num_rows < left:
                left -= batch.num_rows
                yield batch
                continue
            yield batch.slice(0, left)
            flush()  # the records reach the log, inside the transaction left open
            raise SimulatedCrash(
                f"{FAIL_AFTER}: task {task.partition} attempt 0 dies after {self.records} records"
            )


@dataclass(frozen=True)
class CommitHold:
    """A wait while `path` exists, at most `limit_s`: a batch's driver-side commit
    (holdCommitsWhile; the demonstration's driver kill SIGKILLs this Python worker with the
    JVM), or a stream reader's first start (holdAfterInitialOffset)."""

    path: Path
    limit_s: float = HOLD_LIMIT_S

    def wait(self) -> None:
        deadline = time.monotonic() + self.limit_s
        while self.path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)


class HeldStartStreamReader(OncelogStreamReader):
    """The oncelog stream reader whose `initialOffset` reports its start to `directory`
    (initial.json) and then waits while directory/hold exists."""

    def __init__(self, options: ReadOptions, directory: Path) -> None:
        super().__init__(options)
        self.directory = directory

    def initialOffset(self) -> dict:
        start = super().initialOffset()
        (self.directory / "initial.json").write_text(json.dumps(start))
        CommitHold(self.directory / "hold").wait()
        return start


def _option(options: Any, name: str) -> Any:
    return {str(k).lower(): v for k, v in options.items()}.get(name.lower())


def _faults(options: Any) -> FailAfter | None:
    raw = _option(options, FAIL_AFTER)
    if raw is None:
        return None
    try:
        return FailAfter(int(raw))
    except ValueError:
        raise OptionError(f"option {FAIL_AFTER}={raw!r}: expected an integer") from None


def _hold(options: Any) -> CommitHold | None:
    raw = _option(options, HOLD_COMMITS_WHILE)
    return CommitHold(Path(raw)) if raw else None


def _checks_input_end(options: Any) -> bool:
    return str(_option(options, TRUST_INPUT_END) or "false").lower() != "true"


def _source_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The source's options without the hook, which the production parser refuses."""
    return {k: v for k, v in options.items() if str(k).lower() != HOLD_AFTER_INITIAL_OFFSET.lower()}


class HeldOncelogStreamWriter(OncelogStreamWriter):
    """The oncelog stream writer whose driver-side commit waits for `hold` first."""

    def __init__(
        self,
        options: WriteOptions,
        schema: StructType,
        faults: FailAfter | None,
        hold: CommitHold | None,
        check_input_end: bool,
    ) -> None:
        super().__init__(options, schema, faults, check_input_end)
        self.hold = hold

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.hold is not None:
            self.hold.wait()
        super().commit(messages, batchId)


class FaultyOncelogDataSource(OncelogDataSource):
    """The oncelog data source whose sink takes `failAfter`, `holdCommitsWhile` and
    `trustInputEnd`, and its source `holdAfterInitialOffset`."""

    @classmethod
    def name(cls) -> str:
        return "oncelog_faults"

    def schema(self) -> StructType:
        options = parse_read_options(_source_options(self.options), streaming=None)
        return spark_schema(options.include_headers)

    def streamReader(self, schema: StructType) -> OncelogStreamReader:
        options = parse_read_options(_source_options(self.options), streaming=True)
        held = _option(self.options, HOLD_AFTER_INITIAL_OFFSET)
        if held is None:
            return OncelogStreamReader(options)
        return HeldStartStreamReader(options, Path(held))

    def writer(self, schema: StructType, overwrite: bool) -> OncelogBatchWriter:
        options = parse_write_options(self.options, extra=(FAIL_AFTER, TRUST_INPUT_END))
        return OncelogBatchWriter(
            options, schema, _faults(self.options), _checks_input_end(self.options)
        )

    def streamWriter(self, schema: StructType, overwrite: bool) -> OncelogStreamWriter:
        options = parse_write_options(
            self.options, extra=(FAIL_AFTER, HOLD_COMMITS_WHILE, TRUST_INPUT_END)
        )
        return HeldOncelogStreamWriter(
            options,
            schema,
            _faults(self.options),
            _hold(self.options),
            _checks_input_end(self.options),
        )


def register_faults(spark: Any) -> None:
    """Register `format("oncelog_faults")` on a SparkSession."""
    spark.dataSource.register(FaultyOncelogDataSource)
