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

The production writer takes the hook as an argument (`writer.Faults`); only this data
source passes one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import StructType

from oncelog.spark.options import OptionError, WriteOptions, parse_write_options
from oncelog.spark.source import OncelogDataSource
from oncelog.spark.writer import OncelogBatchWriter, OncelogStreamWriter, TaskAttempt

FAIL_AFTER = "failAfter"
HOLD_COMMITS_WHILE = "holdCommitsWhile"
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
    """A batch's driver-side commit waits while `path` exists, at most `limit_s`. (The
    demonstration's driver kill SIGKILLs this Python worker with the JVM.)"""

    path: Path
    limit_s: float = HOLD_LIMIT_S

    def wait(self) -> None:
        deadline = time.monotonic() + self.limit_s
        while self.path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)


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


class HeldOncelogStreamWriter(OncelogStreamWriter):
    """The oncelog stream writer whose driver-side commit waits for `hold` first."""

    def __init__(
        self,
        options: WriteOptions,
        schema: StructType,
        faults: FailAfter | None,
        hold: CommitHold | None,
    ) -> None:
        super().__init__(options, schema, faults)
        self.hold = hold

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.hold is not None:
            self.hold.wait()
        super().commit(messages, batchId)


class FaultyOncelogDataSource(OncelogDataSource):
    """The oncelog data source whose sink takes `failAfter` and `holdCommitsWhile`."""

    @classmethod
    def name(cls) -> str:
        return "oncelog_faults"

    def writer(self, schema: StructType, overwrite: bool) -> OncelogBatchWriter:
        options = parse_write_options(self.options, extra=(FAIL_AFTER,))
        return OncelogBatchWriter(options, schema, _faults(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> OncelogStreamWriter:
        options = parse_write_options(self.options, extra=(FAIL_AFTER, HOLD_COMMITS_WHILE))
        return HeldOncelogStreamWriter(options, schema, _faults(self.options), _hold(self.options))


def register_faults(spark: Any) -> None:
    """Register `format("oncelog_faults")` on a SparkSession."""
    spark.dataSource.register(FaultyOncelogDataSource)
