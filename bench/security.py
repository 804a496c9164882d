"""What TLS and SASL cost: the same produce and consume over PLAINTEXT, mutual TLS and
SASL_SSL with SCRAM-SHA-512, through one broker subprocess, with confluent-kafka.

    .venv/bin/python bench/security.py                      # 100,000 records, 3 rounds
    .venv/bin/python bench/security.py --records 50000 --rounds 5

A benchmark, not a test: it makes a certificate authority and certificates in a temporary
directory, starts `python -m oncelog broker` with three listeners on free ports of
127.0.0.1 (PLAINTEXT, SSL with client certificates required, SASL_SSL), gives the users
SCRAM credentials, then, each round, produces --records records of 1 KiB (acks=all,
idempotent) into a topic of its own per listener and consumes them back, the listeners
taking turns so a change of machine load falls on all three. It prints the median rate of
each and its ratio to PLAINTEXT, the figure to compare (the client shares the cores with
the broker, and the machine with others: `uptime` is printed before and after). The broker
is always stopped by its pid (a `with` block), on errors and Ctrl-C too.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from common import ACKS_ALL_IDEMPOTENT, consume_count, create_topics, produce_all, uptime
from oncelog.testing.process import BrokerProcess
from oncelog.testing.security import SecurityKit

RECORD_SIZE = 1024
# (listener, user, mechanism): how each client connects
WAYS = [("PLAINTEXT", None, None), ("SSL", "alice", None), ("SASL_SSL", "alice", "SCRAM-SHA-512")]


def client_settings(broker: BrokerProcess, kit: SecurityKit, way: tuple) -> dict[str, object]:
    listener, user, mechanism = way
    return {
        "bootstrap.servers": broker.bootstrap_servers_for(listener),
        **kit.client(listener, user, mechanism).librdkafka(),
    }


def produce(settings: dict[str, object], topic: str, records: int, timeout_s: float) -> float:
    """Records per second, from the first send to the last acknowledgement."""
    producer = Producer({**settings, **ACKS_ALL_IDEMPOTENT})
    value = b"x" * RECORD_SIZE
    failures: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            failures.append(error)

    start = time.perf_counter()
    produce_all(producer, topic, ((None, value) for _ in range(records)), delivered)
    unacknowledged = producer.flush(timeout_s)
    del producer  # closed before the broker stops, so it does not log reconnections
    if unacknowledged or failures:
        raise RuntimeError(f"{topic}: not every record acknowledged ({failures[:3]})")
    return records / (time.perf_counter() - start)


def consume(settings: dict[str, object], topic: str, records: int, timeout_s: float) -> float:
    """Records per second, reading the topic from its start until ``records`` are read."""
    consumer = Consumer({**settings, "group.id": f"bench-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    start = time.perf_counter()
    try:
        consume_count(consumer, records, timeout_s, topic)
        return records / (time.perf_counter() - start)
    finally:
        consumer.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--phase-timeout", type=float, default=300.0)
    args = parser.parse_args()
    print(f"command: python bench/security.py --records {args.records} --rounds {args.rounds}")
    print(f"before:  {uptime()}")
    rates: dict[str, dict[str, list[float]]] = {w[0]: {"produce": [], "consume": []} for w in WAYS}
    with tempfile.TemporaryDirectory(prefix="oncelog-bench-security-") as work:
        kit = SecurityKit(Path(work) / "kit")
        config = kit.broker_config(["PLAINTEXT", "SSL", "SASL_SSL"], mechanisms=["SCRAM-SHA-512"])
        with BrokerProcess(Path(work) / "data", config) as broker:
            kit.create_scram_users(
                broker.bootstrap_servers_for("PLAINTEXT"), mechanisms=["SCRAM-SHA-512"]
            )
            for round_ in range(args.rounds):
                for way in WAYS:
                    topic = f"bench-{way[0].lower()}-{round_}"
                    create_topics(broker.bootstrap_servers_for("PLAINTEXT"), [topic], 1)
                    settings = client_settings(broker, kit, way)
                    produced = produce(settings, topic, args.records, args.phase_timeout)
                    consumed = consume(settings, topic, args.records, args.phase_timeout)
                    rates[way[0]]["produce"].append(produced)
                    rates[way[0]]["consume"].append(consumed)
                    print(
                        f"round {round_ + 1} {way[0]:<10} produce {produced:>9,.0f} rec/s  "
                        f"consume {consumed:>9,.0f} rec/s",
                        flush=True,
                    )
    print(f"after:   {uptime()}")
    print(
        f"\n{'listener':<10} {'produce rec/s':>14} {'ratio':>6} {'consume rec/s':>14} {'ratio':>6}"
    )
    base = {kind: statistics.median(rates["PLAINTEXT"][kind]) for kind in ("produce", "consume")}
    for listener, kinds in rates.items():
        produced, consumed = (statistics.median(kinds[k]) for k in ("produce", "consume"))
        print(
            f"{listener:<10} {produced:>14,.0f} {produced / base['produce']:>6.2f} "
            f"{consumed:>14,.0f} {consumed / base['consume']:>6.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
