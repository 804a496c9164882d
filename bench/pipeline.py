"""Pipeline benchmark: the order-enrichment job's records/s with the sink exactly_once against
at_least_once, in the same run, as a ratio; with --baseline-src, against another checkout.

    .venv/bin/python bench/pipeline.py                    # 20,000 orders per guarantee
    .venv/bin/python bench/pipeline.py --orders 50000 --max-offsets-per-trigger 5000
    .venv/bin/python bench/pipeline.py --rounds 2 --baseline-src /tmp/a852cb3/src   # A/B

A benchmark, not a test. It starts a broker subprocess (temporary data directory), writes
N orders once with the transactional generator, starts one SparkSession (local[2,3]) and
warms it up: the job over --warmup-orders orders once per guarantee (the first queries of
a new JVM run at half speed or less until its compiler has caught up: measured 21 s, then
10.5 s, for the same 20,000 orders), then the job (`oncelog.pipeline.job`, trigger
availableNow) over all N orders once per guarantee, each into its own output topic with a
fresh checkpoint and sink.id, alternating the order of the guarantees over --rounds
rounds. Time is measured from the query's start to its end (no session start-up), and
every output is verified (exactly once, or at least once). It prints the load average
before and after (the machine is shared: compare within a run). The broker is always
stopped and the temporary directory removed. `bench/spark.py` runs the same measurement
as one of its phases.

--baseline-src DIR runs the same measurement (this script, its warm-up and order) in child
processes, alternately with DIR on PYTHONPATH (another checkout's `src`: its job, sink,
source and broker) and with this tree's code: baseline, this, this, baseline, ... for
--pairs pairs (ABBA, so neither side always runs on a machine its predecessor warmed or
loaded); it prints each child's figures and, per guarantee, the median of the pairs'
ratios with their range, and the ratio of the best of each side (`pairs`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import oncelog
from common import check_source, create_topics, load_average
from oncelog.pipeline import PARTITIONS
from oncelog.pipeline.job import JobConfig, new_session, run
from oncelog.pipeline.orders import produce_orders
from oncelog.pipeline.verify import verify
from oncelog.testing.process import BrokerProcess
from pairs import describe, interleaved, ratio

GUARANTEES = ("exactly_once", "at_least_once")
RESULT = "result: "  # a child's line with its figures, for the parent of --baseline-src


class VerificationFailed(RuntimeError):
    pass


def _job(
    bootstrap: str, work: Path, name: str, source: str, guarantee: str, per_trigger: int
) -> JobConfig:
    """The job from `source` into a new topic out-`name`, with a fresh checkpoint and
    sink.id."""
    create_topics(bootstrap, [f"out-{name}"], PARTITIONS)
    return JobConfig(
        bootstrap,
        str(work / f"ck-{name}"),
        f"bench-{name}",
        source,
        f"out-{name}",
        guarantee,
        per_trigger,
    )


def measure_pipeline(
    spark: Any,
    bootstrap: str,
    work: Path,
    orders: int,
    per_trigger: int,
    rounds: int,
    warmup_orders: int = 30,
) -> dict[str, float]:
    """records/s of the job per guarantee (best of `rounds`), every output verified, after
    the job ran over `warmup_orders` orders once per guarantee."""
    create_topics(bootstrap, ["orders", "warmup"], PARTITIONS)
    produce_orders(bootstrap, "orders", orders)
    produce_orders(bootstrap, "warmup", warmup_orders, transactional_id="bench-warmup")
    for guarantee in GUARANTEES:
        run(spark, _job(bootstrap, work, f"warmup-{guarantee}", "warmup", guarantee, per_trigger))
    times: dict[str, list[float]] = {g: [] for g in GUARANTEES}
    for r in range(rounds):
        for guarantee in GUARANTEES if r % 2 == 0 else GUARANTEES[::-1]:
            name = f"{guarantee}-{r}"
            config = _job(bootstrap, work, name, "orders", guarantee, per_trigger)
            started = time.perf_counter()
            rows = run(spark, config)
            elapsed = time.perf_counter() - started
            check = verify(bootstrap, "orders", f"out-{name}", orders)
            if rows != orders or check.missing or (guarantee == "exactly_once" and not check.ok):
                raise VerificationFailed(f"{name}: {check}")
            times[guarantee].append(elapsed)
            exact = "exactly once" if check.ok else f"{check.duplicates} duplicates"
            print(
                f"  pipeline {name:<16} {orders:>8,} orders in {elapsed:6.2f} s  "
                f"{orders / elapsed:>8,.0f} records/s  (verified: {exact})",
                flush=True,
            )
    return {g: orders / min(ts) for g, ts in times.items()}


def measure(args: argparse.Namespace) -> dict[str, float] | None:
    """This tree's figures (or those of the checkout on PYTHONPATH), None if an output
    failed its verification."""
    try:
        with tempfile.TemporaryDirectory(prefix="oncelog-bench-pipeline-") as tmp:
            work = Path(tmp)
            with BrokerProcess(work / "broker", {"num.partitions": str(PARTITIONS)}) as broker:
                spark = new_session("oncelog-bench-pipeline")
                spark.sparkContext.setLogLevel("ERROR")
                try:
                    return measure_pipeline(
                        spark,
                        broker.bootstrap_servers,
                        work,
                        args.orders,
                        args.max_offsets_per_trigger,
                        args.rounds,
                        args.warmup_orders,
                    )
                finally:
                    spark.stop()
    except VerificationFailed as exc:
        print(f"verification failed: {exc}", file=sys.stderr)
        return None


def baseline_source(source: Path) -> Path:
    """Another checkout's src: one with the compiled record scanner's source must have it
    built (`common.check_source`); one from before the scanner runs as it always did."""
    if (source / "oncelog" / "protocol" / "_record_scan.c").exists():
        return check_source(source)
    if not (source / "oncelog").is_dir():
        raise SystemExit(f"{source} holds no oncelog package")
    return source.resolve()


def _child(args: argparse.Namespace, source: Path | None) -> dict[str, float]:
    """One measurement in a child process: this script, with `source` first on PYTHONPATH
    (its oncelog then replaces this tree's, in the driver, the Python workers and the
    broker), or this tree's code when None."""
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(source), *filter(None, [env.get("PYTHONPATH")])])
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--orders",
        str(args.orders),
        "--max-offsets-per-trigger",
        str(args.max_offsets_per_trigger),
        "--rounds",
        str(args.rounds),
        "--warmup-orders",
        str(args.warmup_orders),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    for line in done.stdout.splitlines():
        if line.startswith(("code:", "start:", "end:", "  pipeline")):
            print(f"    {line.strip()}", flush=True)
    results = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode != 0 or not results:
        raise SystemExit(f"the child failed ({done.returncode}): {done.stderr[-2000:]}")
    rates: dict[str, float] = json.loads(results[-1][len(RESULT) :])
    return rates


