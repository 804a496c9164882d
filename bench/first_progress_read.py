"""The first progress read of a new sink consumer, as `producers` makes it (a short
reconnect.backoff.ms) and with librdkafka's default (100 ms).

    .venv/bin/python bench/first_progress_read.py          # 10 tries each, alternating

A benchmark, not a test. It starts a broker subprocess (temporary data directory), writes
one micro-batch through the exactly-once sink (so its slot has a progress), then
alternates: a new progress consumer as `producers.progress_consumer` makes it, or the same
with kafka.reconnect.backoff.ms=100 (librdkafka's default), and times its first read of the
slot's progress (`writer._read_progress`: an OffsetFetch after finding the group's
coordinator). It prints each try, the median of each kind and the load average before and
after. The broker is always stopped and the temporary directory removed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace

import pyarrow as pa

from common import load_average, sink_on_a_new_broker
from oncelog.spark import claims
from oncelog.spark.producers import ClientPool, progress_consumer
from oncelog.spark.writer import TaskAttempt, _read_progress, write_task

LIBRDKAFKA_DEFAULT_MS = "100"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tries", type=int, default=10)
    args = parser.parse_args()
    print(f"start: {load_average()}")
    took: dict[str, list[float]] = {"as the sink makes it": [], "librdkafka's default": []}
    with sink_on_a_new_broker("oncelog-first-progress-", "first") as options:
        default = replace(
            options, client={**options.client, "reconnect.backoff.ms": LIBRDKAFKA_DEFAULT_MS}
        )
        rows = pa.record_batch([pa.array([b"row"], pa.binary())], names=["value"])
        pool = ClientPool()
        write_task(options, TaskAttempt(0, 0, 0), iter([rows]), None, pool)
        slots = pool.progress_slots(options)
        for i in range(args.tries * 2):
            kind = list(took)[i % 2]
            consumer = progress_consumer(options if i % 2 == 0 else default, "read_committed")
            try:
                started = time.perf_counter()
                progress = _read_progress(options, consumer, 0, slots, claims.Wait.LONG)
                took[kind].append(time.perf_counter() - started)
            finally:
                consumer.close()
            if progress is None or progress.next_batch != 1:
                raise RuntimeError(f"expected batch 0's progress, read {progress!r}")
            print(f"  {kind:<22} {took[kind][-1] * 1000:7.1f} ms", flush=True)
        for writer in pool._writers.values():
            writer.producer.close()
    print(f"end: {load_average()}")
    for kind, seconds in took.items():
        print(
            f"  first progress read, consumer {kind:<22} median "
            f"{statistics.median(seconds) * 1000:6.1f} ms, "
            f"{sum(s > 0.04 for s in seconds)} of {len(seconds)} over 40 ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
