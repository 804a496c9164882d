"""The exactly-once sink's cost per task, without Spark: micro-batches of a few rows per
task, written by `oncelog.spark.writer.write_task` as PySpark's Python workers run it.

    .venv/bin/python bench/sink_tasks.py                  # 3 slots, 2 workers, 40 batches

A benchmark, not a test. It starts a broker subprocess (temporary data directory) and
plays PySpark's worker queue: each `ClientPool` is one Python worker, and the tasks of a
micro-batch go to the workers first in, first out (PySpark's `PythonWorkerFactory` hands
out its idle workers in that order), so a task slot lands on another worker most of the
time, as in a streaming query on `local[2]`. Two runs, one after the other:

- `pinned`: each slot always on the same worker (what a kept producer per slot needs);
- `fifo`: the slots moving between the workers as PySpark moves them.

It prints the mean and median wall time of a task and how many tasks made a new producer,
with the load average before and after. Every batch's output is checked (each row once).
The broker is always stopped and the temporary directory removed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter, deque
from pathlib import Path

import pyarrow as pa

from common import create_topics, load_average
from oncelog.pipeline.verify import read_topic
from oncelog.spark.options import parse_write_options
from oncelog.spark.producers import ClientPool
from oncelog.spark.writer import TaskAttempt, write_task
from oncelog.testing.process import BrokerProcess

ROWS_PER_TASK = 3


def _rows(run: str, batch: int, slot: int) -> list[pa.RecordBatch]:
    values = [f"{run}-b{batch}-s{slot}-r{i}".encode() for i in range(ROWS_PER_TASK)]
    return [pa.record_batch([pa.array(values, pa.binary())], names=["value"])]


def run(bootstrap: str, name: str, slots: int, workers: int, batches: int) -> list[str]:
    """Write `batches` micro-batches of `slots` tasks; print the figures; return the rows."""
    options = parse_write_options(
        {"kafka.bootstrap.servers": bootstrap, "topic": f"out-{name}", "sink.id": name}
    )
    pools = [ClientPool() for _ in range(workers)]
    idle = deque(range(workers))  # PySpark's idle workers, first in, first out
    took: list[float] = []
    new = 0
    for batch in range(batches):
        for slot in range(slots):
            worker = slot % workers if name == "pinned" else idle.popleft()
            started = time.perf_counter()
            done = write_task(
                options,
                TaskAttempt(slot, 0, batch),
                iter(_rows(name, batch, slot)),
                None,
                pools[worker],
            )
            took.append(time.perf_counter() - started)
            new += done.new_producer
            if name != "pinned":
                idle.append(worker)
        print(f"  {name}: batch {batch + 1}/{batches}", end="\r", file=sys.stderr, flush=True)
    timed = took[slots * 2 :]  # after each worker's first producer
    print(
        f"  {name:7s} {len(timed)} tasks: mean {statistics.mean(timed) * 1000:6.1f} ms, "
        f"median {statistics.median(timed) * 1000:6.1f} ms, "
        f"new producers {new} of {len(took)} tasks"
    )
    return [
        f"{name}-b{b}-s{s}-r{i}"
        for b in range(batches)
        for s in range(slots)
        for i in range(ROWS_PER_TASK)
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--slots", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batches", type=int, default=40)
    args = parser.parse_args()
    print(f"start: {load_average()}")
    with tempfile.TemporaryDirectory(prefix="oncelog-sink-tasks-") as tmp:
        with BrokerProcess(Path(tmp) / "broker", {"num.partitions": "1"}) as broker:
            bootstrap = broker.bootstrap_servers
            for name in ("pinned", "fifo"):
                create_topics(bootstrap, [f"out-{name}"], 1)
                expected = run(bootstrap, name, args.slots, args.workers, args.batches)
                written = Counter((v or b"").decode() for v in read_topic(bootstrap, f"out-{name}"))
                if written != Counter(expected):
                    raise RuntimeError(f"{name}: the output is not every row exactly once")
    print(f"end: {load_average()}")
    print(
        f"{args.slots} slots, {args.workers} workers (ClientPools), {ROWS_PER_TASK} rows a "
        "task, broker subprocess on the same machine; output verified: each row once"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
