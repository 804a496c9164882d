"""Where the machine's CPU goes per record, cell by cell: the broker (every thread, and its
event-loop thread) against everything else, for brokers from several source trees,
alternated round by round (issue 12).

    .venv/bin/python bench/cpu_split.py --src main=/tmp/main/src --src this=src
    .venv/bin/python bench/cpu_split.py --src this=src --workloads 'idempotent acks=all' \\
        --producers 8 --partitions 3 --seconds 5 --rounds 3

Each run is one ``bench/compare.py`` cell (its producers, settings and fresh broker) and
prints records/s, the broker's CPU per record (user + system, every thread, from /proc),
its event-loop thread's, the loop thread's busy share, the CPU per record of everything
else on the machine (the producer processes, and whatever else runs: say the load), and
the machine's idle share; then what the broker did for it, from its metrics endpoint:
requests handled by API and fsync rounds, per transaction in a transactional cell, per
1,000 records otherwise (so that a transaction's extra work is counted, not inferred);
and, where ``perf`` may count the broker's system calls (root, or perf_event_paranoid
allowing it), its ``fsync`` calls: a round fsyncs one or several files (``fsync calls``).
When the machine is never idle and the producers take most of it, a ratio between two
workloads is a ratio of their total CPU per record; idle time in a transactional cell is
the producers waiting for their flush and commit. Round r runs the trees in the given
order when r is even and reversed when odd (ABBA...).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import compare
from commit_latency import broker_from, thread_cpu_seconds
from common import alternated, source_trees, uptime


@dataclass(frozen=True)
class MachineTimes:
    """Every core's idle and total time since boot, in clock ticks (/proc/stat)."""

    idle: int
    total: int

    @classmethod
    def now(cls) -> MachineTimes:
        with open("/proc/stat") as stat:
            ticks = [int(t) for t in stat.readline().split()[1:]]
        return cls(idle=ticks[3] + ticks[4], total=sum(ticks))  # idle + iowait


_REQUESTS = re.compile(r'^kafka_network_requestmetrics_requests_total\{request="(\w+)"\} (\S+)$')
_FSYNCS = "kafka_log_logflushstats_logflush_seconds_count"


