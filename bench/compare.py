"""Side-by-side benchmark: oncelog against a peer Kafka-compatible broker (issue 12).

    .venv/bin/python bench/compare.py --peer-binary /path/to/tansu
    .venv/bin/python bench/compare.py --peer-bootstrap 127.0.0.1:9092 --seconds 3
    .venv/bin/python bench/compare.py --peer-binary /path/to/tansu --nofsync --latency
    .venv/bin/python bench/compare.py --baseline-src /tmp/main/src --latency  # A/B of a change

Seed 001's four workloads (plain acks=1, idempotent acks=all, a transaction every 10 and
every 1,000 records) plus acks=all without idempotence, with 1 and 8 concurrent producers
and topics of 1 and 3 partitions, 1 KiB records, confluent-kafka, linger.ms=5,
batch.size=1000000. Each cell runs against a fresh broker: oncelog (a subprocess with its
default configuration, acks=all answered after fsync), optionally oncelog without fsync
(``--nofsync``: log.flush.interval.messages=Long.MAX), and the peer (started from
``--peer-binary``, a Tansu binary, on a free port of 127.0.0.1, memory storage; or reached
at ``--peer-bootstrap``). ``--latency`` adds the transaction-latency scenarios: one and 16
transactional producers committing 10-record transactions with linger.ms=0.
``--baseline-src DIR`` adds ``oncelog-base``: the same broker run from another checkout's
``src`` (PYTHONPATH), cell by cell next to this one, so a change is measured as a ratio
within one run rather than against a figure from another hour's load.

Every producer is its own process (the GIL would otherwise be what is measured) and
writes record i of its run to partition i mod P, so every transaction spans every
partition. A workload runs for ``--seconds`` after a warm-up (connection, metadata,
InitProducerId and a first record or transaction); records/s counts acknowledged records
over the wall time from the common start to the last producer's final flush or commit.
Latencies: produce = librdkafka's per-message latency from produce() to its delivery report
(every 16th message sampled), flush = producer.flush() before each commit,
commit = commit_transaction(); cpu ms/txn = the broker process's user+sys CPU time
over the timed run (every thread; /proc, so Linux only) per committed transaction, for
the brokers this benchmark starts. Figures are printed with ``uptime`` before and after:
the machine is shared, so compare ratios within one run.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Producer

from common import check_source, create_topics, uptime
from throughput import BrokerProcess, machine, process_cpu_seconds

RECORD_SIZE = 1024
LONG_MAX = str(2**63 - 1)
PRODUCER_SETTINGS: dict[str, Any] = {
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "max.in.flight.requests.per.connection": 5,
    "compression.type": "none",
    "queue.buffering.max.messages": 500_000,
    "queue.buffering.max.kbytes": 1_048_576,
}
PRODUCE_SAMPLE_EVERY = 16
WARMUP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Workload:
    name: str
    acks: str
    idempotent: bool
    records_per_txn: int | None  # None: not transactional

    @property
    def transactional(self) -> bool:
        return self.records_per_txn is not None


WORKLOADS = [
    Workload("plain acks=1", "1", False, None),
    Workload("acks=all", "all", False, None),
    Workload("idempotent acks=all", "all", True, None),
    Workload("txn every 10", "all", True, 10),
    Workload("txn every 1000", "all", True, 1000),
]
PLAIN = WORKLOADS[0].name


@dataclass
class WorkerResult:
    records: int = 0
    transactions: int = 0
    start: float = 0.0
    end: float = 0.0
    produce_ms: list[float] = field(default_factory=list)
    flush_ms: list[float] = field(default_factory=list)
    commit_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@dataclass
class Cell:
    target: str
    workload: str
    producers: int
    partitions: int
    records: int
    seconds: float
    produce_ms: list[float]
    flush_ms: list[float]
    commit_ms: list[float]
    errors: list[str]
    broker_cpu_s: float | None = None  # the broker's user+sys CPU over the timed run

    @property
    def rps(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_ms_per_txn(self) -> float | None:
        """Broker CPU per committed transaction (None: not measured or no transaction)."""
        txns = len(self.commit_ms)
        return None if self.broker_cpu_s is None or not txns else 1000 * self.broker_cpu_s / txns


# --- one producer process --------------------------------------------------------------------


def run_producer(
    bootstrap: str,
    topic: str,
    partitions: int,
    workload: Workload,
    settings: dict[str, Any],
    transactional_id: str,
    ready: Any,
    go: Event,
    start_at: Any,
    seconds: float,
    results: Any,
) -> None:
    """A producer process: warm up, wait for ``go``, produce for ``seconds``, report."""
    result = WorkerResult()
    config = {
        "bootstrap.servers": bootstrap,
        **settings,
        "acks": workload.acks,
        "enable.idempotence": workload.idempotent,
    }
    if workload.transactional:
        config["transactional.id"] = transactional_id
    producer = Producer(config)
    payload = os.urandom(RECORD_SIZE)
    sent = 0

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            if len(result.errors) < 5:
                result.errors.append(str(err))
            return
        result.records += 1
        if result.records % PRODUCE_SAMPLE_EVERY == 0:
            result.produce_ms.append(msg.latency() * 1000)

    def produce(count: int) -> None:
        nonlocal sent
        for _ in range(count):
            while True:
                try:
                    producer.produce(
                        topic, payload, partition=sent % partitions, on_delivery=on_delivery
                    )
                    break
                except BufferError:
                    producer.poll(0.005)
            sent += 1
            if sent % 1000 == 0:
                producer.poll(0)

    try:
        if workload.transactional:
            producer.init_transactions(WARMUP_TIMEOUT_S)
            producer.begin_transaction()
            produce(partitions)
            producer.commit_transaction(WARMUP_TIMEOUT_S)
        else:
            produce(partitions)
            if producer.flush(WARMUP_TIMEOUT_S):
                raise RuntimeError("warm-up records not delivered")
        result.records = 0
        ready.put(True)
        go.wait(WARMUP_TIMEOUT_S)
        result.start = start_at.value
        deadline = result.start + seconds
        if workload.records_per_txn is None:
            while time.time() < deadline:
                produce(1000)
            while producer.flush(1.0):
                pass
        else:
            while time.time() < deadline:
                producer.begin_transaction()
                produce(workload.records_per_txn)
                began = time.perf_counter()
                if producer.flush(WARMUP_TIMEOUT_S):
                    raise RuntimeError("a transaction's records were not delivered")
                flushed = time.perf_counter()
                producer.commit_transaction(WARMUP_TIMEOUT_S)
                committed = time.perf_counter()
                result.flush_ms.append((flushed - began) * 1000)
                result.commit_ms.append((committed - flushed) * 1000)
                result.transactions += 1
        result.end = time.time()
    except Exception as exc:  # reported by the parent, with the cell it happened in
        result.errors.append(f"{type(exc).__name__}: {exc}")
        ready.put(False)
    results.put(result)


def run_cell(
    target: str,
    bootstrap: str,
    workload: Workload,
    producers: int,
    partitions: int,
    seconds: float,
    settings: dict[str, Any],
    broker_cpu: Callable[[], float | None] = lambda: None,
) -> Cell:
    """One workload on one fresh broker: ``producers`` processes for ``seconds``;
    ``broker_cpu`` reads the broker's CPU seconds so far (before and after the timed run)."""
    topic = f"bench-{workload.name.replace(' ', '-').replace('=', '')}-{os.getpid()}"
    create_topics(bootstrap, [topic], partitions)
    context = multiprocessing.get_context("spawn")
    ready, results = context.Queue(), context.Queue()
    go = context.Event()
    start_at = context.Value("d", 0.0)
    procs = [
        context.Process(
            target=run_producer,
            args=(
                bootstrap,
                topic,
                partitions,
                workload,
                settings,
                f"{topic}-txn-{i}",
                ready,
                go,
                start_at,
                seconds,
                results,
            ),
            daemon=True,
        )
        for i in range(producers)
    ]
    for proc in procs:
        proc.start()
    try:
        warmed = [ready.get(timeout=WARMUP_TIMEOUT_S * 2) for _ in procs]
        start_at.value = time.time() + 0.2
        go.set()
        time.sleep(max(start_at.value - time.time(), 0.0))
        cpu_before = broker_cpu()
        collected = [results.get(timeout=seconds + WARMUP_TIMEOUT_S * 2) for _ in procs]
        cpu_after = broker_cpu()
    finally:
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
    errors = [e for r in collected for e in r.errors]
    if not all(warmed):
        errors.insert(0, "a producer failed its warm-up")
    end = max((r.end for r in collected), default=0.0)
    return Cell(
        target,
        workload.name,
        producers,
        partitions,
        sum(r.records for r in collected),
        max(end - start_at.value, 0.0),
        [x for r in collected for x in r.produce_ms],
        [x for r in collected for x in r.flush_ms],
        [x for r in collected for x in r.commit_ms],
        errors,
        None if cpu_before is None or cpu_after is None else cpu_after - cpu_before,
    )


