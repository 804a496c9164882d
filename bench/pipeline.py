"""Pipeline benchmark: the order-enrichment job's records/s with the sink exactly_once against
at_least_once, in the same run, as a ratio.

    .venv/bin/python bench/pipeline.py                    # 20,000 orders per guarantee
    .venv/bin/python bench/pipeline.py --orders 50000 --max-offsets-per-trigger 5000

A benchmark, not a test. It starts a broker subprocess (temporary data directory), writes
N orders once with the transactional generator, starts one SparkSession (local[2,3]) and
runs a warm-up query on a few orders (Python workers started), then the job
(`oncelog.pipeline.job`, trigger availableNow) over all N orders once per guarantee, each
into its own output topic with a fresh checkpoint and sink.id, alternating the order of
the guarantees over --rounds rounds. Time is measured from the query's start to its end
(no session start-up), and every output is verified (exactly once, or at least once). It
prints the load average before and after (the machine is shared: compare within a run). The
broker is always stopped and the temporary directory removed. `bench/spark.py` runs the
same measurement as one of its phases.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import create_topics, load_average
from oncelog.pipeline import PARTITIONS
from oncelog.pipeline.job import JobConfig, new_session, run
from oncelog.pipeline.orders import produce_orders
from oncelog.pipeline.verify import verify
from oncelog.testing.process import BrokerProcess

GUARANTEES = ("exactly_once", "at_least_once")


class VerificationFailed(RuntimeError):
    pass


def measure_pipeline(
    spark: Any, bootstrap: str, work: Path, orders: int, per_trigger: int, rounds: int
) -> dict[str, float]:
    """records/s of the job per guarantee (best of `rounds`), every output verified."""
    create_topics(bootstrap, ["orders", "warmup", "warmup-out"], PARTITIONS)
    produce_orders(bootstrap, "orders", orders)
    produce_orders(bootstrap, "warmup", 30, transactional_id="bench-warmup")
    run(
        spark, JobConfig(bootstrap, str(work / "ck-warmup"), "bench-warmup", "warmup", "warmup-out")
    )
    times: dict[str, list[float]] = {g: [] for g in GUARANTEES}
    for r in range(rounds):
        for guarantee in GUARANTEES if r % 2 == 0 else GUARANTEES[::-1]:
            name = f"{guarantee}-{r}"
            create_topics(bootstrap, [f"out-{name}"], PARTITIONS)
            config = JobConfig(
                bootstrap,
                str(work / f"ck-{name}"),
                f"bench-{name}",
                "orders",
                f"out-{name}",
                guarantee,
                per_trigger,
            )
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


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=20000)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    print(f"start: {load_average()}", flush=True)
    try:
        with tempfile.TemporaryDirectory(prefix="oncelog-bench-pipeline-") as tmp:
            work = Path(tmp)
            with BrokerProcess(work / "broker", {"num.partitions": str(PARTITIONS)}) as broker:
                spark = new_session("oncelog-bench-pipeline")
                spark.sparkContext.setLogLevel("ERROR")
                try:
                    rate = measure_pipeline(
                        spark,
                        broker.bootstrap_servers,
                        work,
                        args.orders,
                        args.max_offsets_per_trigger,
                        args.rounds,
                    )
                finally:
                    spark.stop()
    except VerificationFailed as exc:
        print(f"verification failed: {exc}", file=sys.stderr)
        return 1
    print(f"end: {load_average()}")
    print(
        f"pipeline, {args.orders:,} orders, "
        f"maxOffsetsPerTrigger={args.max_offsets_per_trigger}, "
        f"{PARTITIONS} partitions, local[2,3], {platform.python_implementation()} "
        f"{platform.python_version()} (best of {args.rounds})"
    )
    for g in GUARANTEES:
        print(f"  {g:<14} {rate[g]:>8,.0f} records/s")
    print(f"  exactly_once / at_least_once = {rate['exactly_once'] / rate['at_least_once']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
