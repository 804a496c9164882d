"""Spark connector benchmark: every figure of issue 15 from one run, as ratios.

    .venv/bin/python bench/spark.py                      # 1,000,000 records, 20,000 orders
    .venv/bin/python bench/spark.py --records 200000 --skip-pipeline

A benchmark, not a test. It starts a broker subprocess (temporary data directory, 3
partitions per topic) and measures, in this order:

1. one plain idempotent producer (this Python process) writing N records of ~200 bytes;
2. one tuned Python consumer (fetch.queue.backoff.ms=10) reading them back (assign());
3. Spark (one session, local[2,3], after a warm-up) reading the same topic: `count()`;
4. Spark writing N generated rows exactly_once, then at_least_once (alternating order
   over --rounds rounds, best of each);
5. the fixed cost of a streaming micro-batch at the log tail: `oncelog` source into the
   `oncelog` exactly-once sink, while small transactions keep arriving, against Spark's
   rate source into the noop sink, and against PySpark's own floor, a Python source and a
   Python sink that do nothing (mean `triggerExecution` of the progress reports after a
   warm-up);
6. the order-enrichment pipeline (`bench/pipeline.py`'s measurement).

It prints the load average (`uptime`) before and after: the machine is shared, so compare
figures only as ratios within one run. Every output is checked (row counts, exactly once).
The broker is always stopped and the temporary directory removed.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, Producer, TopicPartition
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)

from common import consume_count, create_topics, load_average, produce_all
from oncelog.pipeline.job import new_session
from oncelog.spark.client import Cluster
from oncelog.testing.process import BrokerProcess
from pipeline import VerificationFailed, measure_pipeline

PARTITIONS = 3
VALUE_SIZE = 200
TUNED_CONSUMER = {"fetch.queue.backoff.ms": 10}


def _timed(what: str, call: Callable[[], int]) -> tuple[int, float]:
    started = time.perf_counter()
    count = call()
    seconds = time.perf_counter() - started
    print(
        f"  {what:<44} {count:>10,} in {seconds:7.2f} s  {count / seconds:>10,.0f} /s", flush=True
    )
    return count, seconds


def baseline_produce(bootstrap: str, topic: str, records: int) -> int:
    """One plain idempotent producer: N records, keys and values built beforehand."""
    keys = [b"%010d" % i for i in range(records)]
    value = b"v" * VALUE_SIZE
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    produce_all(producer, topic, ((key, value) for key in keys))
    if producer.flush(300) != 0:
        raise RuntimeError("baseline producer: records undelivered")
    return records


def baseline_consume(bootstrap: str, topic: str, records: int) -> int:
    """One tuned consumer reading every partition from the start, counting records."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-baseline",
            "enable.auto.commit": False,
            **TUNED_CONSUMER,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    try:
        return consume_count(consumer, records, 300, "baseline consumer")
    finally:
        consumer.close()


def _reader(spark: Any, bootstrap: str, topic: str, **options: str) -> Any:
    reader = spark.read.format("oncelog").option("kafka.bootstrap.servers", bootstrap)
    reader = reader.option("subscribe", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def spark_write(spark: Any, bootstrap: str, topic: str, records: int, guarantee: str) -> int:
    rows = spark.range(0, records, 1, 2).selectExpr(
        "lpad(cast(id as string), 10, '0') as key", f"repeat('v', {VALUE_SIZE}) as value"
    )
    (
        rows.write.format("oncelog")
        .mode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("delivery.guarantee", guarantee)
        .option("sink.id", f"bench-{topic}")
        .save()
    )
    return records


def micro_batch_cost(
    stream: Any, checkpoint: Path, batches: int, warmup: int, timeout_s: float = 300
) -> tuple[float, int]:
    """Start `stream` (a DataStreamWriter) triggering as fast as it can; return the mean
    triggerExecution (ms) and the mean rows of `batches` micro-batches with rows, after
    `warmup` of them. The query is always stopped."""
    query = (
        stream.option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="0 seconds")
        .start()
    )
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            done = [p for p in query.recentProgress if p["numInputRows"] > 0]
            if len(done) >= warmup + batches:
                timed = done[warmup : warmup + batches]
                return (
                    statistics.mean(p["durationMs"]["triggerExecution"] for p in timed),
                    round(statistics.mean(p["numInputRows"] for p in timed)),
                )
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(done)} micro-batches in {timeout_s} s")
            time.sleep(0.2)
    finally:
        query.stop()


