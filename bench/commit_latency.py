"""Commit latency and event-loop CPU per transaction of brokers from several source trees,
alternated run by run (issue 12).

    .venv/bin/python bench/commit_latency.py --src main=/tmp/main/src --src this=src
    .venv/bin/python bench/commit_latency.py --src a=/tmp/a/src --src b=src --rounds 5 --seconds 6

Each run starts a fresh broker from one tree (its ``src`` on PYTHONPATH; the compiled
record scanner must be built there) and has ``--producers`` transactional producers
(processes, confluent-kafka, linger.ms=0) commit 10-record transactions of 1 KiB records to
a one-partition topic for ``--seconds`` (``bench/compare.py``'s cell). Round r runs the
trees in the given order when r is even and reversed when odd (ABBA...), so a load that
drifts over the run weighs on every tree alike.

Per run it prints transactions/s, commit_transaction p50/p90/p99, the broker's CPU per
transaction (every thread) and the event loop thread's (the process's main thread, from
/proc: user + system time over the timed run); then each tree's medians. With 16
producers the commit tail is queueing on that thread, so its CPU per transaction is what a
change to the request path moves; the latencies move with the machine's load as much.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import compare
from common import run_alternated, source_trees
from throughput import BrokerProcess

TXN_WORKLOAD = next(w for w in compare.WORKLOADS if w.records_per_txn == 10)


@dataclass(frozen=True)
class Run:
    tree: str
    txn_per_s: float
    commit_ms: tuple[float, float, float]  # p50, p90, p99
    cpu_ms_per_txn: float | None
    loop_ms_per_txn: float | None


def thread_cpu_seconds(pid: int, tid: int) -> float | None:
    """User + system CPU time of thread ``tid`` of process ``pid`` (Linux /proc)."""
    try:
        stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def broker_from(tree: str, source: Path, *, metrics: bool = False) -> Iterator[BrokerProcess]:
    """A fresh broker run from ``source`` (on PYTHONPATH), started (``metrics``: serving
    Prometheus metrics); stopped on the way out."""
    with tempfile.TemporaryDirectory(prefix=f"oncelog-{tree}-") as tmp:
        env = {**os.environ, "PYTHONPATH": str(source)}
        broker = BrokerProcess(Path(tmp), [], env, metrics=metrics)
        broker.start()
        try:
            yield broker
        finally:
            broker.stop()


def one_run(tree: str, source: Path, producers: int, seconds: float) -> Run:
    with broker_from(tree, source) as broker:
        assert broker.proc is not None
        pid = broker.proc.pid
        loop: list[float | None] = []

        def cpu() -> float | None:
            loop.append(thread_cpu_seconds(pid, pid))  # the main thread runs the loop
            return compare.process_cpu_seconds(pid)

        settings = {**compare.PRODUCER_SETTINGS, "linger.ms": 0}
        cell = compare.run_cell(
            tree, broker.bootstrap, TXN_WORKLOAD, producers, 1, seconds, settings, cpu
        )
    if cell.errors:
        raise SystemExit(f"{tree}: {cell.errors[:3]}")
    commits = len(cell.commit_ms)
    before, after = loop
    loop_ms = (
        None
        if before is None or after is None or not commits
        else 1000 * (after - before) / commits
    )
    quantiles = tuple(compare.percentile(cell.commit_ms, q) or 0.0 for q in (0.5, 0.9, 0.99))
    return Run(
        tree,
        commits / cell.seconds if cell.seconds else 0.0,
        (quantiles[0], quantiles[1], quantiles[2]),
        cell.cpu_ms_per_txn,
        loop_ms,
    )


def describe(run: Run) -> str:
    p50, p90, p99 = run.commit_ms
    cpu = "n/a" if run.cpu_ms_per_txn is None else f"{run.cpu_ms_per_txn:.2f}"
    loop = "n/a" if run.loop_ms_per_txn is None else f"{run.loop_ms_per_txn:.2f}"
    return (
        f"  {run.tree:<10} {run.txn_per_s:7.0f} txn/s  commit p50/p90/p99 "
        f"{p50:5.1f}/{p90:5.1f}/{p99:5.1f} ms  cpu {cpu} ms/txn  loop {loop} ms/txn"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", action="append", required=True, help="NAME=DIR, repeatable")
    parser.add_argument("--producers", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    trees = source_trees(args.src)
    runs = run_alternated(
        trees,
        args.rounds,
        lambda name, source: one_run(name, source, args.producers, args.seconds),
        describe,
    )
    print(f"medians of {args.rounds} runs each ({args.producers} producers, linger.ms=0):")
    for name, _ in trees:
        mine = [r for r in runs if r.tree == name]
        loops = [r.loop_ms_per_txn for r in mine if r.loop_ms_per_txn is not None]
        loop = f"{statistics.median(loops):.2f}" if loops else "n/a"
        print(
            f"  {name:<10} {statistics.median(r.txn_per_s for r in mine):7.0f} txn/s  commit p99 "
            f"{statistics.median(r.commit_ms[2] for r in mine):5.1f} ms  loop {loop} ms/txn"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