# --- brokers -----------------------------------------------------------------------------------


class PeerProcess:
    """A peer broker binary (Tansu) on a free port of 127.0.0.1, memory storage."""

    def __init__(self, binary: Path, work: Path) -> None:
        self.binary = binary
        self.log_path = work / "peer.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> None:
        self.port = free_port()
        url = f"tcp://127.0.0.1:{self.port}"
        cmd = [
            str(self.binary),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"peer exited with {self.proc.returncode}; see {self.log_path}")
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"peer not listening after {timeout_s} s")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Target:
    """Where a cell runs: a fresh broker per cell, started and stopped here."""

    def __init__(
        self,
        name: str,
        work: Path,
        *,
        oncelog_sets: list[str] | None = None,
        source: Path | None = None,
        peer_binary: Path | None = None,
        peer_bootstrap: str | None = None,
    ) -> None:
        self.name = name
        self.work = work
        self.oncelog_sets = oncelog_sets
        self.source = source
        self.peer_binary = peer_binary
        self.peer_bootstrap = peer_bootstrap
        self._running: BrokerProcess | PeerProcess | None = None

    def start(self) -> str:
        if self.peer_bootstrap is not None:
            return self.peer_bootstrap
        if self.peer_binary is not None:
            peer = PeerProcess(self.peer_binary, self.work)
            self._running = peer
            peer.start()
            return peer.bootstrap
        cell_dir = Path(tempfile.mkdtemp(prefix="cell-", dir=self.work))
        env = None if self.source is None else {**os.environ, "PYTHONPATH": str(self.source)}
        broker = BrokerProcess(cell_dir, self.oncelog_sets or [], env)
        self._running = broker
        broker.start()
        return broker.bootstrap

    def cpu_seconds(self) -> float | None:
        """CPU seconds of the broker this target started (None for a running peer)."""
        running = self._running
        if running is None or running.proc is None:
            return None
        return process_cpu_seconds(running.proc.pid)

    def stop(self) -> None:
        if self._running is not None:
            self._running.stop()
            if isinstance(self._running, BrokerProcess):
                shutil.rmtree(self._running.data_dir, ignore_errors=True)
            self._running = None


