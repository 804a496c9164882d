"""An end-to-end demonstration: orders through a real broker, across a restart, verified.

Until the Spark pipeline lands this is the project's main job (`oncelog demo`):

1. start an embedded broker (temporary data directory, free port on 127.0.0.1);
2. create the topic `orders` with 3 partitions;
3. produce the first half of N generated orders (JSON, numbered, keyed by customer) with
   confluent-kafka at acks=all, and wait until every one is acknowledged;
4. restart the broker on the same data directory and check that the partitions still hold
   every acknowledged order (the log end offsets survive);
5. produce the second half;
6. read everything back with assign() from the beginning and verify: every order exactly
   once, its JSON intact, on the partition its key was acknowledged on.

The restart happens between the halves, with nothing in flight: without the idempotent
producer (a later issue) a request cut off by a restart would be retried and could be
written twice. The exit code is 0 only if nothing is missing, duplicated or corrupt.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from oncelog.testing.embedded import EmbeddedBroker

TOPIC = "orders"
PARTITIONS = 3
DEADLINE_S = 120.0  # per phase; the demo fails rather than hangs

# librdkafka logs a failed connection while the broker restarts; the demo reports outcomes
# itself, so the client's own log lines go to this logger (silent unless configured).
_client_log = logging.getLogger("oncelog.demo.client")
_client_log.addHandler(logging.NullHandler())
_client_log.propagate = False


@dataclass
class Tally:
    sent: int = 0
    acknowledged: int = 0
    failed: list[str] = field(default_factory=list)
    # order id -> partition its delivery report named
    acked_partition: dict[int, int] = field(default_factory=dict)
    read: Counter[int] = field(default_factory=Counter)
    read_back: int = 0
    corrupt: int = 0
    misplaced: int = 0
    survived_restart: int = 0
    before_restart: int = 0


def make_order(order_id: int, rng: random.Random) -> dict[str, Any]:
    return {
        "order_id": order_id,
        "customer": f"customer-{rng.randrange(1000):03d}",
        "sku": f"SKU-{rng.randrange(50):02d}",
        "quantity": rng.randint(1, 5),
        "amount_cents": rng.randrange(100, 100_000),
    }


def run_demo(orders: int = 20000, *, console: Console | None = None) -> int:
    """Run the demonstration; return the process exit code (0: everything verified)."""
    if orders < 2:
        raise ValueError("the demo needs at least 2 orders (one on each side of the restart)")
    console = console or Console()
    tally = Tally()
    started = time.perf_counter()
    with EmbeddedBroker() as broker:
        console.print(f"[bold]oncelog demo[/]: broker at {broker.bootstrap_servers}, "
                      f"data in {broker.data_dir}")
        _create_topic(broker.bootstrap_servers)
        rng = random.Random(20_000)
        half = orders // 2
        with _progress(console) as progress:
            _produce(broker.bootstrap_servers, range(half), rng, tally, progress,
                     "producing (before restart)")
        tally.before_restart = _log_end_total(broker.bootstrap_servers)
        console.print(f"{tally.acknowledged:,} orders acknowledged; restarting the broker ...")
        broker.restart()
        tally.survived_restart = _log_end_total(broker.bootstrap_servers)
        console.print(f"after the restart the log holds {tally.survived_restart:,} records "
                      f"(before: {tally.before_restart:,})")
        with _progress(console) as progress:
            _produce(broker.bootstrap_servers, range(half, orders), rng, tally, progress,
                     "producing (after restart)")
            _consume(broker.bootstrap_servers, tally, progress)
    elapsed = time.perf_counter() - started
    return _report(console, tally, orders, elapsed)


def _progress(console: Console) -> Progress:
    return Progress(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console, transient=False)


def _create_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": _client_log})
    futures = admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)], operation_timeout=30)
    futures[TOPIC].result(60)


def _produce(bootstrap: str, ids: range, rng: random.Random, tally: Tally,
             progress: Progress, label: str) -> None:  # fmt: skip
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": False,  # the idempotent producer is a later issue
        "linger.ms": 5,
        "message.timeout.ms": int(DEADLINE_S * 1000),
        "logger": _client_log,
    })
    task = progress.add_task(label, total=len(ids))

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            tally.failed.append(str(err))
            return
        tally.acknowledged += 1
        tally.acked_partition[json.loads(msg.value())["order_id"]] = msg.partition()
        progress.advance(task)

    for order_id in ids:
        order = make_order(order_id, rng)
        value = json.dumps(order, separators=(",", ":")).encode()
        while True:
            try:
                producer.produce(TOPIC, value, key=order["customer"].encode(),
                                 on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        tally.sent += 1
        producer.poll(0)
    deadline = time.monotonic() + DEADLINE_S
    while producer.flush(0.5) and time.monotonic() < deadline:
        pass


def _log_end_total(bootstrap: str) -> int:
    """Sum of the high watermarks (log end offsets on one node) of every partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "oncelog-demo",
                         "logger": _client_log})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1]
                   for p in range(PARTITIONS))
    finally:
        consumer.close()