def broker_counts(metrics_port: int) -> dict[str, float]:
    """Requests the broker has handled so far, by API, and its fsync rounds (``fsyncs``),
    read from its Prometheus endpoint."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    counts = {}
    for line in text.splitlines():
        if match := _REQUESTS.match(line):
            counts[match.group(1)] = float(match.group(2))
        elif line.startswith(_FSYNCS + " "):
            counts["fsyncs"] = float(line.split()[-1])
    return counts


class FsyncCalls:
    """The fsync system calls of one process (every thread, those it starts later too)
    while it is counted, from ``perf stat``'s tracepoint; None where perf cannot."""

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._perf: subprocess.Popen[str] | None = None

    def start(self) -> None:
        perf = shutil.which("perf")
        if perf is not None:
            self._perf = subprocess.Popen(
                [perf, "stat", "-x,", "-e", "syscalls:sys_enter_fsync", "-p", str(self._pid)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )

    def stop(self) -> float | None:
        """The count since ``start`` (perf prints it when interrupted); None after the
        first call."""
        perf, self._perf = self._perf, None
        if perf is None:
            return None
        perf.send_signal(signal.SIGINT)
        try:
            _, err = perf.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            perf.kill()
            perf.communicate()
            return None
        for line in err.splitlines():
            fields = line.split(",")
            if len(fields) > 2 and fields[2] == "syscalls:sys_enter_fsync":
                return float(fields[0]) if fields[0].isdigit() else None
        return None


def per_unit(
    before: Mapping[str, float], after: Mapping[str, float], units: float
) -> dict[str, float]:
    """What changed between two ``broker_counts``, divided by ``units``."""
    changed = {key: after[key] - before.get(key, 0.0) for key in after}
    return {key: delta / units for key, delta in sorted(changed.items()) if delta}


@dataclass(frozen=True)
class Split:
    tree: str
    workload: str
    records_per_s: float
    broker_us: float  # broker CPU per record, every thread
    loop_us: float  # its event-loop thread's
    loop_busy: float  # share of the run the loop thread was on a CPU
    rest_us: float  # everything else on the machine, per record
    idle: float  # share of the machine's CPU time idle
    unit: str  # "transaction", or "1,000 records" in a cell without transactions
    counts: dict[str, float]  # requests by API and fsyncs per unit


def one_run(
    tree: str, source: Path, workload: compare.Workload, producers: int, partitions: int, s: float
) -> Split:
    with broker_from(tree, source, metrics=True) as broker:
        assert broker.proc is not None and broker.metrics_port is not None
        pid, metrics_port = broker.proc.pid, broker.metrics_port
        marks: list[tuple[float | None, MachineTimes]] = []
        counts: list[dict[str, float]] = []
        fsync_calls = FsyncCalls(pid)

        def cpu() -> float | None:
            marks.append((thread_cpu_seconds(pid, pid), MachineTimes.now()))
            counts.append(broker_counts(metrics_port))
            if len(counts) == 1:
                fsync_calls.start()
            elif (calls := fsync_calls.stop()) is not None:
                counts[0]["fsync calls"], counts[1]["fsync calls"] = 0.0, calls
            return compare.process_cpu_seconds(pid)

        cell = compare.run_cell(
            tree,
            broker.bootstrap,
            workload,
            producers,
            partitions,
            s,
            compare.PRODUCER_SETTINGS,
            cpu,
        )
    if cell.errors or not cell.records or cell.broker_cpu_s is None:
        raise SystemExit(f"{tree}, {workload.name}: no figures ({cell.errors[:3]})")
    assert len(counts) == 2, "run_cell reads the broker's CPU once before, once after"
    (loop_before, before), (loop_after, after) = marks
    if loop_before is None or loop_after is None:
        raise SystemExit("the broker's loop thread could not be read from /proc")
    ticks = os.sysconf("SC_CLK_TCK")
    total = after.total - before.total
    busy_s = (total - (after.idle - before.idle)) / ticks
    per_record = 1e6 / cell.records
    transactions = len(cell.commit_ms)
    unit, units = (
        ("transaction", transactions) if transactions else ("1,000 records", cell.records / 1000)
    )
    return Split(
        tree,
        workload.name,
        cell.rps,
        cell.broker_cpu_s * per_record,
        (loop_after - loop_before) * per_record,
        (loop_after - loop_before) / cell.seconds if cell.seconds else 0.0,
        (busy_s - cell.broker_cpu_s) * per_record,
        (after.idle - before.idle) / total if total else 0.0,
        unit,
        per_unit(counts[0], counts[1], units),
    )


def describe(split: Split) -> str:
    return (
        f"  {split.tree:<8} {split.workload:<20} {split.records_per_s:9,.0f} records/s  "
        f"broker {split.broker_us:5.2f} µs  loop {split.loop_us:5.2f} µs "
        f"({split.loop_busy:4.0%} busy)  rest {split.rest_us:5.2f} µs  idle {split.idle:4.0%}\n"
        f"           per {split.unit}: "
        + ", ".join(f"{key} {value:.2f}" for key, value in split.counts.items())
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", action="append", required=True, help="NAME=DIR, repeatable")
    parser.add_argument(
        "--workloads",
        default="plain acks=1,acks=all,idempotent acks=all,txn every 1000",
        help="comma-separated bench/compare.py workload names",
    )
    parser.add_argument("--producers", type=int, default=8)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    trees = source_trees(args.src)
    wanted = args.workloads.split(",")
    workloads = [w for w in compare.WORKLOADS if w.name in wanted]
    if len(workloads) != len(wanted):
        parser.error(f"unknown workload in {args.workloads!r}")
    print(f"load before: {uptime()}", flush=True)
    print(
        f"CPU per record, {args.producers} producers, {args.partitions} partition(s), "
        f"{args.seconds:g} s per run:",
        flush=True,
    )
    for round_ in range(args.rounds):
        for workload in workloads:
            for name, source in alternated(trees, round_):
                split = one_run(
                    name, source, workload, args.producers, args.partitions, args.seconds
                )
                print(describe(split), flush=True)
    print(f"load after:  {uptime()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