# --- report ------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def fmt_ms(values: list[float]) -> str:
    p50, p99 = percentile(values, 0.50), percentile(values, 0.99)
    if p50 is None or p99 is None:
        return f"{'-':>15}"
    return f"{p50:>7.1f}/{p99:<7.1f}"


def throughput_table(cells: list[Cell], targets: list[str]) -> list[str]:
    out = []
    by_key = {(c.target, c.workload, c.producers, c.partitions): c for c in cells}
    combos = sorted({(c.producers, c.partitions) for c in cells})
    for producers, partitions in combos:
        out.append("")
        out.append(
            f"{producers} producer(s), {partitions} partition(s): records/s (ratio to plain)"
        )
        header = f"  {'workload':<22}" + "".join(f"{t:>24}" for t in targets)
        if len(targets) > 1:
            header += "".join(f"  {t + '/' + targets[-1]:>24}" for t in targets[:-1])
        out.append(header)
        for workload in WORKLOADS:
            row = f"  {workload.name:<22}"
            for t in targets:
                cell = by_key.get((t, workload.name, producers, partitions))
                plain = by_key.get((t, PLAIN, producers, partitions))
                if cell is None:
                    row += f"{'n/a':>24}"
                    continue
                ratio = f"({cell.rps / plain.rps:.2f})" if plain and plain.rps else ""
                flag = "!" if cell.errors else ""
                row += f"{cell.rps:>16,.0f}{flag}{ratio:>7}"
            peer = by_key.get((targets[-1], workload.name, producers, partitions))
            for t in targets[:-1]:
                cell = by_key.get((t, workload.name, producers, partitions))
                if cell and peer and peer.rps:
                    row += f"  {cell.rps / peer.rps:>24.2f}"
                else:
                    row += f"  {'n/a':>24}"
            out.append(row)
        idem = {
            t: (
                by_key.get((t, "idempotent acks=all", producers, partitions)),
                by_key.get((t, "acks=all", producers, partitions)),
            )
            for t in targets
        }
        out.append(
            "  idempotent acks=all / acks=all: "
            + ", ".join(
                f"{t} {a.rps / b.rps:.2f}" for t, (a, b) in idem.items() if a and b and b.rps
            )
        )
    return out


