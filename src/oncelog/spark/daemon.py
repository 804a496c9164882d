"""PySpark's worker daemon, with the connector's modules imported before it forks.

    SparkSession.builder.config("spark.python.daemon.module", "oncelog.spark.daemon")

PySpark runs a task's Python code in a process its daemon (`pyspark.daemon`) forks, and
that daemon imports almost nothing before forking (its own comment: pandas and pyarrow
start threads on import). So every new worker imports `pyspark.worker` and the serializers
from `pyspark.zip`, which Spark puts first on the workers' path and which has no bytecode
(compiled again in every worker), then pyarrow, confluent-kafka and the connector when its
first task unpickles the data source: about 0.4 CPU-seconds on a quiet machine, 2.5-6 s of
a first task on a loaded one (docs/spark.md). Spark starts new workers whenever more tasks
run at once than it has idle ones, and for every retry of a failed task.

This daemon imports those modules once, then freezes what they allocated out of the
garbage collector's reach (`gc.freeze`), and runs PySpark's own daemon loop. A forked
worker starts with them imported, and the `gc.collect()` PySpark's daemon loop runs after
every task walks only what the tasks allocated, not the ~48,000 objects of the modules
(20-25 ms a collection, after every task of every worker).

Why this is safe to fork: of the modules imported here only pyarrow starts a thread at
import (jemalloc's background purger; pyarrow's default pool here is mimalloc, which starts
none, and jemalloc registers fork handlers for its own locks); a forked child runs without
that thread (checked: forked children each building and summing Arrow arrays). No
client (librdkafka handle, socket, thread of ours) is made before the fork: importing the
connector makes none. Spark uses this daemon for the tasks' workers only; its planner
processes (a Python source's partitions, a sink's commit) run under `pyspark.daemon`
whatever this option says.
"""

from __future__ import annotations

import gc
import importlib

# What a task of the connector imports after the fork: PySpark's worker and the modules a
# data source's read and write tasks unpickle (with pyarrow and confluent-kafka).
PRELOAD = (
    "pyspark.worker",
    "pyspark.sql.pandas.serializers",
    "pyspark.sql.worker.plan_data_source_read",
    "pyspark.sql.worker.write_into_data_source",
    "oncelog.spark.source",
    "oncelog.spark.reader",
    "oncelog.spark.writer",
)


def preload() -> None:
    """Import `PRELOAD` and move every object alive now to the collector's permanent
    generation, which its collections skip (what the forked workers inherit)."""
    for name in PRELOAD:
        importlib.import_module(name)
    gc.collect()  # what the imports left for garbage, so that it is not frozen
    gc.freeze()


def main() -> None:
    preload()
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
