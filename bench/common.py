"""What several benchmarks share: the machine's load, printed beside every figure (the
machine is shared), topics, a producer that never drops a record when its queue is full, a count
of what a consumer reads, and the producer settings of the 1 KiB acks=all runs.

The scripts run as ``python bench/<name>.py``, so this module is imported as ``common``.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

T = TypeVar("T")

# bench/replication.py and bench/security.py: 1 KiB records, acks=all, idempotent.
ACKS_ALL_IDEMPOTENT = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "max.in.flight.requests.per.connection": 5,
    "compression.type": "none",
    "queue.buffering.max.messages": 500_000,
}


def uptime() -> str:
    """The `uptime` line: the load of every core's users, not only ours."""
    try:
        return subprocess.run(
            ["uptime"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        return "uptime unavailable"


def fd_suffix(fd: int) -> str:
    """What one of this process's descriptors is open on, by suffix: ".log", ".index",
    ".txnindex", or "other" (a checkpoint's file, a directory, a closed descriptor)."""
    try:
        suffix = Path(os.readlink(f"/proc/self/fd/{fd}")).suffix
    except OSError:
        return "other"
    return suffix if suffix in (".log", ".index", ".txnindex") else "other"


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} (nproc {os.cpu_count()})"


def create_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    """Topics of replication factor 1 on a broker the benchmark started."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names], operation_timeout=30)
    for future in futures.values():
        future.result(60)


def produce_all(
    producer: Producer,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes]],
    on_delivery: Any = None,
) -> None:
    """produce() every (key, value); while the client's queue is full, let deliveries
    drain instead of losing the record."""
    produce = producer.produce
    callback = {} if on_delivery is None else {"on_delivery": on_delivery}
    for key, value in records:
        while True:
            try:
                produce(topic, value, key, **callback)
                break
            except BufferError:
                producer.poll(0.05)


def consume_count(consumer: Consumer, records: int, timeout_s: float, what: str) -> int:
    """Read from an assigned consumer until ``records`` are read (``timeout_s`` at most)."""
    read = 0
    deadline = time.monotonic() + timeout_s
    while read < records:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: {read} of {records} records read in {timeout_s} s")
        for message in consumer.consume(10_000, 0.5):
            if message.error() is None:
                read += 1
    return read


def check_source(source: Path) -> Path:
    """``source`` (another checkout's ``src``, run with PYTHONPATH) resolved; SystemExit if
    it lacks the compiled record scanner: the broker would run the slower pure-Python
    fallback, and an A/B against it would measure the build, not the change."""
    source = source.resolve()
    if not (source / "oncelog").is_dir():
        raise SystemExit(f"{source} holds no oncelog package")
    decoder = source / "oncelog" / "spark" / "_columns.c"
    if decoder.exists() and not list(decoder.parent.glob("_columns*.so")):
        raise SystemExit(
            f"{source}: oncelog/spark/_columns is not built there: its batch reads would go "
            "through librdkafka instead of their own Fetch path"
        )
    if not list((source / "oncelog" / "protocol").glob("_record_scan*.so")):
        raise SystemExit(
            f"{source}: oncelog/protocol/_record_scan is not built there (pip install -e "
            "in that checkout, or copy the .so of the same _record_scan.c)"
        )
    return source


def source_trees(specs: list[str]) -> list[tuple[str, Path]]:
    """``--src NAME=DIR`` options as (name, checked source) pairs, in the given order;
    SystemExit on a malformed one (see ``check_source``)."""
    trees = []
    for spec in specs:
        name, _, directory = spec.partition("=")
        if not name or not directory:
            raise SystemExit(f"--src takes NAME=DIR, not {spec!r}")
        trees.append((name, check_source(Path(directory))))
    return trees


def alternated(trees: list[tuple[str, Path]], round_: int) -> list[tuple[str, Path]]:
    """The trees in the given order in even rounds, reversed in odd ones (ABBA...), so
    that a load drifting over the run weighs on every tree alike."""
    return trees if round_ % 2 == 0 else trees[::-1]


def run_alternated(
    trees: list[tuple[str, Path]],
    rounds: int,
    one_run: Callable[[str, Path], T],
    describe: Callable[[T], str],
) -> list[T]:
    """``rounds`` runs of every tree, alternated (``alternated``), each described as it
    ends, between the load before and after; the runs, in order."""
    print(f"load before: {uptime()}", flush=True)
    runs = []
    for round_ in range(rounds):
        for name, source in alternated(trees, round_):
            runs.append(one_run(name, source))
            print(describe(runs[-1]), flush=True)
    print(f"load after:  {uptime()}")
    return runs


@contextmanager
def sink_on_a_new_broker(prefix: str, sink_id: str) -> Iterator[Any]:
    """The options of an exactly-once sink writing topic `out` (one partition) of a new
    broker subprocess, stopped and its temporary directory removed after."""
    from oncelog.spark.options import parse_write_options
    from oncelog.testing.process import BrokerProcess

    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        with BrokerProcess(Path(tmp) / "broker", {"num.partitions": "1"}) as broker:
            bootstrap = broker.bootstrap_servers
            create_topics(bootstrap, ["out"], 1)
            yield parse_write_options(
                {"kafka.bootstrap.servers": bootstrap, "topic": "out", "sink.id": sink_id}
            )
