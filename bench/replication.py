"""Replication benchmark: acks=all throughput and produce latency, replication factor 3
against replication factor 1, on one local 3-broker cluster, in one run.

    .venv/bin/python bench/replication.py                    # 50,000 records per phase
    .venv/bin/python bench/replication.py --records 20000 --rounds 3

A benchmark, not a test: it starts ZooKeeper and three `oncelog broker` processes on
127.0.0.1 (oncelog.testing.LocalCluster, in a temporary directory), creates two topics of
one partition each -- replication factor 1, and replication factor 3 with
min.insync.replicas 2 -- and produces N records of 1 KiB into each with confluent-kafka
(acks=all, enable.idempotence=true), alternating the two phases for --rounds rounds; then
--alone records one at a time (each flushed before the next) for the latency of a lone
produce. A record's latency is the time from produce() to its delivery report. It prints
one table with records/s, MiB/s, p50 and p99 latencies per phase, and the RF3/RF1 ratios,
and always stops every process it started. Compare the ratios: the client and the three
brokers share the machine's cores, so absolute figures move with the load (printed beside
them).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from common import ACKS_ALL_IDEMPOTENT, load_average
from oncelog.testing.cluster import LocalCluster

RECORD_SIZE = 1024
# Production-like timeouts: the benchmark kills nothing, so short test timeouts buy nothing.
BROKER_CONFIG = {"zookeeper.session.timeout.ms": "18000", "replica.lag.time.max.ms": "30000"}


@dataclass
class Phase:
    topic: str
    replication_factor: int
    seconds: float = 0.0
    records: int = 0
    latencies_ms: list[float] = field(default_factory=list)  # under full load (queueing)
    alone_ms: list[float] = field(default_factory=list)  # one record at a time

    @property
    def rps(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def mib_s(self) -> float:
        return self.rps * RECORD_SIZE / (1 << 20)

    def percentile(self, q: float, *, alone: bool = False) -> float:
        ordered = sorted(self.alone_ms if alone else self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def produce_one_at_a_time(servers: str, phase: Phase, count: int) -> None:
    """Latency without queueing: each record is produced and flushed before the next."""
    producer = Producer({**ACKS_ALL_IDEMPOTENT, "bootstrap.servers": servers, "linger.ms": 0})
    payload = os.urandom(RECORD_SIZE)
    for _ in range(count):
        start = time.perf_counter()
        producer.produce(phase.topic, payload)
        if producer.flush(30):
            raise SystemExit(f"{phase.topic}: a record was not delivered within 30 s")
        phase.alone_ms.append((time.perf_counter() - start) * 1000)


def produce(servers: str, phase: Phase, count: int, timeout_s: float) -> None:
    producer = Producer({"bootstrap.servers": servers, **ACKS_ALL_IDEMPOTENT})
    payload = os.urandom(RECORD_SIZE)
    sent_at: list[float] = [0.0] * count
    latencies: list[float] = []
    failures: list[str] = []

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            failures.append(str(error))
            return
        index = int(message.key())
        latencies.append((time.perf_counter() - sent_at[index]) * 1000)

    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                sent_at[i] = time.perf_counter()
                producer.produce(phase.topic, payload, key=str(i).encode(), on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    left = producer.flush(timeout_s)
    elapsed = time.perf_counter() - start
    if left or failures:
        raise SystemExit(f"{phase.topic}: {left} undelivered, failures {failures[:3]}")
    phase.seconds += elapsed
    phase.records += count
    phase.latencies_ms += latencies


def report(args: argparse.Namespace, rf1: Phase, rf3: Phase, load_before: str) -> str:
    lines = [
        f"replication benchmark: {args.records} records of {RECORD_SIZE} B per phase and round,"
        f" {args.rounds} round(s), 3 brokers on 127.0.0.1, confluent-kafka acks=all idempotent",
        f"before: {load_before}; after: {load_average()}",
        "",
        "latency under load: produce() to delivery report while producing flat out (includes"
        " client queueing); alone: one record at a time, produce() to delivery",
        "",
        f"{'phase':<14}{'records/s':>11}{'MiB/s':>8}{'load p50':>10}{'load p99':>10}"
        f"{'alone p50':>11}{'alone p99':>11}  (ms)",
    ]
    for phase in (rf1, rf3):
        lines.append(
            f"{'RF ' + str(phase.replication_factor):<14}{phase.rps:>11,.0f}{phase.mib_s:>8.1f}"
            f"{phase.percentile(0.5):>10.1f}{phase.percentile(0.99):>10.1f}"
            f"{phase.percentile(0.5, alone=True):>11.2f}{phase.percentile(0.99, alone=True):>11.2f}"
        )

    def ratio(top: float, bottom: float) -> str:
        return f"{top / bottom:.2f}" if bottom else "-"

    lines += [
        "",
        f"RF3 / RF1: throughput {ratio(rf3.rps, rf1.rps)}; latency alone p50 "
        f"{ratio(rf3.percentile(0.5, alone=True), rf1.percentile(0.5, alone=True))}, p99 "
        f"{ratio(rf3.percentile(0.99, alone=True), rf1.percentile(0.99, alone=True))}; "
        f"latency under load p50 {ratio(rf3.percentile(0.5), rf1.percentile(0.5))}, p99 "
        f"{ratio(rf3.percentile(0.99), rf1.percentile(0.99))}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--alone", type=int, default=300, help="one-at-a-time records per round")
    parser.add_argument("--phase-timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="oncelog-bench-") as work:
        with LocalCluster(Path(work), brokers=3, config=BROKER_CONFIG) as cluster:
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
            topics = [
                NewTopic("rf1", 1, 1),
                NewTopic("rf3", 1, 3, config={"min.insync.replicas": "2"}),
            ]
            for future in admin.create_topics(topics).values():
                future.result(60)
            cluster.wait_for_isr("rf3", 0, cluster.broker_ids)
            rf1, rf3 = Phase("rf1", 1), Phase("rf3", 3)
            produce(cluster.bootstrap_servers, Phase("rf1", 1), 2000, args.phase_timeout)  # warm
            for _ in range(args.rounds):
                for phase in (rf1, rf3):
                    produce(cluster.bootstrap_servers, phase, args.records, args.phase_timeout)
                    produce_one_at_a_time(cluster.bootstrap_servers, phase, args.alone)
                    print(f"{phase.topic}: {phase.records} records so far", file=sys.stderr)
    print(report(args, rf1, rf3, load_before))
    return 0


if __name__ == "__main__":
    sys.exit(main())