def latency_table(cells: list[Cell]) -> list[str]:
    out = [
        "",
        "latency, ms p50/p99: produce (send to delivery report), flush (before commit), "
        "commit_transaction",
    ]
    header = (
        f"  {'target':<18}{'workload':<22}{'prod':>5}{'part':>5}"
        f"{'produce':>16}{'flush':>16}{'commit':>16}{'txn/s':>9}{'cpu ms/txn':>12}"
    )
    out.append(header)
    for c in sorted(cells, key=lambda c: (c.producers, c.partitions, c.workload, c.target)):
        txns = len(c.commit_ms)
        rate = f"{txns / c.seconds:>9,.0f}" if txns and c.seconds else f"{'':>9}"
        cpu = c.cpu_ms_per_txn
        per_txn = f"{cpu:>12.2f}" if cpu is not None else f"{'':>12}"
        out.append(
            f"  {c.target:<18}{c.workload:<22}{c.producers:>5}{c.partitions:>5}"
            f"{fmt_ms(c.produce_ms):>16}{fmt_ms(c.flush_ms):>16}{fmt_ms(c.commit_ms):>16}"
            f"{rate}{per_txn}"
        )
    return out


# --- main --------------------------------------------------------------------------------------


def parse_list(text: str) -> list[int]:
    values = [int(x) for x in text.split(",") if x]
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    peer = parser.add_mutually_exclusive_group()
    peer.add_argument("--peer-binary", type=Path, help="a Tansu binary to start per cell")
    peer.add_argument("--peer-bootstrap", help="HOST:PORT of a running peer (not restarted)")
    parser.add_argument("--peer-name", default="tansu", help="the peer's name in the tables")
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds per workload")
    parser.add_argument("--producers", type=parse_list, default=[1, 8], help="e.g. 1,8")
    parser.add_argument("--partitions", type=parse_list, default=[1, 3], help="e.g. 1,3")
    parser.add_argument(
        "--workloads",
        default=",".join(w.name for w in WORKLOADS),
        help="comma-separated workload names (default: all)",
    )
    parser.add_argument(
        "--nofsync", action="store_true", help="also run oncelog without fsync (flush Long.MAX)"
    )
    parser.add_argument(
        "--baseline-src",
        type=Path,
        help="also run oncelog from this src directory (another checkout), as oncelog-base",
    )
    parser.add_argument(
        "--latency",
        action="store_true",
        help="also run 1 and 16 transactional producers, 10-record transactions, linger.ms=0",
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="oncelog config override"
    )
    args = parser.parse_args(argv)
    chosen = [w for w in WORKLOADS if w.name in args.workloads.split(",")]
    if not chosen:
        parser.error(f"no known workload in {args.workloads!r}")

    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    work = Path(tempfile.mkdtemp(prefix="oncelog-compare-"))
    targets = [Target("oncelog", work, oncelog_sets=args.set)]
    if args.baseline_src:
        source = check_source(args.baseline_src)
        targets.append(Target("oncelog-base", work, oncelog_sets=args.set, source=source))
    if args.nofsync:
        targets.append(
            Target(
                "oncelog-nofsync",
                work,
                oncelog_sets=[*args.set, f"log.flush.interval.messages={LONG_MAX}"],
            )
        )
    if args.peer_binary or args.peer_bootstrap:
        targets.append(
            Target(
                args.peer_name,
                work,
                peer_binary=args.peer_binary,
                peer_bootstrap=args.peer_bootstrap,
            )
        )
    plan: list[tuple[Workload, int, int, dict[str, Any]]] = [
        (w, producers, partitions, PRODUCER_SETTINGS)
        for producers in args.producers
        for partitions in args.partitions
        for w in chosen
    ]
    latency_plan: list[tuple[Workload, int, int, dict[str, Any]]] = []
    if args.latency:
        no_linger = {**PRODUCER_SETTINGS, "linger.ms": 0}
        latency_plan = [(WORKLOADS[3], n, 1, no_linger) for n in (1, 16)]
    load_before = uptime()
    cells: list[Cell] = []
    latency_cells: list[Cell] = []
    try:
        for number, (workload, producers, partitions, settings) in enumerate(
            plan + latency_plan, 1
        ):
            for target in targets:
                print(
                    f"[{number}/{len(plan) + len(latency_plan)}] {target.name}: {workload.name}, "
                    f"{producers} producer(s), {partitions} partition(s)",
                    file=sys.stderr,
                )
                bootstrap = target.start()
                try:
                    cell = run_cell(
                        target.name,
                        bootstrap,
                        workload,
                        producers,
                        partitions,
                        args.seconds,
                        settings,
                        target.cpu_seconds,
                    )
                finally:
                    target.stop()
                if cell.errors:
                    print(f"  errors: {cell.errors[:3]}", file=sys.stderr)
                (cells if number <= len(plan) else latency_cells).append(cell)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        for target in targets:
            target.stop()
        shutil.rmtree(work, ignore_errors=True)
    names = [t.name for t in targets]
    out = [
        "oncelog side-by-side benchmark",
        f"command:  {shlex.join([Path(sys.executable).name, *sys.argv])}",
        f"machine:  {machine()}",
        f"load before: {load_before}",
        f"load after:  {uptime()}",
        f"workload: {args.seconds:g} s per cell after a warm-up, 1 KiB records, record i to "
        "partition i mod P, each producer its own process, a fresh broker per cell",
        "producer: " + ", ".join(f"{k}={v}" for k, v in PRODUCER_SETTINGS.items()),
        "oncelog:  defaults (acks=all answered after fsync)"
        + (f" with --set {' '.join(args.set)}" if args.set else "")
        + ("; oncelog-nofsync: log.flush.interval.messages=Long.MAX" if args.nofsync else ""),
    ]
    if args.baseline_src:
        out.append(f"oncelog-base: the same, run from {args.baseline_src}")
    if args.peer_binary:
        out.append(f"{args.peer_name}: {args.peer_binary} broker, memory://tansu/ storage")
    elif args.peer_bootstrap:
        out.append(f"{args.peer_name}: running at {args.peer_bootstrap}")
    out += throughput_table(cells, names)
    out += latency_table(cells)
    if latency_cells:
        out += ["", "transaction latency: 10-record transactions, linger.ms=0, 1 partition"]
        out += latency_table(latency_cells)[1:]
    failed = [c for c in cells + latency_cells if c.errors]
    if failed:
        out.append("")
        out.append("! cells with errors:")
        out += [
            f"  {c.target} {c.workload} {c.producers}x{c.partitions}: {c.errors[:2]}"
            for c in failed
        ]
    print("\n".join(out))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
