"""The durable-append path of one partition log, without a broker: append a batch, then
``PartitionLog.flush()`` (what an acks=all produce or a transaction marker waits for), for
logs from several source trees, alternated run by run (issue 12).

    .venv/bin/python bench/flush_path.py --src main=/tmp/main/src --src this=src
    .venv/bin/python bench/flush_path.py --src main=/tmp/main/src --src this=src \\
        --batch-bytes 10240,340992 --flushes 400 --rounds 4

Each run is a child process (``--child``) with one tree's ``src`` on PYTHONPATH, a fresh
log in a temporary directory on the file system of ``--dir`` (default: the system's
temporary directory), Kafka's default index.interval.bytes (4096) and segment size. It
appends ``--flushes`` batches of ``--batch-bytes`` (records of 1 KiB: a 10-record
transaction's produce is about 10 KiB) and flushes after each, timing the flush; then it
writes the recovery checkpoint once (timed too: where the index fsync moves to). Counted
with a wrapper around ``os.fsync`` in the child (descriptors noted, files named after the
run): fsync calls per flush by file suffix. Printed per run, then each tree's medians;
the machine's load before and after (the disk is shared: compare within one run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from common import alternated, fd_suffix, source_trees, uptime

RECORD_BYTES = 1024


def child(batch_bytes: int, flushes: int, directory: str) -> dict[str, Any]:
    """One run in this process (the tree on PYTHONPATH); its figures as a dict."""
    from oncelog.protocol.record_batch import Record, build_batch, split_batches
    from oncelog.storage import LogConfig, PartitionLog

    synced: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        synced.append(fd)  # list.append: thread-safe, a few ns inside the timed flush
        real_fsync(fd)

    os.fsync = counting_fsync  # type: ignore[assignment]
    count = max(1, batch_bytes // RECORD_BYTES)
    batch = build_batch(
        [Record(b"k", os.urandom(RECORD_BYTES - 16)) for _ in range(count)], timestamp_ms=1
    )
    [(header, view)] = split_batches(batch)
    with tempfile.TemporaryDirectory(dir=directory, prefix="flush-path-") as tmp:
        log = PartitionLog.open(Path(tmp) / "t-0", LogConfig(), clean_shutdown=True)
        synced.clear()
        flush_ms: list[float] = []
        for _ in range(flushes):
            log.append(view, header, 0)
            started = time.perf_counter()
            log.flush()
            flush_ms.append((time.perf_counter() - started) * 1e3)
        flush_fds = list(synced)
        started = time.perf_counter()
        log.write_recovery_checkpoint()
        checkpoint_ms = (time.perf_counter() - started) * 1e3
        checkpoint_fds = synced[len(flush_fds) :]
        names = {fd: fd_suffix(fd) for fd in set(synced)}
        log.close()
    flush_ms.sort()
    return {
        "batch_bytes": len(batch),
        "p50_ms": statistics.median(flush_ms),
        "p90_ms": flush_ms[int(len(flush_ms) * 0.9)],
        "p99_ms": flush_ms[int(len(flush_ms) * 0.99)],
        "mean_ms": statistics.fmean(flush_ms),
        "fsyncs_per_flush": {
            suffix: n / flushes
            for suffix, n in sorted(Counter(names[fd] for fd in flush_fds).items())
        },
        "checkpoint_ms": checkpoint_ms,
        "checkpoint_fsyncs": dict(Counter(names[fd] for fd in checkpoint_fds)),
    }


def one_run(source: Path, batch_bytes: int, flushes: int, directory: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(source)}
    args = [sys.executable, __file__, "--child", str(batch_bytes), str(flushes), directory]
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False, timeout=600)
    if done.returncode:
        raise SystemExit(f"{source}: the child failed:\n{done.stderr[-2000:]}")
    return dict(json.loads(done.stdout))


def describe(name: str, figures: dict[str, Any]) -> str:
    fsyncs = ", ".join(f"{k} {v:.2f}" for k, v in figures["fsyncs_per_flush"].items())
    return (
        f"  {name:<6} {figures['batch_bytes']:>7,} B  flush p50 {figures['p50_ms']:.3f} "
        f"p90 {figures['p90_ms']:.3f} p99 {figures['p99_ms']:.3f} mean {figures['mean_ms']:.3f} ms"
        f"  fsyncs/flush: {fsyncs}  checkpoint {figures['checkpoint_ms']:.2f} ms "
        f"{figures['checkpoint_fsyncs']}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", action="append", required=True, help="NAME=DIR, repeatable")
    parser.add_argument("--batch-bytes", default="10240,340992", help="comma-separated sizes")
    parser.add_argument("--flushes", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the logs are made")
    args = parser.parse_args()
    trees = source_trees(args.src)
    sizes = [int(s) for s in args.batch_bytes.split(",")]
    print(f"load before: {uptime()}", flush=True)
    print(f"{args.flushes} append+flush per run, logs under {args.dir}", flush=True)
    results: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for round_ in range(args.rounds):
        for size in sizes:
            for name, source in alternated(trees, round_):
                figures = one_run(source, size, args.flushes, args.dir)
                results.setdefault((name, size), []).append(figures)
                print(describe(name, figures), flush=True)
    print("medians of the runs' p50 / p99 / mean flush ms:")
    for (name, size), runs in results.items():
        print(
            f"  {name:<6} {size:>7,} B  "
            + " / ".join(
                f"{statistics.median(r[key] for r in runs):.3f}"
                for key in ("p50_ms", "p99_ms", "mean_ms")
            )
        )
    print(f"load after:  {uptime()}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        print(json.dumps(child(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])))
    else:
        raise SystemExit(main())
