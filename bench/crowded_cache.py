"""Many partitions through a small file cache: what an acks=all append costs the thread
that makes it (the broker's event loop) when the cache must close files to open others,
for logs from several source trees, alternated run by run (issue 12).

    .venv/bin/python bench/crowded_cache.py --src main=/tmp/main/src --src this=src
    .venv/bin/python bench/crowded_cache.py --src main=… --src this=… --partitions 200 \\
        --capacity 64 --appends 20000 --rounds 4

Each run is a child process (``--child``) with one tree's ``src`` on PYTHONPATH and the
process's file cache set to ``--capacity`` descriptors (the broker sizes it from the
descriptor limit: storage/file_cache.py). The main thread plays the event loop: it appends
a batch of ``--batch-records`` 1 KiB records (about 8 KiB: an index entry each, Kafka's
default index.interval.bytes) to one partition after another and hands each flush to
eight threads, as the broker's flusher does (FSYNC_THREADS); at most ``--in-flight``
appends wait for their flush at once (the producers' requests), the loop waits for the
oldest beyond that. At the end every log writes its recovery checkpoint (the broker does
every 60 s), timed. ``--cold-files N`` first opens and reads N other files (old segments
a consumer read): clean files in the cache, which a cache that closes clean files first
evicts at no cost.

Printed per run: the loop thread's time inside ``append`` (p50, p99, max, total: a stall
of everything else on the loop), append-to-durable latency p50/p99 (an acks=all
produce's), appends/s, the fsyncs the loop thread made (the cache closing a written file
for another) and all fsyncs by file suffix, the cache's evictions; then each tree's
medians and the machine's load before and after (the disk is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import alternated, fd_suffix, source_trees, uptime

RECORD_BYTES = 1024


def child(options: dict[str, Any]) -> dict[str, Any]:
    """One run in this process (the tree on PYTHONPATH); its figures as a dict."""
    from oncelog.protocol.record_batch import Record, build_batch, split_batches
    from oncelog.storage import LogConfig, PartitionLog
    from oncelog.storage.file_cache import open_files

    loop = threading.current_thread()
    fsyncs: list[tuple[bool, str]] = []  # (on the loop thread, the file's suffix)
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        # readlink costs a few µs per fsync, in every tree alike
        fsyncs.append((threading.current_thread() is loop, fd_suffix(fd)))
        real_fsync(fd)

    batch = build_batch(
        [Record(b"k", os.urandom(RECORD_BYTES - 16)) for _ in range(options["batch_records"])],
        timestamp_ms=1,
    )
    [(header, view)] = split_batches(batch)
    partitions, appends = options["partitions"], options["appends"]
    open_files.configure(options["capacity"])
    with tempfile.TemporaryDirectory(dir=options["dir"], prefix="crowded-cache-") as tmp:
        logs = [
            PartitionLog.open(Path(tmp) / f"t-{i}", LogConfig(), clean_shutdown=True)
            for i in range(partitions)
        ]
        for i in range(options["cold_files"]):
            cold = Path(tmp) / f"cold-{i}"
            cold.write_bytes(b"x" * 4096)
            with open_files.using(open_files.file(cold, os.O_RDONLY)) as fd:
                os.pread(fd, 4096, 0)
        os.fsync = counting_fsync  # type: ignore[assignment]
        evictions_before = open_files.evictions
        in_append_ms: list[float] = []
        durable_ms: list[float] = []
        waiting: deque[tuple[float, Future[int]]] = deque()
        started = time.perf_counter()
        with ThreadPoolExecutor(8, thread_name_prefix="flusher") as flusher:
            for n in range(appends):
                while len(waiting) >= options["in_flight"]:
                    sent, future = waiting.popleft()
                    future.result()
                    durable_ms.append((time.perf_counter() - sent) * 1e3)
                log = logs[n % partitions]
                sent = time.perf_counter()
                last = log.append(view, header, 0).last_offset
                in_append_ms.append((time.perf_counter() - sent) * 1e3)
                waiting.append((sent, flusher.submit(log.flush, last + 1)))
            for sent, future in waiting:
                future.result()
                durable_ms.append((time.perf_counter() - sent) * 1e3)
        seconds = time.perf_counter() - started
        during = len(fsyncs)
        checkpoint_started = time.perf_counter()
        for log in logs:
            log.write_recovery_checkpoint()
        checkpoint_ms = (time.perf_counter() - checkpoint_started) * 1e3
        evictions = open_files.evictions - evictions_before
        os.fsync = real_fsync
        for log in logs:
            log.close()
    in_append_ms.sort()
    durable_ms.sort()
    return {
        "appends_per_s": appends / seconds,
        "append_p50_ms": statistics.median(in_append_ms),
        "append_p99_ms": in_append_ms[int(len(in_append_ms) * 0.99)],
        "append_max_ms": in_append_ms[-1],
        "append_total_s": sum(in_append_ms) / 1e3,
        "durable_p50_ms": statistics.median(durable_ms),
        "durable_p99_ms": durable_ms[int(len(durable_ms) * 0.99)],
        "loop_fsyncs": dict(Counter(name for on_loop, name in fsyncs[:during] if on_loop)),
        "fsyncs": dict(Counter(name for _, name in fsyncs[:during])),
        "evictions": evictions,
        "checkpoint_ms": checkpoint_ms,
        "checkpoint_fsyncs": dict(Counter(name for _, name in fsyncs[during:])),
        "fsyncs_per_append": len(fsyncs[:during]) / appends,
    }


def one_run(source: Path, options: dict[str, Any]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(source)}
    args = [sys.executable, __file__, "--child", json.dumps(options)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False, timeout=900)
    if done.returncode:
        raise SystemExit(f"{source}: the child failed:\n{done.stderr[-2000:]}")
    return dict(json.loads(done.stdout))


def describe(name: str, f: dict[str, Any]) -> str:
    return (
        f"  {name:<6} {f['load']}\n"
        f"         {f['appends_per_s']:7,.0f} appends/s  loop in append p50/p99/max "
        f"{f['append_p50_ms']:.3f}/{f['append_p99_ms']:.3f}/{f['append_max_ms']:.2f} ms "
        f"(total {f['append_total_s']:.2f} s)  durable p50/p99 {f['durable_p50_ms']:.2f}/"
        f"{f['durable_p99_ms']:.2f} ms  fsyncs/append {f['fsyncs_per_append']:.2f}  "
        f"loop fsyncs {f['loop_fsyncs']}  all fsyncs {f['fsyncs']}  evictions "
        f"{f['evictions']:,}  final checkpoint {f['checkpoint_ms']:.0f} ms "
        f"{f['checkpoint_fsyncs']}"
    )


MEDIANS = (
    "appends_per_s",
    "append_p99_ms",
    "append_total_s",
    "durable_p50_ms",
    "durable_p99_ms",
    "fsyncs_per_append",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", action="append", required=True, help="NAME=DIR, repeatable")
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--capacity", type=int, default=64, help="descriptors the cache holds")
    parser.add_argument("--appends", type=int, default=20_000)
    parser.add_argument("--batch-records", type=int, default=8)
    parser.add_argument("--in-flight", type=int, default=16)
    parser.add_argument("--cold-files", type=int, default=0, help="clean files read first")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the logs are made")
    args = parser.parse_args()
    trees = source_trees(args.src)
    options = {
        key: getattr(args, key)
        for key in (
            "partitions",
            "capacity",
            "appends",
            "batch_records",
            "in_flight",
            "cold_files",
            "dir",
        )
    }
    print(f"load before: {uptime()}", flush=True)
    print(f"options: {options}", flush=True)
    filesystem = subprocess.run(
        ["df", "-T", args.dir], capture_output=True, text=True, check=False
    ).stdout.splitlines()[-1:]
    print(f"file system of --dir: {' '.join(filesystem)}", flush=True)
    results: dict[str, list[dict[str, Any]]] = {}
    for round_ in range(args.rounds):
        for name, source in alternated(trees, round_):
            figures = {"load": uptime(), **one_run(source, options)}
            results.setdefault(name, []).append(figures)
            print(describe(name, figures), flush=True)
    print(f"load after:  {uptime()}")
    print("medians of the runs: " + ", ".join(MEDIANS))
    for name, runs in results.items():
        print(
            f"  {name:<6} "
            + "  ".join(f"{statistics.median(r[key] for r in runs):,.3f}" for key in MEDIANS)
        )
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(child(json.loads(sys.argv[2]))))
    else:
        raise SystemExit(main())
