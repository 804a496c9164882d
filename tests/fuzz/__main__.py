"""Long fuzzing runs on demand: ``python -m tests.fuzz --cases 50000 --seed 1 --seed 2``.

Each seed gets a fresh broker process on a temporary data directory (127.0.0.1, a free
port), the cases are spread evenly over the seeds, progress is printed every
``--progress-every`` cases, and a summary follows: outcomes, cases per mutation and per
API, and every failure with the bytes that caused it. ``--save DIR`` writes each failing
request to DIR as a regression case (``tests/fuzz/cases/`` is replayed by the test
suite). The exit status is 1 if anything failed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from oncelog.testing import BrokerProcess

from .harness import BROKER_CONFIG, FuzzRun, Summary, generate_cases
from .regressions import save_case


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--cases", type=int, default=5000, help="total, over all seeds")
    parser.add_argument("--seed", type=int, action="append", help="repeatable (default: 1)")
    parser.add_argument("--progress-every", type=int, default=1000)
    parser.add_argument("--save", type=Path, help="write failing requests here")
    args = parser.parse_args(argv)
    seeds = args.seed or [1]
    total = Summary()
    for number, seed in enumerate(seeds):
        cases = args.cases // len(seeds) + (1 if number < args.cases % len(seeds) else 0)
        with tempfile.TemporaryDirectory(prefix="oncelog-fuzz-") as data_dir:
            with BrokerProcess(Path(data_dir) / "broker", BROKER_CONFIG) as broker:
                print(f"seed {seed}: {cases} cases against broker pid {broker.pid}", flush=True)
                run = FuzzRun(broker, _printer(f"seed {seed}: "), args.progress_every)
                summary = run.run(generate_cases(seed, cases), total=cases)
                if not broker.running:
                    print(broker.read_log()[-4000:], file=sys.stderr)
        print_summary(f"seed {seed}", summary)
        total.add(summary)
        if args.save:
            for failure in summary.failures:
                if failure.case is not None:
                    print(f"saved {save_case(args.save, failure)}")
    if len(seeds) > 1:
        print_summary(f"all {len(seeds)} seeds", total)
    return 1 if total.failures else 0


def print_summary(title: str, summary: Summary) -> None:
    rate = 1000 * summary.elapsed_s / max(summary.cases, 1)
    print(f"\n== {title}: {summary.cases} cases in {summary.elapsed_s:.0f} s ({rate:.1f} ms/case)")
    print("outcomes:   " + _counts(summary.outcomes))
    print("mutations:  " + _counts(summary.by_mutation))
    apis: dict[str, int] = {}
    for api_version, count in summary.by_api.items():
        name = api_version.split(" ")[0]
        apis[name] = apis.get(name, 0) + count
    print(f"APIs:       {len(apis)} APIs, {len(summary.by_api)} API versions: " + _counts(apis))
    print(f"acknowledged batches checked: {summary.batches_checked}")
    counts = summary.failure_counts()
    for kind in (
        "broker died",
        "traceback in the broker log",
        "unanswered within 5 s",
        "malformed batch acknowledged",
        "malformed batch stored",
        "control topic damaged",
    ):
        print(f"{kind:32s} {counts.pop(kind, 0)}")
    for kind, count in counts.items():
        print(f"{kind:32s} {count}")
    for failure in summary.failures[:50]:
        print(f"\nFAILURE {failure.kind}: {failure.detail[:1500]}")
        if failure.case is not None:
            print(f"  {failure.case.describe()[:3000]}")


def _printer(prefix: str) -> Callable[[str], None]:
    return lambda line: print(prefix + line, flush=True)


def _counts(counter: dict[str, int]) -> str:
    return ", ".join(f"{key} {value}" for key, value in sorted(counter.items()))


if __name__ == "__main__":
    sys.exit(main())
