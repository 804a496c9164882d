"""Fault injection for the Spark sink, for tests and the demonstration; never in production.

`format("oncelog_faults")` is the `oncelog` data source with one more sink option,
`failAfter=N`: the first attempt of every task writes N records, flushes them to the broker
and then dies as a crashed worker would, its transaction left open, nothing aborted. Spark
retries the task; the retry's producer must fence the dead attempt and write everything
again, and the N records stay in the log, in a transaction that is aborted.

The production writer takes the hook as an argument (`writer.Faults`); only this data
source passes one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.types import StructType

from oncelog.spark.options import OptionError, parse_write_options
from oncelog.spark.source import OncelogDataSource
from oncelog.spark.writer import OncelogBatchWriter, OncelogStreamWriter, TaskAttempt

FAIL_AFTER = "failAfter"


class SimulatedCrash(BaseException):  # not an Exception: nothing may handle it
    """A task attempt dying as if its worker had been killed."""


@dataclass(frozen=True)
class FailAfter:
    """The first attempt of every task dies after writing `records` records."""

    records: int

    def input(
        self, batches: Iterator[pa.RecordBatch], task: TaskAttempt, flush: Callable[[], None]
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


def _faults(options: Any) -> FailAfter | None:
    raw = {str(k).lower(): v for k, v in options.items()}.get(FAIL_AFTER.lower())
    if raw is None:
        return None
    try:
        return FailAfter(int(raw))
    except ValueError:
        raise OptionError(f"option {FAIL_AFTER}={raw!r}: expected an integer") from None


class FaultyOncelogDataSource(OncelogDataSource):
    """The oncelog data source whose sink takes `failAfter`."""

    @classmethod
    def name(cls) -> str:
        return "oncelog_faults"

    def writer(self, schema: StructType, overwrite: bool) -> OncelogBatchWriter:
        options = parse_write_options(self.options, extra=(FAIL_AFTER,))
        return OncelogBatchWriter(options, schema, _faults(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> OncelogStreamWriter:
        options = parse_write_options(self.options, extra=(FAIL_AFTER,))
        return OncelogStreamWriter(options, schema, _faults(self.options))


def register_faults(spark: Any) -> None:
    """Register `format("oncelog_faults")` on a SparkSession."""
    spark.dataSource.register(FaultyOncelogDataSource)