def fixed_cost_rate_noop(spark: Any, work: Path, batches: int, warmup: int) -> float:
    stream = spark.readStream.format("rate").option("rowsPerSecond", "10").load()
    return micro_batch_cost(stream.writeStream.format("noop"), work / "ck-rate", batches, warmup)[0]


def fixed_cost_oncelog(
    spark: Any, bootstrap: str, work: Path, batches: int, warmup: int
) -> tuple[float, int]:
    """The `oncelog` source into the exactly-once sink at the tail of a transactional
    topic: a transaction of 3 records every 20 ms keeps every trigger supplied."""
    create_topics(bootstrap, ["tail-in", "tail-out"], PARTITIONS)
    stop = threading.Event()
    sent = [0]

    def trickle() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "bench-tail"})
        producer.init_transactions(30)
        while not stop.is_set():
            producer.begin_transaction()
            for _ in range(3):
                producer.produce("tail-in", b"tail-%d" % sent[0])
                sent[0] += 1
            producer.commit_transaction(30)
            time.sleep(0.02)

    feeder = threading.Thread(target=trickle, name="bench-tail-feeder", daemon=True)
    feeder.start()
    stream = (
        spark.readStream.format("oncelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "tail-in")
        .load()
        .selectExpr("key", "value")
        .writeStream.format("oncelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", "tail-out")
        .option("sink.id", "bench-tail")
    )
    try:
        return micro_batch_cost(stream, work / "ck-tail", batches, warmup)
    finally:
        stop.set()
        feeder.join(30)


class _FloorReader(DataSourceStreamReader):
    """Three partitions of 20 rows per micro-batch, no I/O."""

    def initialOffset(self) -> dict:
        return {"t": 0}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        return {"t": time.monotonic_ns()}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [InputPartition(i) for i in range(PARTITIONS)]

    def read(self, partition: InputPartition) -> Any:
        yield pa.record_batch([pa.array([b"x"] * 20, pa.binary())], names=["value"])


class _FloorWriter(DataSourceStreamArrowWriter):
    def write(self, iterator: Any) -> WriterCommitMessage:
        for _ in iterator:
            pass
        return WriterCommitMessage()

    def commit(self, messages: Any, batchId: int) -> None:
        pass


class FloorSource(DataSource):
    """PySpark's own cost of a Python source and a Python sink: both do nothing. Defined in
    the benchmark's __main__, so the workers get it by value (cloudpickle)."""

    @classmethod
    def name(cls) -> str:
        return "bench_floor"

    def schema(self) -> str:
        return "value binary"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _FloorReader()

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamArrowWriter:
        return _FloorWriter()


def fixed_cost_python_floor(spark: Any, work: Path, batches: int, warmup: int) -> float:
    spark.dataSource.register(FloorSource)
    stream = spark.readStream.format("bench_floor").load().writeStream.format("bench_floor")
    return micro_batch_cost(stream, work / "ck-floor", batches, warmup)[0]


def measure(args: argparse.Namespace, work: Path, bootstrap: str) -> None:
    create_topics(bootstrap, ["read", "warm"], PARTITIONS)
    n = args.records
    _, produce_s = _timed(
        "baseline: idempotent producer", lambda: baseline_produce(bootstrap, "read", n)
    )
    _, consume_s = _timed(
        "baseline: tuned consumer", lambda: baseline_consume(bootstrap, "read", n)
    )
    spark = new_session("oncelog-bench-spark")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        # warm-up: Python workers started and the modules imported
        baseline_produce(bootstrap, "warm", 1000)
        _reader(spark, bootstrap, "warm").count()
        spark_write(spark, bootstrap, "warm", 1000, "exactly_once")

        def count() -> int:
            got = _reader(spark, bootstrap, "read").count()
            if got != n:
                raise VerificationFailed(f"Spark read {got} of {n} records")
            return got

        _, read_s = _timed("Spark read, count()", count)
        write_s: dict[str, float] = {}
        for r in range(args.rounds):
            for guarantee in ("exactly_once", "at_least_once")[:: 1 if r % 2 == 0 else -1]:
                topic = f"write-{guarantee}-{r}"
                create_topics(bootstrap, [topic], PARTITIONS)

                def write(t: str = topic, g: str = guarantee) -> int:
                    return spark_write(spark, bootstrap, t, n, g)

                _, seconds = _timed(f"Spark write {guarantee}", write)
                written = _reader(spark, bootstrap, topic).count()
                if written != n:
                    latest = Cluster({"bootstrap.servers": bootstrap}).offsets(
                        [(topic, p) for p in range(PARTITIONS)], "latest", True
                    )
                    raise VerificationFailed(f"{topic}: {written} records (LSO {latest})")
                write_s[guarantee] = min(write_s.get(guarantee, seconds), seconds)
        rate_ms = fixed_cost_rate_noop(spark, work, args.batches, 5)
        print(f"  micro-batch, rate source into noop:         {rate_ms:8.0f} ms", flush=True)
        floor_ms = fixed_cost_python_floor(spark, work, args.batches, 5)
        print(f"  micro-batch, Python source into Python sink: {floor_ms:7.0f} ms", flush=True)
        tail_ms, tail_rows = fixed_cost_oncelog(spark, bootstrap, work, args.batches, 5)
        print(
            f"  micro-batch, oncelog into oncelog (EOS):    {tail_ms:8.0f} ms "
            f"({tail_rows} rows a batch)",
            flush=True,
        )
        pipeline = (
            {}
            if args.skip_pipeline
            else measure_pipeline(
                spark, bootstrap, work, args.orders, args.max_offsets_per_trigger, 1
            )
        )
    finally:
        spark.stop()
    print(f"end: {load_average()}")
    print(
        f"\n{n:,} records of {VALUE_SIZE} B, {PARTITIONS} partitions, local[2,3], broker "
        "subprocess on the same machine"
    )
    rows = [
        ("batch read / tuned consumer", consume_s / read_s, ">= 0.7"),
        (
            "batch write exactly_once / idempotent producer",
            produce_s / write_s["exactly_once"],
            ">= 0.8",
        ),
        (
            "exactly_once / at_least_once (write)",
            write_s["at_least_once"] / write_s["exactly_once"],
            ">= 0.95",
        ),
        ("micro-batch cost: oncelog EOS / rate into noop", tail_ms / rate_ms, "<= 2"),
    ]
    for name, ratio, goal in rows:
        print(f"  {name:<50} {ratio:6.2f}   (goal {goal})")
    print(
        f"  {'micro-batch cost: do-nothing Python source+sink / rate':<50} "
        f"{floor_ms / rate_ms:6.2f}   (PySpark's own floor)"
    )
    for guarantee, rate in pipeline.items():
        print(f"  pipeline {guarantee:<41} {rate:6,.0f} records/s")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batches", type=int, default=30, help="micro-batches timed")
    parser.add_argument("--orders", type=int, default=20_000)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=2000)
    parser.add_argument("--skip-pipeline", action="store_true")
    args = parser.parse_args()
    print(f"oncelog Spark connector benchmark: {' '.join(sys.argv)}")
    print(
        f"machine: {platform.machine()}, {platform.python_implementation()} "
        f"{platform.python_version()}; start: {load_average()}",
        flush=True,
    )
    try:
        with tempfile.TemporaryDirectory(prefix="oncelog-bench-spark-") as tmp:
            work = Path(tmp)
            with BrokerProcess(work / "broker", {"num.partitions": str(PARTITIONS)}) as broker:
                measure(args, work, broker.bootstrap_servers)
        return 0
    except VerificationFailed as exc:
        print(f"verification failed: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
