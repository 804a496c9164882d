"""Where the broker's event-loop thread spends the wall time under transactional load, for
brokers from several source trees, alternated run by run (issue 12).

    .venv/bin/python bench/loop_waits.py --src main=/tmp/main/src --src this=src
    .venv/bin/python bench/loop_waits.py --src this=src --perf-sched    # as root, perf

Each run is bench/commit_latency.py's: a fresh broker from one tree, ``--producers``
transactional producers (processes, linger.ms=0) committing 10-record transactions to one
partition for ``--seconds``. Over the timed run it reads the loop thread's
/proc/<pid>/task/<tid>/schedstat and status: the share of the wall time it ran on a CPU,
the share it was runnable but waited for one (preempted by the producers and the broker's
other threads: the machine is shared), the rest asleep; and its voluntary and involuntary
context switches per transaction. With ``--perf-sched`` (needs perf and the right to
trace the scheduler) it also records ``perf sched`` for the timed run and splits the
sleeping time by where the thread went to sleep: a futex (the GIL, a lock), epoll (idle,
waiting for the network or a thread's answer), disk I/O.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import compare
from commit_latency import TXN_WORKLOAD, broker_from
from common import run_alternated, source_trees

# the kernel function a sleep started in -> what the loop thread waited for
SLEEPS = {"futex": "futex (GIL, locks)", "ep_poll": "epoll", "hrtimeout": "epoll", "io_": "disk"}


@dataclass
class Run:
    tree: str
    txn_per_s: float
    run_share: float  # of the wall time: on a CPU
    queued_share: float  # runnable, waiting for a CPU
    voluntary: float  # context switches per transaction
    involuntary: float
    sleeps: dict[str, float] = field(default_factory=dict)  # share of wall time, by cause


def _sched(pid: int) -> tuple[int, int, int, int]:
    """The main (loop) thread's ns on a CPU, ns waiting for one, and its voluntary and
    involuntary context switches."""
    run, queued, _ = (int(v) for v in Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split())
    status = Path(f"/proc/{pid}/task/{pid}/status").read_text()
    switches = {
        k: int(v) for k, v in (line.split(":") for line in status.splitlines() if "ctxt" in line)
    }
    return run, queued, switches["voluntary_ctxt_switches"], switches["nonvoluntary_ctxt_switches"]


def _sleeps(data: Path, pid: int, wall_s: float) -> dict[str, float]:
    """From a ``perf sched record -g``: the loop thread's sleeping time (the wait before
    each run that followed a sleep, not a preemption), by the kernel function the sleep
    started in, as shares of ``wall_s``."""
    out = subprocess.run(
        ["perf", "sched", "timehist", "-i", str(data), "-p", str(pid), "--state"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    rows = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 7 or not parts[2].startswith(f"python[{pid}]"):
            continue
        try:
            wait_ms = float(parts[3])
        except ValueError:
            continue
        rows.append((wait_ms, parts[6], " ".join(parts[7:])))
    if not rows:  # the broker's threads are not named python[pid]: nothing to split
        raise SystemExit(f"perf sched timehist shows no run of thread {pid}")
    sleeps: dict[str, float] = collections.defaultdict(float)
    for (_, state, chain), (wait_ms, _, _) in itertools.pairwise(rows):
        if state == "R":
            continue
        cause = next((name for key, name in SLEEPS.items() if key in chain), "other")
        sleeps[cause] += wait_ms / 1000 / wall_s
    return dict(sleeps)


def one_run(tree: str, source: Path, producers: int, seconds: float, perf: bool) -> Run:
    with (
        tempfile.TemporaryDirectory(prefix="loop-waits-") as tmp,
        broker_from(tree, source) as broker,
    ):
        assert broker.proc is not None
        pid = broker.proc.pid
        marks: list[tuple[float, tuple[int, int, int, int]]] = []
        recorder: list[subprocess.Popen[bytes]] = []
        data = Path(tmp) / "sched.data"

        def cpu() -> float | None:
            if perf and not marks:
                recorder.append(
                    subprocess.Popen(
                        ["perf", "sched", "record", "-g", "-o", str(data)],  # every CPU: the
                        # switches into the loop thread happen in other tasks' context
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
            marks.append((time.monotonic_ns(), _sched(pid)))
            if perf and len(marks) == 2:
                recorder[0].send_signal(signal.SIGINT)  # perf writes its data and exits
                recorder[0].wait(30)
            return compare.process_cpu_seconds(pid)

        settings = {**compare.PRODUCER_SETTINGS, "linger.ms": 0}
        cell = compare.run_cell(
            tree, broker.bootstrap, TXN_WORKLOAD, producers, 1, seconds, settings, cpu
        )
        if cell.errors:
            raise SystemExit(f"{tree}: {cell.errors[:3]}")
        (t0, (run0, q0, v0, n0)), (t1, (run1, q1, v1, n1)) = marks
        wall = t1 - t0
        commits = max(len(cell.commit_ms), 1)
        sleeps = _sleeps(data, pid, wall / 1e9) if perf else {}
        return Run(
            tree,
            len(cell.commit_ms) / cell.seconds if cell.seconds else 0.0,
            (run1 - run0) / wall,
            (q1 - q0) / wall,
            (v1 - v0) / commits,
            (n1 - n0) / commits,
            sleeps,
        )


def describe(run: Run) -> str:
    sleeps = "  ".join(f"{name} {100 * share:4.1f}%" for name, share in sorted(run.sleeps.items()))
    return (
        f"  {run.tree:<10} {run.txn_per_s:6.0f} txn/s  loop thread: on a CPU"
        f" {100 * run.run_share:4.1f}%  waiting for one {100 * run.queued_share:4.1f}%"
        f"  switches/txn {run.voluntary:4.2f} vol {run.involuntary:5.2f} invol  {sleeps}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", action="append", required=True, help="NAME=DIR, repeatable")
    parser.add_argument("--producers", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--perf-sched", action="store_true", help="split the sleeps (perf)")
    args = parser.parse_args()
    if args.perf_sched and shutil.which("perf") is None:
        raise SystemExit("--perf-sched needs perf on the PATH")
    trees = source_trees(args.src)
    run_alternated(
        trees,
        args.rounds,
        lambda name, source: one_run(name, source, args.producers, args.seconds, args.perf_sched),
        describe,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
