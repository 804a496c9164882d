"""The customer table's cost a micro-batch, by the table's size, over many micro-batches:
the order-enrichment job's shape (`pipeline.job.enrich`) between Spark's rate-micro-batch
source and the noop sink, with a table of N customers looked up (a constant map: the job's
way up to `LOOKUP_MAX_CUSTOMERS`) or joined (a broadcast of `customer_relation`: its way
above).

    .venv/bin/python bench/pipeline_table.py                       # 1,000 5,000 50,000; both
    .venv/bin/python bench/pipeline_table.py --sizes 50000 --paths join --batches 200

A benchmark, not a test: no broker (the rate source makes the orders). One SparkSession
(`pipeline.job.new_session`, local[2,3]); one untimed query of the job's own table first
(the JVM's compiler warms up); then, --rounds times (the order reversed every other
round: the JVM's memory drifts over a run), one query per size and path, each for
--batches micro-batches with rows. To take a path the job does not take at that size, the
bound is moved while `enrich` builds the query (the lookup of 50,000 customers; the join
of 1,000), nothing else. The rate source's orders name customers 0-199 only
(`CUSTOMERS_COUNT`), whatever the table's size: what grows with the size is the table's
own cost (folding it into each micro-batch's plan, or broadcasting it), not the matches.

For each query it prints the mean ms a micro-batch (`triggerExecution`) of the first 10
micro-batches and of the rest (the steady state: does a path's cost grow, or fall once the
JVM has compiled it?), the slowest one, Spark's mean phases, and the GC time of the JVM
(driver and executors: local mode) during the query. Figures compare only as ratios within
one run; the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from common import load_average
from oncelog.pipeline import job
from oncelog.pipeline.orders import TAX_RATES
from pipeline_floor import Bench, Shape, enrich_with_the_jobs_table

FIRST = 10  # the micro-batches reported apart from the steady state
PATHS = ("lookup", "join")


def customer_table(size: int) -> list[dict[str, Any]]:
    """`size` customers in the job's table's columns, countries and tax rates in turn."""
    countries = sorted(TAX_RATES)
    return [
        {
            "customer_id": i,
            "name": f"customer {i}",
            "tier": ("gold", "silver", "bronze")[i % 3],
            "country": countries[i % len(countries)],
            "tax_rate": TAX_RATES[countries[i % len(countries)]],
        }
        for i in range(size)
    ]


@contextmanager
def _bound(path: str, size: int) -> Iterator[None]:
    """`LOOKUP_MAX_CUSTOMERS` moved so that `enrich` takes `path` for a table of `size`."""
    kept = job.LOOKUP_MAX_CUSTOMERS
    job.LOOKUP_MAX_CUSTOMERS = size if path == "lookup" else size - 1
    try:
        yield
    finally:
        job.LOOKUP_MAX_CUSTOMERS = kept


def enriching(table: Sequence[Mapping[str, Any]], path: str) -> Callable[[Any], Any]:
    """The job's shape with `table`, by `path`."""

    def shape(orders: Any) -> Any:
        with _bound(path, len(table)):
            return job.enrich(orders, table)

    return shape


def gc_ms(spark: Any) -> int:
    """The JVM's GC time so far (all collectors)."""
    factory = spark.sparkContext._jvm.java.lang.management.ManagementFactory
    return sum(int(bean.getCollectionTime()) for bean in factory.getGarbageCollectorMXBeans())


def report(name: str, batch_ms: Sequence[float], phases: Mapping[str, float], gc: int) -> str:
    first, rest = batch_ms[:FIRST], batch_ms[FIRST:]
    steady = f"{statistics.mean(rest):6.0f}" if rest else "     -"
    parts = " ".join(f"{k} {v:4.0f}" for k, v in phases.items())
    return (
        f"  {name:<16} first {FIRST} {statistics.mean(first):6.0f}  then {steady}  "
        f"slowest {max(batch_ms):6.0f}  GC {gc:6,} ms   {parts}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,5000,50000", help="customers, comma-separated")
    parser.add_argument("--paths", default=",".join(PATHS), help="lookup, join or both")
    parser.add_argument("--batches", type=int, default=100, help="micro-batches a query")
    parser.add_argument("--per-trigger", type=int, default=2000, help="rows a micro-batch")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    paths = args.paths.split(",")
    if not set(paths) <= set(PATHS) or args.batches <= FIRST:
        parser.error(f"--paths takes {' and '.join(PATHS)}; --batches must exceed {FIRST}")
    shapes = [
        Shape(f"{size:,} {path}", "rate", "noop", enriching(customer_table(size), path))
        for size in sizes
        for path in paths
    ]
    print(f"start: {load_average()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="oncelog-bench-table-") as tmp:
        spark = job.new_session("oncelog-bench-pipeline-table")
        spark.sparkContext.setLogLevel("ERROR")
        bench = Bench(spark, "unused: rate source", Path(tmp), args)
        try:
            bench.run(Shape("warm-up", "rate", "noop", enrich_with_the_jobs_table))
            print(
                f"{args.batches} micro-batches of {args.per_trigger:,} rows a query; ms a "
                "micro-batch, then the query's GC and mean phases",
                flush=True,
            )
            for r in range(args.rounds):
                print(f" round {r + 1}", flush=True)
                for shape in shapes if r % 2 == 0 else shapes[::-1]:
                    before = gc_ms(spark)
                    timing = bench.run(shape)
                    gc = gc_ms(spark) - before
                    print(report(shape.name, timing.batch_ms, timing.phases, gc), flush=True)
        finally:
            spark.stop()
    print(f"end: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
