"""Where the pipeline's time goes: the order-enrichment job's shape (`pipeline.job.enrich`:
from_json, the customer lookup, to_json) between other sources and sinks, as ratios of
one run. The job's table has 200 customers, so its shapes take the lookup path (a table
above `LOOKUP_MAX_CUSTOMERS` would be joined).

    .venv/bin/python bench/pipeline_floor.py              # 10 micro-batches of 2,000 each
    .venv/bin/python bench/pipeline_floor.py --rounds 3

A benchmark, not a test. It starts a broker subprocess (temporary data directory), writes
the orders once, starts one SparkSession (`pipeline.job.new_session`, local[2,3]) and runs
each shape once untimed (the JVM's compiler warms up), then --rounds times, in turn:

- rate -> noop: Spark's rate-micro-batch source making the same JSON orders, into the noop
  sink: what Spark alone costs this job shape;
- the same with the customer table broadcast and joined to every micro-batch, as the job
  did before (a local relation): what the join cost;
- python -> python: a Python streaming source that hands over ready Arrow batches of
  orders and a Python sink that only iterates its input: what PySpark's Python data
  sources cost, with no Kafka;
- python -> noop, rate -> python: the Python source's and the Python sink's shares of it;
- oncelog -> noop, rate -> oncelog (exactly_once), oncelog -> oncelog (exactly_once, the
  pipeline): the oncelog source's and sink's shares, to compare with the two above;
- the pipeline with the customer table joined as before.

Each query's time runs from its start to the end of its --batches-th micro-batch with rows
(the oncelog source: availableNow over the orders; the others trigger as fast as they
can). It prints the best of each shape: records/s, the delay from the start to the first
micro-batch, and the mean of Spark's phases of a micro-batch; and the load average before
and after. The broker is always stopped and the temporary directory removed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)

from common import create_topics, load_average
from oncelog.pipeline import PARTITIONS
from oncelog.pipeline.job import (
    CUSTOMER_FIELDS,
    customer_rows,
    enrich,
    enriched_records,
    new_session,
    parse_orders,
)
from oncelog.pipeline.orders import CUSTOMERS_COUNT, generate, produce_orders
from oncelog.testing.process import BrokerProcess

PHASES = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets")


class _OrdersReader(DataSourceStreamReader):
    """`per_trigger` orders a micro-batch, in PARTITIONS ready Arrow batches, no I/O."""

    def __init__(self, per_trigger: int) -> None:
        orders = generate(per_trigger // PARTITIONS)
        self.values = [json.dumps(order, separators=(",", ":")).encode() for order in orders]

    def initialOffset(self) -> dict:
        return {"batch": 0}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        return {"batch": (start or {"batch": 0})["batch"] + 1}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [InputPartition(i) for i in range(PARTITIONS)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield pa.record_batch([pa.array(self.values, pa.binary())], names=["value"])


class _IteratingWriter(DataSourceStreamArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        for _ in iterator:
            pass
        return WriterCommitMessage()

    def commit(self, messages: Any, batchId: int) -> None:
        pass


class FloorSource(DataSource):
    """PySpark's own cost of a Python source and a Python sink. Defined in the benchmark's
    __main__, so the workers get it by value (cloudpickle)."""

    @classmethod
    def name(cls) -> str:
        return "bench_pipeline_floor"

    def schema(self) -> str:
        return "value binary"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _OrdersReader(int(self.options["per_trigger"]))

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamArrowWriter:
        return _IteratingWriter()


def enrich_with_the_jobs_table(orders: Any) -> Any:
    """The job's shape: its customer table, looked up."""
    return enrich(orders, customer_rows())


