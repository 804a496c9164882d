"""Where an exactly_once write task of a NEW sink spends its time, against at_least_once,
without Spark: what the benchmark's timed writes pay (each a new sink, on workers whose
writer and claims reader are kept).

    .venv/bin/python bench/sink_steps.py                  # 6 new sinks, 2 tasks each

A benchmark, not a test. It starts a broker subprocess (temporary data directory), plays
one Python worker (`ClientPool`), warms it up with one sink of each guarantee, then for
each new sink runs its two tasks (slots 0 and 1) with `writer.write_task`, exactly_once
and at_least_once in turn (the order reversed every sink). The protocol's steps are timed
by wrapping the writer's own functions (`_ClusterSteps.take` per step, `_send_progress`,
`produce_batches`); the rest of a task is its commit. It prints each exactly_once task's
steps, the medians of the first and second tasks of the sinks, and the load average before
and after. The broker is always stopped and the temporary directory removed.
"""

from __future__ import annotations

import argparse
import collections
import functools
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from common import create_topics, load_average
from oncelog.spark import writer
from oncelog.spark.options import WriteOptions, parse_write_options
from oncelog.spark.producers import ClientPool
from oncelog.testing.process import BrokerProcess

STEPS: dict[str, float] = collections.defaultdict(float)  # ms of the current task


def _timed(name: Callable[..., str], call: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(call)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            STEPS[name(*args)] += (time.perf_counter() - started) * 1000

    return timed


def _instrument() -> None:
    writer._ClusterSteps.take = _timed(  # type: ignore[method-assign]
        lambda _self, step: type(step).__name__, writer._ClusterSteps.take
    )
    writer._send_progress = _timed(lambda *_: "send_progress", writer._send_progress)
    writer.produce_batches = _timed(lambda *_: "produce", writer.produce_batches)


def _batches(rows: int) -> Iterator[pa.RecordBatch]:
    values = pa.array([b"v" * 100] * rows, pa.binary())
    return iter([pa.record_batch([values], names=["value"])])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sinks", type=int, default=6)
    parser.add_argument("--rows", type=int, default=2000, help="rows a task")
    args = parser.parse_args()
    print(f"start: {load_average()}", flush=True)
    _instrument()
    tasks: dict[tuple[str, int], list[float]] = collections.defaultdict(list)
    steps: dict[tuple[str, int], list[float]] = collections.defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="oncelog-bench-sink-steps-") as tmp:
        with BrokerProcess(Path(tmp) / "broker", {"num.partitions": "2"}) as broker:
            bootstrap = broker.bootstrap_servers
            create_topics(bootstrap, ["out"], 2)
            pool = ClientPool()

            def options(sink: str, guarantee: str) -> WriteOptions:
                return parse_write_options(
                    {
                        "kafka.bootstrap.servers": bootstrap,
                        "topic": "out",
                        "sink.id": sink,
                        "delivery.guarantee": guarantee,
                    }
                )

            guarantees = ["exactly_once", "at_least_once"]
            for guarantee in guarantees:  # warm-up: the worker's writer and claims reader
                for slot in (0, 1):
                    task = writer.TaskAttempt(slot, 0, 0)
                    writer.write_task(options("warm", guarantee), task, _batches(10), pool=pool)
            for sink in range(args.sinks):
                for guarantee in guarantees if sink % 2 == 0 else guarantees[::-1]:
                    for slot in (0, 1):
                        STEPS.clear()
                        started = time.perf_counter()
                        writer.write_task(
                            options(f"new-{sink}", guarantee),
                            writer.TaskAttempt(slot, 0, 0),
                            _batches(args.rows),
                            pool=pool,
                        )
                        took = (time.perf_counter() - started) * 1000
                        tasks[(guarantee, slot)].append(took)
                        if guarantee == "exactly_once":
                            for name, ms in STEPS.items():
                                steps[(name, slot)].append(ms)
                            shown = ", ".join(f"{n} {ms:.1f}" for n, ms in STEPS.items())
                            print(f"sink {sink} task {slot}: {took:.1f} ms ({shown})")
    print(f"end: {load_average()}")
    print("medians, ms (first task of a sink / second task)")
    for guarantee in guarantees:
        first, second = (statistics.median(tasks[(guarantee, s)]) for s in (0, 1))
        print(f"  task {guarantee:<22} {first:7.1f} / {second:7.1f}")
    for name in sorted({name for name, _ in steps}):
        first, second = (statistics.median(steps[(name, s)] or [0.0]) for s in (0, 1))
        print(f"    {name:<26} {first:7.1f} / {second:7.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
