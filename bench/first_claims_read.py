"""The first claims read of a new Python worker, with and without the metadata look-up that
`producers.ClientPool.claims` makes when it creates its claims consumer.

    .venv/bin/python bench/first_claims_read.py            # 10 tries each, alternating

A benchmark, not a test. It starts a broker subprocess (temporary data directory), writes
one micro-batch through the exactly-once sink (so its slot has a claim), then alternates:
a claims consumer as the pool makes it (`ClientPool().claims`), or the same consumer
without the look-up; it waits --idle seconds (a worker makes its claims consumer in one
task and may first read claims in a later one), then times the first claims read of the
slot. It prints each try, the median of each kind and the load average before and after.
The broker is always stopped and the temporary directory removed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import pyarrow as pa

from common import load_average, sink_on_a_new_broker
from oncelog.spark.producers import CLAIMS_GROUP, ClientPool, _consumer
from oncelog.spark.writer import TaskAttempt, _read_claims, write_task


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tries", type=int, default=10)
    parser.add_argument("--idle", type=float, default=0.2)
    args = parser.parse_args()
    print(f"start: {load_average()}")
    took: dict[str, list[float]] = {"as the pool makes it": [], "without the look-up": []}
    with sink_on_a_new_broker("oncelog-first-claims-", "first") as options:
        rows = pa.record_batch([pa.array([b"row"], pa.binary())], names=["value"])
        for batch in range(2):  # batch 1's claim follows batch 0's: a range to read
            write_task(options, TaskAttempt(0, 0, batch), iter([rows]), None, ClientPool())
        for i in range(args.tries * 2):
            kind = list(took)[i % 2]
            if i % 2 == 0:
                consumer = ClientPool().claims(options)
            else:
                consumer = _consumer(options, CLAIMS_GROUP, "read_uncommitted")
            time.sleep(args.idle)
            started = time.perf_counter()
            records = _read_claims(options, consumer, 0, 0, 2)  # to batch 1's claim
            took[kind].append(time.perf_counter() - started)
            consumer.close()
            if not isinstance(records, list) or len(records) != 1:
                raise RuntimeError(f"expected batch 0's claim, read {records!r}")
            print(f"  {kind:<22} {took[kind][-1] * 1000:7.1f} ms", flush=True)
    print(f"end: {load_average()}")
    for kind, seconds in took.items():
        slow = sum(s > 0.5 for s in seconds)
        print(
            f"  first claims read, consumer {kind:<22} median "
            f"{statistics.median(seconds) * 1000:6.1f} ms, {slow} of {len(seconds)} over 500 ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