def _consume(bootstrap: str, tally: Tally, progress: Progress) -> None:
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "oncelog-demo",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "logger": _client_log,
    })
    ends = [consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1]
            for p in range(PARTITIONS)]
    task = progress.add_task("reading back (assign)", total=sum(ends))
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    at_end = {p for p in range(PARTITIONS) if ends[p] == 0}
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if msg.offset() >= ends[msg.partition()]:
                            at_end.add(msg.partition())
                        continue
                    raise RuntimeError(f"consume failed: {err}")
                tally.read_back += 1
                progress.advance(task)
                try:
                    order_id = int(json.loads(msg.value())["order_id"])
                except (ValueError, KeyError, TypeError):
                    tally.corrupt += 1
                    continue
                tally.read[order_id] += 1
                if tally.acked_partition.get(order_id, msg.partition()) != msg.partition():
                    tally.misplaced += 1
    finally:
        consumer.close()


def _report(console: Console, tally: Tally, orders: int, elapsed: float) -> int:
    duplicates = sum(n - 1 for n in tally.read.values() if n > 1)
    missing = sum(1 for order_id in range(orders) if order_id not in tally.read)
    unexpected = sum(1 for order_id in tally.read if not 0 <= order_id < orders)
    lost_in_restart = max(tally.before_restart - tally.survived_restart, 0)
    rows = [
        ("orders sent", tally.sent, tally.sent == orders),
        ("acknowledged (acks=all)", tally.acknowledged, tally.acknowledged == tally.sent),
        ("records in the log before restart", tally.before_restart, True),
        ("records in the log after restart", tally.survived_restart, lost_in_restart == 0),
        ("read back", tally.read_back, tally.read_back == orders),
        ("duplicates", duplicates, duplicates == 0),
        ("missing", missing, missing == 0),
        ("corrupt or unknown", tally.corrupt + unexpected, tally.corrupt + unexpected == 0),
        ("on another partition than acknowledged", tally.misplaced, tally.misplaced == 0),
    ]
    table = Table(title=f"{TOPIC}: {PARTITIONS} partitions, 1 broker restart")
    table.add_column("check")
    table.add_column("count", justify="right")
    table.add_column("ok", justify="center")
    for label, count, ok in rows:
        table.add_row(label, f"{count:,}", "[green]yes[/]" if ok else "[bold red]NO[/]")
    console.print(table)
    if tally.failed:
        console.print(f"[red]{len(tally.failed)} deliveries failed, e.g. {tally.failed[0]}[/]")
    good = all(ok for _, _, ok in rows)
    verdict = "[bold green]PASS[/]" if good else "[bold red]FAIL[/]"
    console.print(f"{verdict}: {orders:,} orders in {elapsed:.1f} s")
    return 0 if good else 1
