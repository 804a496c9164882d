"""Python calls the broker makes per transaction: a measure of its per-transaction work that
does not depend on the machine's load (issue 12).

    .venv/bin/python bench/txn_calls.py
    .venv/bin/python bench/txn_calls.py --baseline-src /tmp/main/src --top 30

One transactional producer (confluent-kafka, linger.ms=0) commits 10-record transactions of
1 KiB records to a one-partition topic of a fresh broker run under cProfile. The broker is
run twice, for ``--few`` and ``--many`` transactions; the difference of its call counts
divided by the difference of transactions is what one more transaction costs, without the
start, the warm-up and the stop. Only the event loop's thread is counted (cProfile profiles
the thread it starts in; what the fsync threads run is not). With ``--baseline-src``
the same is measured for another checkout's ``src`` (PYTHONPATH), for an A/B of a change.
cProfile slows the broker several times, so this says nothing about speed; the counts are
the same from run to run within a few calls.
"""

from __future__ import annotations

import argparse
import os
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

from common import check_source, create_topics

TOPIC = "txn-calls"
READY_TIMEOUT_S = 60.0

FunctionKey = tuple[str, int, str]


def profiled_run(source: Path | None, transactions: int, work: Path) -> dict[FunctionKey, int]:
    """Calls per function of a broker that served ``transactions`` transactions."""
    work.mkdir(parents=True)
    profile, ready = work / "broker.prof", work / "ready"
    env = None if source is None else {**os.environ, "PYTHONPATH": str(source)}
    cmd = [sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "oncelog", "broker"]
    cmd += ["--data-dir", str(work / "data"), "--host", "127.0.0.1", "--port", "0"]
    cmd += ["--ready-file", str(ready)]
    with open(work / "broker.log", "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not (ready.exists() and ready.read_text().endswith("\n")):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"broker not ready; see {work / 'broker.log'}")
            time.sleep(0.05)
        bootstrap = f"127.0.0.1:{ready.read_text().splitlines()[0].split()[-1]}"
        create_topics(bootstrap, [TOPIC], 1)
        commit(bootstrap, transactions)
    finally:
        proc.send_signal(signal.SIGTERM)  # a clean stop: cProfile writes its file
        proc.wait(60)
    stats = pstats.Stats(str(profile)).stats  # type: ignore[attr-defined]
    return {key: row[1] for key, row in stats.items()}


def commit(bootstrap: str, transactions: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": "txn-calls", "linger.ms": 0}
    )
    producer.init_transactions(30)
    value = b"x" * 1024
    for _ in range(transactions):
        producer.begin_transaction()
        for _ in range(10):
            producer.produce(TOPIC, value, partition=0)
        producer.commit_transaction(30)
    producer.flush(30)


def per_transaction(
    source: Path | None, few: int, many: int, work: Path
) -> dict[FunctionKey, float]:
    small = profiled_run(source, few, work / "few")
    large = profiled_run(source, many, work / "many")
    return {key: (count - small.get(key, 0)) / (many - few) for key, count in large.items()}


def describe(key: FunctionKey) -> str:
    path, line, name = key
    if path == "~":
        return name
    short = path.split("site-packages/")[-1].split("/src/")[-1]
    return f"{name} ({short}:{line})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--few", type=int, default=100, help="transactions of the short run")
    parser.add_argument("--many", type=int, default=400, help="transactions of the long run")
    parser.add_argument("--baseline-src", type=Path, help="another checkout's src to compare")
    parser.add_argument("--top", type=int, default=20, help="functions to list")
    args = parser.parse_args()
    if args.many <= args.few:
        parser.error("--many must exceed --few")
    targets: list[tuple[str, Path | None]] = [("oncelog", None)]
    if args.baseline_src:
        targets.append(("oncelog-base", check_source(args.baseline_src)))
    work = Path(tempfile.mkdtemp(prefix="oncelog-txn-calls-"))
    try:
        counts = {
            name: per_transaction(source, args.few, args.many, work / name)
            for name, source in targets
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("Python calls per transaction (1 producer, 10 x 1 KiB records, linger.ms=0)")
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    totals = {name: sum(per.values()) for name, per in counts.items()}
    for name, total in totals.items():
        print(f"  {name:<14} {total:8.0f}")
    if "oncelog-base" in totals:
        print(f"  oncelog / oncelog-base: {totals['oncelog'] / totals['oncelog-base']:.3f}")
    for name, per in counts.items():
        print(f"\n{name}: the {args.top} functions called most per transaction")
        for key, calls in sorted(per.items(), key=lambda kv: -kv[1])[: args.top]:
            print(f"  {calls:8.1f}  {describe(key)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
