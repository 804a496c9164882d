"""Pipeline benchmark: the order-enrichment job's records/s with the sink exactly_once
against at_least_once, in the same run, as a ratio.

    .venv/bin/python bench/pipeline.py                    # 20,000 orders per guarantee
    .venv/bin/python bench/pipeline.py --orders 50000 --max-offsets-per-trigger 5000

A benchmark, not a test. It starts a broker subprocess (temporary data directory), writes
N orders once with the transactional generator, starts one SparkSession (local[2,3]) and
runs a warm-up query on a few orders (Python workers started), then the job
(`oncelog.pipeline.job`, trigger availableNow) over all N orders once per guarantee, each
into its own output topic with a fresh checkpoint and sink.id, alternating the order of
the guarantees over --rounds rounds. Time is measured from the query's start to its end
(no session start-up), and every output is verified (exactly once, or at least once). The
broker is always stopped and the temporary directory removed.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from oncelog.pipeline import PARTITIONS
from oncelog.pipeline.demo import _create_topics
from oncelog.pipeline.job import JobConfig, new_session, run
from oncelog.pipeline.orders import produce_orders
from oncelog.pipeline.verify import verify
from oncelog.testing.process import BrokerProcess

GUARANTEES = ("exactly_once", "at_least_once")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=20000)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="oncelog-bench-pipeline-"))
    broker = BrokerProcess(work / "broker", {"num.partitions": str(PARTITIONS)})
    try:
        bootstrap = broker.start().bootstrap_servers
        _create_topics(bootstrap, ["orders", "warmup"], {})
        produce_orders(bootstrap, "orders", args.orders)
        produce_orders(bootstrap, "warmup", 30, transactional_id="bench-warmup")
        spark = new_session("oncelog-bench-pipeline")
        spark.sparkContext.setLogLevel("ERROR")
        _create_topics(bootstrap, ["warmup-out"], {})
        run(
            spark,
            JobConfig(bootstrap, str(work / "ck-warmup"), "bench-warmup", "warmup", "warmup-out"),
        )
        times: dict[str, list[float]] = {g: [] for g in GUARANTEES}
        for r in range(args.rounds):
            order = GUARANTEES if r % 2 == 0 else GUARANTEES[::-1]
            for guarantee in order:
                name = f"{guarantee}-{r}"
                _create_topics(bootstrap, [f"out-{name}"], {})
                config = JobConfig(
                    bootstrap,
                    str(work / f"ck-{name}"),
                    f"bench-{name}",
                    "orders",
                    f"out-{name}",
                    guarantee,
                    args.max_offsets_per_trigger,
                )
                started = time.perf_counter()
                rows = run(spark, config)
                elapsed = time.perf_counter() - started
                check = verify(bootstrap, "orders", f"out-{name}", args.orders)
                exact = check.ok
                if (
                    rows != args.orders
                    or check.missing
                    or (guarantee == "exactly_once" and not exact)
                ):
                    print(f"{name}: verification failed: {check}", file=sys.stderr)
                    return 1
                times[guarantee].append(elapsed)
                print(
                    f"  {name:<18} {args.orders:>8,} orders in {elapsed:6.2f} s  "
                    f"{args.orders / elapsed:>8,.0f} records/s  (verified: "
                    f"{'exactly once' if exact else f'{check.duplicates} duplicates'})",
                    flush=True,
                )
        spark.stop()
        best = {g: min(ts) for g, ts in times.items()}
        rate = {g: args.orders / best[g] for g in GUARANTEES}
        print(
            f"pipeline, {args.orders:,} orders, "
            f"maxOffsetsPerTrigger={args.max_offsets_per_trigger}, "
            f"{PARTITIONS} partitions, local[2,3], {platform.python_implementation()} "
            f"{platform.python_version()} (best of {args.rounds})"
        )
        for g in GUARANTEES:
            print(f"  {g:<14} {rate[g]:>8,.0f} records/s")
        print(
            f"  exactly_once / at_least_once = {rate['exactly_once'] / rate['at_least_once']:.2f}"
        )
        return 0
    finally:
        try:
            broker.terminate(check=False)
        except Exception:
            broker.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