def enrich_with_join(orders: Any) -> Any:
    """The job's shape up to 7373da2: the customer table as a local relation (an inline
    SQL table, strings as UTF-8 binary literals), broadcast and left-joined to every
    micro-batch."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    def literal(value: Any) -> str:
        return (
            f"CAST(X'{value.encode().hex()}' AS STRING)"
            if isinstance(value, str)
            else f"{value!r}D"
        )

    rows = ", ".join(
        f"({c['customer_id']}, " + ", ".join(literal(c[f]) for f in CUSTOMER_FIELDS) + ")"
        for c in customer_rows()
    )
    columns = ", ".join(("customer_id", *CUSTOMER_FIELDS))
    spark = SparkSession.active()
    table = spark.sql(f"SELECT * FROM VALUES {rows} AS t({columns})")
    return enriched_records(parse_orders(orders).join(F.broadcast(table), "customer_id", "left"))


@dataclass
class Shape:
    name: str
    source: str  # rate, python or oncelog
    sink: str  # noop, python or oncelog
    job: Callable[[Any], Any] = enrich_with_the_jobs_table


@dataclass
class Timing:
    seconds: float  # start to the end of the last timed micro-batch
    rows: int
    first_batch_ms: float  # start() returned -> first micro-batch began
    phases: dict[str, float]  # mean ms a micro-batch
    batch_ms: list[float]  # each timed micro-batch's triggerExecution, in order


def _timestamp(text: str) -> float:
    return datetime.strptime(text.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


class Bench:
    def __init__(self, spark: Any, bootstrap: str, work: Path, args: argparse.Namespace) -> None:
        self.spark, self.bootstrap, self.work, self.args = spark, bootstrap, work, args
        self.runs = 0

    def _input(self, source: str) -> Any:
        from pyspark.sql import functions as F

        read = self.spark.readStream
        if source == "rate":
            rate = (
                read.format("rate-micro-batch")
                .option("rowsPerBatch", str(self.args.per_trigger))
                .option("numPartitions", str(PARTITIONS))
                .load()
            )
            order = F.struct(
                F.col("value").alias("order_id"),
                (F.col("value") % CUSTOMERS_COUNT).cast("int").alias("customer_id"),
                (F.col("value") % 1000 + 5.25).alias("amount"),
                F.col("value").alias("ts"),
            )
            return rate.select(F.to_json(order).cast("binary").alias("value"))
        if source == "python":
            return (
                read.format(FloorSource.name())
                .option("per_trigger", str(self.args.per_trigger))
                .load()
            )
        return (
            read.format("oncelog")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("subscribe", "orders")
            .option("startingOffsets", "earliest")
            .option("kafka.isolation.level", "read_committed")
            .option("maxOffsetsPerTrigger", str(self.args.per_trigger))
            .option("combineRangesUpTo", "0")
            .load()
        )

    def run(self, shape: Shape) -> Timing:
        self.runs += 1
        name = f"{shape.source}-{shape.sink}-{self.runs}"
        writer = shape.job(self._input(shape.source)).writeStream.option(
            "checkpointLocation", str(self.work / f"ck-{name}")
        )
        if shape.sink == "oncelog":
            create_topics(self.bootstrap, [f"out-{name}"], PARTITIONS)
            writer = (
                writer.format("oncelog")
                .option("kafka.bootstrap.servers", self.bootstrap)
                .option("topic", f"out-{name}")
                .option("sink.id", f"bench-floor-{name}")
            )
        else:
            writer = writer.format("noop" if shape.sink == "noop" else FloorSource.name())
        if shape.source == "oncelog":
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime="0 seconds")
        started = time.time()
        query = writer.start()
        began = time.time()
        deadline = time.monotonic() + 600
        try:
            while len(self._done(query)) < self.args.batches:
                if query.exception() is not None:
                    raise RuntimeError(str(query.exception()))
                if not query.isActive:
                    raise RuntimeError(f"{name} ended after {len(self._done(query))} batches")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name}: not {self.args.batches} batches in 600 s")
                time.sleep(0.05)
        finally:
            query.stop()
        done = self._done(query)[: self.args.batches]
        end = _timestamp(done[-1]["timestamp"]) + done[-1]["batchDuration"] / 1000
        return Timing(
            end - started,
            sum(p["numInputRows"] for p in done),
            1000 * (_timestamp(done[0]["timestamp"]) - began),
            {k: statistics.mean(p["durationMs"].get(k, 0) for p in done) for k in PHASES},
            [p["durationMs"]["triggerExecution"] for p in done],
        )

    @staticmethod
    def _done(query: Any) -> list[Any]:
        return [p for p in query.recentProgress if p["numInputRows"] > 0]


SHAPES = (
    Shape("rate -> noop (Spark's floor)", "rate", "noop"),
    Shape("rate -> noop, joined as before", "rate", "noop", enrich_with_join),
    Shape("python -> python (PySpark's floor)", "python", "python"),
    Shape("python -> noop", "python", "noop"),
    Shape("rate -> python", "rate", "python"),
    Shape("oncelog -> noop", "oncelog", "noop"),
    Shape("rate -> oncelog exactly_once", "rate", "oncelog"),
    Shape("oncelog -> oncelog exactly_once (pipeline)", "oncelog", "oncelog"),
    Shape("the pipeline, joined as before", "oncelog", "oncelog", enrich_with_join),
)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--per-trigger", type=int, default=2000, help="rows a micro-batch")
    parser.add_argument("--batches", type=int, default=10, help="timed micro-batches a query")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(f"start: {load_average()}", flush=True)
    best: dict[str, Timing] = {}
    with tempfile.TemporaryDirectory(prefix="oncelog-bench-floor-") as tmp:
        work = Path(tmp)
        with BrokerProcess(work / "broker", {"num.partitions": str(PARTITIONS)}) as broker:
            create_topics(broker.bootstrap_servers, ["orders"], PARTITIONS)
            # offsets, not rows, bound a batch: the transactions' markers take some
            produce_orders(
                broker.bootstrap_servers, "orders", args.per_trigger * (args.batches + 1)
            )
            spark = new_session("oncelog-bench-pipeline-floor")
            spark.sparkContext.setLogLevel("ERROR")
            spark.dataSource.register(FloorSource)
            bench = Bench(spark, broker.bootstrap_servers, work, args)
            try:
                for shape in SHAPES:  # warm-up
                    bench.run(shape)
                for _ in range(args.rounds):
                    for shape in SHAPES:
                        timing = bench.run(shape)
                        if shape.name not in best or timing.seconds < best[shape.name].seconds:
                            best[shape.name] = timing
            finally:
                spark.stop()
    print(f"end: {load_average()}")
    print(
        f"{args.batches} micro-batches of {args.per_trigger:,} offsets, {PARTITIONS} partitions, "
        f"local[2,3], best of {args.rounds}; ms: to the first micro-batch, then a micro-batch's "
        "mean phases"
    )
    floor = best[SHAPES[0].name]
    floor_rate = floor.rows / floor.seconds
    for shape in SHAPES:
        t = best[shape.name]
        rate = t.rows / t.seconds
        phases = " ".join(f"{k} {v:4.0f}" for k, v in t.phases.items())
        print(
            f"  {shape.name:<44} {rate:>7,.0f} rec/s  floor/this {floor_rate / rate:4.1f}  "
            f"first {t.first_batch_ms:5.0f}  {phases}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
