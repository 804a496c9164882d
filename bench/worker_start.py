"""What a new PySpark Python worker costs before and after its first task, without Spark:
forked from a daemon as PySpark forks it, it imports what a task of the connector imports
(`oncelog.spark.daemon.PRELOAD`: pyspark's worker and serializers, the data source's read
and write modules, pyarrow, confluent-kafka, the connector), then runs the `gc.collect()`
PySpark's daemon loop runs after every task.

    .venv/bin/python bench/worker_start.py            # 5 forks from each daemon, alternating

The daemon is `pyspark.daemon` (PySpark's: it imports only itself before forking) or the
same after `oncelog.spark.daemon.preload()`. Like Spark's workers, this runs with
`pyspark.zip` first on the path (Spark puts it there: no bytecode, so a worker compiles
what it imports from it), as a child process per daemon. It prints wall and CPU ms per
fork and the load average: the machine is shared, compare the two sides within a run.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pyspark

from common import load_average

DAEMONS = ("pyspark.daemon", "oncelog.spark.daemon")


def _forks(daemon: str, forks: int) -> list[tuple[float, float, float]]:
    """In this process (started as the daemon would be): (import ms, gc.collect ms, child
    CPU ms) of each of `forks` children."""
    import pyspark.daemon  # noqa: F401  (what PySpark's daemon imports before forking)

    from oncelog.spark import daemon as preloading

    if daemon == "oncelog.spark.daemon":
        preloading.preload()
    figures = []
    for _ in range(forks):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            started, cpu = time.perf_counter(), time.process_time()
            for name in preloading.PRELOAD:
                importlib.import_module(name)
            imported = time.perf_counter()
            gc.collect()
            collected = time.perf_counter()
            line = (
                f"{(imported - started) * 1000} {(collected - imported) * 1000} "
                f"{(time.process_time() - cpu) * 1000}"
            )
            os.write(write, line.encode())
            os._exit(0)
        os.waitpid(pid, 0)
        os.close(write)
        imports, collect, child_cpu = (float(x) for x in os.read(read, 200).split())
        os.close(read)
        figures.append((imports, collect, child_cpu))
    return figures


def _run_child(daemon: str, forks: int) -> list[tuple[float, float, float]]:
    lib = Path(pyspark.__file__).parent / "python" / "lib"
    zips = [str(lib / "pyspark.zip"), *map(str, lib.glob("py4j-*-src.zip"))]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*zips, *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run(
        [sys.executable, __file__, "--child", daemon, "--forks", str(forks)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return [tuple(map(float, line.split())) for line in done.stdout.splitlines()]  # type: ignore[misc]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--forks", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2, help="children per daemon, alternating")
    parser.add_argument("--child", choices=DAEMONS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        for fork in _forks(args.child, args.forks):
            print(*fork)
        return 0
    print(f"start: {load_average()}", flush=True)
    results: dict[str, list[tuple[float, float, float]]] = {d: [] for d in DAEMONS}
    for r in range(args.rounds):
        for daemon in DAEMONS if r % 2 == 0 else DAEMONS[::-1]:
            results[daemon].extend(_run_child(daemon, args.forks))
    print(f"end: {load_average()}")
    print("a new worker, medians [range] of its imports, its gc.collect() and its CPU (ms):")
    for daemon, forks in results.items():
        columns = list(zip(*forks, strict=True))
        parts = (f"{statistics.median(c):6.1f} [{min(c):.1f}-{max(c):.1f}]" for c in columns)
        print(f"  forked by {daemon:<22} " + "  ".join(parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
