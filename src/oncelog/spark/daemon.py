"""PySpark's worker daemon, with the connector's modules imported before it forks.

    SparkSession.builder.config("spark.python.daemon.module", "oncelog.spark.daemon")

PySpark runs a task's Python code in a process its daemon (`pyspark.daemon`) forks, and
that daemon imports almost nothing before forking (its own comment: pandas and pyarrow
start threads on import). So every new worker imports `pyspark.worker` and the serializers
from `pyspark.zip`, which Spark puts first on the workers' path and which has no bytecode
(compiled again in every worker), then pyarrow, confluent-kafka and the connector when its
first task unpickles the data source. `bench/worker_start.py` measures it without Spark:
a child of `pyspark.daemon` spent 273 ms of CPU importing them (259 ms of wall time; load
0.6), one of this daemon 0.1 ms (docs/spark.md, Performance). Spark starts new workers whenever more
tasks run at once than it has idle ones, and for every retry of a failed task.

This daemon imports those modules once, then freezes what they allocated out of the
garbage collector's reach (`gc.freeze`), and runs PySpark's own daemon loop. A forked
worker starts with them imported, and the `gc.collect()` PySpark's daemon loop runs after
every task walks only what the tasks allocated, not the ~48,000 objects of the modules
(14.0 ms [12.7-16.5] a collection in that run, after every task of every worker, once the
task has ended). What it costs: the daemon holds the modules resident (VmRSS 83 MiB
against 30 MiB after `import pyspark.daemon` alone, one process, docs/spark.md; shared
copy-on-write with its children), and a
frozen object that becomes cyclic garbage in a worker is never collected (bounded by the
frozen objects; they do not grow).

Why this is safe to fork: of the modules imported here only pyarrow starts a thread at
import (jemalloc's background purger; pyarrow's default pool here is mimalloc, which starts
none, and jemalloc registers fork handlers for its own locks); a forked child runs without
that thread (checked: forked children each building and summing Arrow arrays). No
client (librdkafka handle, socket, thread of ours) is made before the fork: importing the
connector makes none. Spark uses this daemon for the tasks' workers only; its planner
processes (a Python source's partitions, a sink's commit) run under `pyspark.daemon`
whatever this option says.

A module that fails to import is reported on standard error and skipped: the daemon still
serves every Python task of the executor (a task that needs the module then fails with its
own ImportError), as `pyspark.daemon` would. Standard output is the daemon's handshake
with Spark (its port comes first), so whatever a module prints while it is imported goes
to standard error.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import sys
import traceback

DAEMON_MODULE = "oncelog.spark.daemon"  # the value of spark.python.daemon.module
# What a task of the connector imports after the fork: PySpark's worker and the modules a
# data source's read and write tasks unpickle (with pyarrow and confluent-kafka), and the
# idna codec a socket's host name is encoded with (the Fetch path's connections).
PRELOAD = (
    "pyspark.worker",
    "pyspark.sql.pandas.serializers",
    "pyspark.sql.worker.plan_data_source_read",
    "pyspark.sql.worker.write_into_data_source",
    "oncelog.spark.source",
    "oncelog.spark.reader",
    "oncelog.spark.writer",
    "encodings.idna",
)
# The modules imported when the daemon forks its workers (set by `main`): what a worker
# imports beyond them, it imports in every new worker (tests/spark/test_spark_daemon.py).
PRELOADED: frozenset[str] = frozenset()


def preload(modules: tuple[str, ...] = PRELOAD) -> frozenset[str]:
    """Import `modules` (reporting on standard error any that fails) and move every object
    alive now to the collector's permanent generation, which its collections skip (what the
    forked workers inherit). The modules then imported."""
    with contextlib.redirect_stdout(sys.stderr):
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:
                print(f"{DAEMON_MODULE}: {name} not preloaded:", file=sys.stderr)
                traceback.print_exc()
    gc.collect()  # what the imports left for garbage, so that it is not frozen
    gc.freeze()
    return frozenset(sys.modules)


def main() -> None:
    global PRELOADED
    from pyspark import daemon

    PRELOADED = preload()
    daemon.manager()


if __name__ == "__main__":
    main()
