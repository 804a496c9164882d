"""Run by tests/spark/test_spark_daemon.py in a process of its own (a Spark session whose
Python workers `oncelog.spark.daemon` forks, as `pipeline.job.new_session` makes it): a
batch read of a topic through the connector, its rows written exactly once to another,
then a read of a Python data source of many small partitions, one after another on each
idle worker of the data sources' tasks (RDD tasks would run in workers of their own: Spark
keeps a pool per worker environment), each reporting the daemon its worker was forked by,
the objects frozen there and the modules the worker imported after the fork (what the
connector's tasks imported that the daemon had not).

    python tests/spark/daemon_job.py BOOTSTRAP SOURCE TARGET SINK_ID   # prints JSON last
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from oncelog.pipeline.job import new_session

TASKS = 24


def _worker_state() -> tuple[str, int, int, str, str]:
    """In a Python worker: its daemon's module, its pid, the objects frozen, what it
    imported after the fork, and every worker its daemon has forked and not reaped."""
    import gc
    import os
    import sys
    from pathlib import Path

    argv = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().split(b"\0")
    daemon = argv[argv.index(b"-m") + 1].decode()
    preloaded = getattr(sys.modules["__main__"], "PRELOADED", frozenset())
    imported = sorted(set(sys.modules) - preloaded)
    ppid = os.getppid()
    siblings = Path(f"/proc/{ppid}/task/{ppid}/children").read_text().split()
    return daemon, os.getpid(), gc.get_freeze_count(), json.dumps(imported), json.dumps(siblings)


class _StateReader(DataSourceReader):
    """TASKS partitions of one row: the state of the worker that read it (defined in
    __main__, so it travels by value and imports nothing of the tests)."""

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(TASKS)]

    def read(self, partition: InputPartition) -> Iterator[tuple[str, int, int, str, str]]:
        yield _worker_state()


class WorkerStates(DataSource):
    @classmethod
    def name(cls) -> str:
        return "worker_state"

    def schema(self) -> str:
        return "daemon string, pid int, frozen long, imported string, forked string"

    def reader(self, schema: StructType) -> DataSourceReader:
        return _StateReader()


def main(bootstrap: str, source: str, target: str, sink_id: str) -> None:
    spark = new_session("oncelog-daemon-test", master="local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    rows = (
        spark.read.format("oncelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .load()
    )
    count = rows.count()
    (
        rows.selectExpr("key", "value")
        .write.format("oncelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", target)
        .option("sink.id", sink_id)
        .mode("append")
        .save()
    )
    spark.dataSource.register(WorkerStates)
    states = [tuple(row) for row in spark.read.format("worker_state").load().collect()]
    print(json.dumps({"count": count, "workers": states}))
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:5])
