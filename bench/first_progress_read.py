"""The first progress read of a new sink: through a new consumer of its group (the sink until
2026-11-24, tenth session) and through the worker's kept admin client (`progress_read`).

    .venv/bin/python bench/first_progress_read.py          # 10 tries each, alternating

A benchmark, not a test. It starts a broker subprocess (temporary data directory), writes
one micro-batch through the exactly-once sink (so the worker's clients exist and the
progress topic is made), then alternates, each try for a new sink.id (a new group, as every
write of bench/spark.py has): a new consumer of the group, as `producers.progress_consumer`
makes it, and its `committed()` of the slot (require_stable: a new connection, a Metadata
request, the group coordinator's lookup and a connection to it, then the OffsetFetch), or
the worker's admin client's `progress_read.committed` (the lookup and the OffsetFetch). It
prints each try, the median of each kind and the load average before and after. The broker
is always stopped and the temporary directory removed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace

import pyarrow as pa
from confluent_kafka import TopicPartition

from common import load_average, sink_on_a_new_broker
from oncelog.spark import progress_read
from oncelog.spark.options import WriteOptions
from oncelog.spark.producers import TRANSACTION_TIMEOUT_S, ClientPool, progress_consumer
from oncelog.spark.writer import TaskAttempt, write_task


def _through_a_new_consumer(options: WriteOptions, slot: TopicPartition) -> int:
    consumer = progress_consumer(options, "read_committed")
    try:
        (committed,) = consumer.committed([slot], timeout=TRANSACTION_TIMEOUT_S)
    finally:
        consumer.close()
    return int(committed.offset)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tries", type=int, default=10)
    args = parser.parse_args()
    print(f"start: {load_average()}")
    took: dict[str, list[float]] = {"a new consumer": [], "the kept admin client": []}
    with sink_on_a_new_broker("oncelog-first-progress-", "first") as options:
        rows = pa.record_batch([pa.array([b"row"], pa.binary())], names=["value"])
        pool = ClientPool()
        write_task(options, TaskAttempt(0, 0, 0), iter([rows]), None, pool)
        admin = pool.cluster(options).admin
        slot = TopicPartition(options.progress_topic, 0)
        reads: dict[str, Callable[[WriteOptions], int]] = {
            "a new consumer": lambda sink: _through_a_new_consumer(sink, slot),
            "the kept admin client": lambda sink: int(
                progress_read.committed(
                    admin, sink.progress_group, slot, True, TRANSACTION_TIMEOUT_S
                ).offset
            ),
        }
        for i in range(args.tries * 2):
            kind = list(took)[i % 2]
            sink = replace(options, sink_id=f"first-{i}")
            started = time.perf_counter()
            offset = reads[kind](sink)
            took[kind].append(time.perf_counter() - started)
            if offset >= 0:
                raise RuntimeError(f"a new sink has no progress, read offset {offset}")
            print(f"  {kind:<22} {took[kind][-1] * 1000:7.1f} ms", flush=True)
        for writer in pool._writers.values():
            writer.producer.close()
    print(f"end: {load_average()}")
    for kind, seconds in took.items():
        print(
            f"  first progress read of a new sink, {kind:<22} median "
            f"{statistics.median(seconds) * 1000:6.1f} ms, "
            f"{sum(s > 0.04 for s in seconds)} of {len(seconds)} over 40 ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
