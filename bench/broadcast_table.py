"""The order-enrichment job's broadcast join, as each micro-batch pays it: the customer table
as the job builds it (a local relation) against the same rows made from Python rows.

    .venv/bin/python bench/broadcast_table.py            # 12 joins each, alternating

A benchmark, not a test. One SparkSession (`local[2,3]`), no broker: three ids joined with
the broadcast table and collected, alternating between the two tables (the first two of
each untimed). It prints the median wall time of each and the load average before and
after, and checks that both joins return the same rows.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from common import load_average
from oncelog.pipeline.job import customer_table, new_session


def _join(spark: Any, table: Any) -> list[Any]:
    from pyspark.sql import functions as F

    ids = spark.range(0, 3, 1, 1).withColumnRenamed("id", "customer_id")
    return sorted(ids.join(F.broadcast(table), "customer_id").collect())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--joins", type=int, default=12)
    args = parser.parse_args()
    print(f"start: {load_average()}")
    spark = new_session("oncelog-bench-broadcast-table")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        local = customer_table(spark)
        tables = {
            "local relation (the job's)": local,
            "from Python rows": spark.createDataFrame(
                [tuple(r) for r in local.collect()], local.schema
            ),
        }
        took: dict[str, list[float]] = {name: [] for name in tables}
        results = {}
        for i in range(args.joins * 2):
            name = list(tables)[i % 2]
            started = time.perf_counter()
            results[name] = _join(spark, tables[name])
            took[name].append(time.perf_counter() - started)
        if len({repr(rows) for rows in results.values()}) != 1:
            raise RuntimeError(f"the joins differ: {results}")
    finally:
        spark.stop()
    print(f"end: {load_average()}")
    for name, seconds in took.items():
        print(
            f"  broadcast join, customer table {name:<28} median "
            f"{statistics.median(seconds[2:]) * 1000:6.1f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