def compare(args: argparse.Namespace) -> int:
    """The ABBA pairs of children; per guarantee the median of the pairs' ratios (this tree
    over the baseline, `pairs.ratio`), their range, and the ratio of the best of each."""
    source = baseline_source(args.baseline_src)
    rates: dict[str, dict[str, list[float]]] = {"baseline": {}, "this tree": {}}
    for pair in range(args.pairs):
        for side in interleaved(("baseline", "this tree"), pair):
            print(f"  {side} ({time.strftime('%H:%M:%S', time.gmtime())} UTC, {load_average()})")
            for g, rate in _child(args, source if side == "baseline" else None).items():
                rates[side].setdefault(g, []).append(rate)
    print(f"end: {load_average()}")
    print(
        f"pipeline, {args.orders:,} orders, maxOffsetsPerTrigger={args.max_offsets_per_trigger}, "
        f"warm-up {args.warmup_orders:,} orders; {args.pairs} pairs of children, best of "
        f"{args.rounds} each; baseline {source}"
    )
    print(f"  {'':<14} {'':<18} {'':<18} median [pairs' range]  best of each")
    for g in GUARANTEES:
        this, base = rates["this tree"][g], rates["baseline"][g]
        # records/s: the baseline's over this tree's is seconds over seconds, as pairs.ratio takes
        seconds_ratio = ratio([1 / r for r in base], [1 / r for r in this], paired=True)
        print(
            f"  {g:<14} this tree {max(this):>8,.0f}  baseline {max(base):>8,.0f}  "
            f"{describe(seconds_ratio)}"
        )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=20000)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--warmup-orders", type=int, default=4000, help="the warm-up job's orders, per guarantee"
    )
    parser.add_argument("--baseline-src", type=Path, help="another checkout's src to compare")
    parser.add_argument("--pairs", type=int, default=2, help="with --baseline-src: ABBA pairs")
    args = parser.parse_args()
    print(f"start: {load_average()}", flush=True)
    print(f"code: {Path(oncelog.__file__).parent}", flush=True)
    if args.baseline_src is not None:
        return compare(args)
    rate = measure(args)
    if rate is None:
        return 1
    print(f"end: {load_average()}")
    print(
        f"pipeline, {args.orders:,} orders, "
        f"maxOffsetsPerTrigger={args.max_offsets_per_trigger}, "
        f"{PARTITIONS} partitions, local[2,3], {platform.python_implementation()} "
        f"{platform.python_version()} (best of {args.rounds}, warm-up "
        f"{args.warmup_orders:,} orders)"
    )
    for g in GUARANTEES:
        print(f"  {g:<14} {rate[g]:>8,.0f} records/s")
    print(f"  exactly_once / at_least_once = {rate['exactly_once'] / rate['at_least_once']:.2f}")
    print(RESULT + json.dumps(rate), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
