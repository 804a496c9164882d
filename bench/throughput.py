"""Throughput benchmark: 1 KiB records through a broker subprocess with confluent-kafka.

    .venv/bin/python bench/throughput.py                 # 1,000,000 records per phase
    .venv/bin/python bench/throughput.py --records 200000 --partitions 3

A benchmark, not a test: it starts `python -m oncelog broker` on a free port of 127.0.0.1
with a temporary data directory, produces N records of 1 KiB into each of three topics --
acks=1 and acks=all with idempotence off, then acks=all with enable.idempotence=true (the
broker validates every batch's producer id, epoch and sequence) -- consumes each topic back
from the beginning with assign(), prints one table, and always stops the broker (SIGTERM,
then SIGKILL), including on Ctrl-C and errors. Every phase is bounded by --phase-timeout.

Compare figures as ratios within one run (idempotent / acks=1, idempotent / acks=all,
acks=all / acks=1): absolute numbers depend on the machine, and the client runs on the
same cores as the broker.

The cost of record validation (issue 8: every produced batch's records are read, by the
native scanner) is measured in the same run: a second broker with
oncelog.record.validation.enable=false takes the same acks=1 phase, alternating with the
first over --validation-rounds rounds (median of each side; 0 rounds skips it):

    .venv/bin/python bench/throughput.py --records 200000 --validation-rounds 5
    .venv/bin/python bench/throughput.py --records 200000 --validation-compression zstd
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from common import create_topics

RECORD_SIZE = 1024
# Producer settings (stated in the output): librdkafka's own defaults for batching,
# spelled out so a change of default cannot move the figures silently.
PRODUCER_SETTINGS = {
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "max.in.flight.requests.per.connection": 5,
    "compression.type": "none",
    "enable.idempotence": False,
    "queue.buffering.max.messages": 500_000,
    "queue.buffering.max.kbytes": 1_048_576,
}
CONSUMER_SETTINGS = {
    "fetch.max.bytes": 52_428_800,
    "max.partition.fetch.bytes": 1_048_576,
    "fetch.wait.max.ms": 500,
}

# Seed 001 ("Idempotence and Transactions: The Cost and Boundaries of EOS"), for context only.
SEED_REFERENCE = {
    "produce acks=1": "650K TPS (acks=1, no idempotence)",
    "produce idempotent acks=all": "420K TPS (acks=all, idempotence)",
}
SEED_IDEMPOTENT_OVER_ACKS1 = 420 / 650
# The produce phases: (name, topic, acks, enable.idempotence), in the order they run.
PRODUCE_PHASES = [
    ("produce acks=1", "bench-acks1", "1", False),
    ("produce acks=all", "bench-acksall", "all", False),
    ("produce idempotent acks=all", "bench-idempotent", "all", True),
]


@dataclass
class Phase:
    name: str
    records: int
    seconds: float
    broker_cpu_s: float | None
    complete: bool

    @property
    def rps(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def mbps(self) -> float:
        return self.rps * RECORD_SIZE / 1e6


class _Stop(Exception):
    """SIGTERM/SIGHUP to the benchmark: unwind so the broker is stopped."""


def _on_signal(signum: int, frame: object) -> None:
    raise _Stop(f"signal {signum}")


# --- the broker subprocess -----------------------------------------------------------------


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of process ``pid`` so far, all its threads (Linux /proc);
    None elsewhere or once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class BrokerProcess:
    def __init__(
        self,
        work: Path,
        extra_sets: list[str],
        env: dict[str, str] | None = None,
        *,
        metrics: bool = False,
    ) -> None:
        """``env``: the broker's environment (default: this process's); ``metrics``: serve
        Prometheus metrics on a free port (``metrics_port`` once started)."""
        self.work = work
        self.data_dir = work / "data"
        self.ready_file = work / "ready"
        self.log_path = work / "broker.log"
        self.extra_sets = extra_sets
        self.env = env
        self.metrics = metrics
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.metrics_port: int | None = None

    def start(self, timeout_s: float = 30.0) -> None:
        cmd = [
            sys.executable,
            "-m",
            "oncelog",
            "broker",
            "--data-dir",
            str(self.data_dir),
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--ready-file",
            str(self.ready_file),
        ]
        for kv in self.extra_sets:
            cmd += ["--set", kv]
        if self.metrics:
            cmd += ["--metrics-port", "0"]
        with open(self.log_path, "wb") as log:
            # Own session: a Ctrl-C in the terminal reaches only us; we stop the broker.
            self.proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log_tail()}")
            text = self.ready_file.read_text() if self.ready_file.exists() else ""
            if text.endswith("\n"):  # `LISTENER PORT` lines, then `metrics PORT` if asked
                lines = text.splitlines()
                self.port = int(lines[0].split()[-1])
                if self.metrics:
                    self.metrics_port = int(lines[-1].split()[-1])
                return
            time.sleep(0.05)
        raise RuntimeError(f"broker not ready after {timeout_s} s:\n{self.log_tail()}")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float | None:
        """User + system CPU time of the broker so far (Linux /proc), None elsewhere."""
        return None if self.proc is None else process_cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        """SIGTERM by pid (clean shutdown), SIGKILL if it lingers. Safe to call twice."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


# --- the phases --------------------------------------------------------------------------


def produce(
    name: str,
    bootstrap: str,
    topic: str,
    acks: str,
    idempotent: bool,
    count: int,
    timeout_s: float,
    broker: BrokerProcess,
    compression: str = "none",
) -> Phase:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            **PRODUCER_SETTINGS,
            "acks": acks,
            "enable.idempotence": idempotent,
            "compression.type": compression,
        }
    )
    # Random bytes do not compress; with a codec, 1,000 different random hex texts in turn
    # (about 2:1; one value repeated would compress 300:1 inside a batch).
    payloads = [os.urandom(RECORD_SIZE)]
    if compression != "none":
        payloads = [os.urandom(RECORD_SIZE // 2).hex().encode() for _ in range(1000)]
    delivered = 0
    failed: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        elif len(failed) < 5:
            failed.append(str(err))

    # Warm-up: connection, metadata and the first batch are not part of the figures.
    producer.produce(topic, payloads[0])
    if producer.flush(30) != 0:
        raise RuntimeError(f"warm-up record to {topic} not delivered")
    cpu0 = broker.cpu_seconds()
    start = time.perf_counter()
    deadline = start + timeout_s
    sent = 0
    while sent < count and time.perf_counter() < deadline:
        try:
            producer.produce(topic, payloads[sent % len(payloads)], on_delivery=on_delivery)
            sent += 1
        except BufferError:
            producer.poll(0.01)
        if sent % 1000 == 0:
            producer.poll(0)
    while producer.flush(0.5) and time.perf_counter() < deadline:
        pass
    seconds = time.perf_counter() - start
    cpu1 = broker.cpu_seconds()
    if failed:
        raise RuntimeError(f"deliveries to {topic} failed: {failed}")
    return Phase(
        name,
        delivered,
        seconds,
        None if cpu0 is None or cpu1 is None else cpu1 - cpu0,
        delivered == count,
    )


def consume(
    bootstrap: str,
    topic: str,
    partitions: int,
    expected: int,
    timeout_s: float,
    broker: BrokerProcess,
) -> Phase:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "oncelog-bench",
            "enable.auto.commit": False,
            **CONSUMER_SETTINGS,
        }
    )
    consumer.assign(
        [TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in range(partitions)]
    )
    # Untimed: wait for the warm-up record at offset 0 (librdkafka spends about 0.5 s
    # looking up the start offset before its first fetch); the N records after it are timed.
    first_deadline = time.perf_counter() + 60
    while not (msgs := consumer.consume(num_messages=1, timeout=1.0)):
        if time.perf_counter() > first_deadline:
            raise RuntimeError(f"no record from {topic} within 60 s")
    if msgs[0].error() is not None:
        raise KafkaException(msgs[0].error())
    cpu0 = broker.cpu_seconds()
    start = time.perf_counter()
    deadline = start + timeout_s
    got = 0
    try:
        while got < expected and time.perf_counter() < deadline:
            for msg in consumer.consume(num_messages=10_000, timeout=1.0):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                got += 1
    finally:
        seconds = time.perf_counter() - start
        cpu1 = broker.cpu_seconds()
        consumer.close()
    return Phase(
        f"consume ({topic.split('-', 1)[1]})",
        got,
        seconds,
        None if cpu0 is None or cpu1 is None else cpu1 - cpu0,
        got == expected,
    )


# --- report ------------------------------------------------------------------------------


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    nproc = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"nproc {nproc}, {cpu}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, confluent-kafka {confluent_kafka.__version__}"
        f" / librdkafka {confluent_kafka.libversion()[0]}"
    )


def report(args: argparse.Namespace, phases: list[Phase], rows: int) -> str:
    out = []
    out.append("oncelog throughput benchmark")
    out.append(f"command:  {shlex.join([Path(sys.executable).name, *sys.argv])}")
    out.append(f"machine:  {machine()}")
    out.append(
        "load:     1/5/15-minute load average at the end "
        + " / ".join(f"{x:.2f}" for x in os.getloadavg())
        + " (the machine is shared: compare ratios within the run)"
    )
    out.append(
        f"workload: {args.records:,} records x {RECORD_SIZE} B values (no key) per phase, "
        f"{args.partitions} partition(s) per topic, broker and client on 127.0.0.1"
    )
    out.append(
        "producer: "
        + ", ".join(
            f"{k}={v}" for k, v in PRODUCER_SETTINGS.items() if not k.startswith("queue.")
        ).replace("False", "false")
        + " (true in the idempotent phase)"
    )
    out.append(
        "consumer: assign() from the beginning, "
        + ", ".join(f"{k}={v}" for k, v in CONSUMER_SETTINGS.items())
    )
    if args.set:
        out.append(f"broker:   defaults except --set {' '.join(args.set)}")
    else:
        out.append(
            "broker:   defaults (log.flush.interval.messages=1: acks=all waits for fsync, "
            "group commit)"
        )
    out.append(
        "timing: produce from the first timed record to the last delivery report (one "
        "warm-up record first); consume from the first record (librdkafka's ~0.5 s "
        "start-up excluded) to the Nth"
    )
    out.append(
        "MB = 10^6 bytes of record values; broker CPU = broker process user+sys seconds "
        "per wall second (client and broker share the same CPUs)"
    )
    out.append("")
    header = (
        f"{'phase':<29}{'records':>10}{'seconds':>9}{'records/s':>12}{'MB/s':>8}"
        f"{'broker CPU':>12}  seed 001 (Kafka, JVM cluster)"
    )
    out.append(header)
    out.append("-" * len(header))
    for p in phases[:rows]:
        cpu = f"{p.broker_cpu_s / p.seconds:.0%}" if p.broker_cpu_s is not None else "n/a"
        ref = SEED_REFERENCE.get(p.name, "")
        flag = "" if p.complete else "  (INCOMPLETE: timed out)"
        out.append(
            f"{p.name:<29}{p.records:>10,}{p.seconds:>9.2f}{p.rps:>12,.0f}{p.mbps:>8.1f}"
            f"{cpu:>12}  {ref}{flag}"
        )
    by_name = {p.name: p for p in phases}

    def ratio(top: str, bottom: str) -> str:
        a, b = by_name.get(top), by_name.get(bottom)
        return f"{a.rps / b.rps:.2f}" if a and b and b.rps else "n/a"

    seed = f"{SEED_IDEMPOTENT_OVER_ACKS1:.2f}"
    out.append("")
    out.append("produce ratios (records/s, this run)          this run   seed 001 (420K / 650K)")
    out.append(
        f"  idempotent acks=all / acks=1                "
        f"{ratio('produce idempotent acks=all', 'produce acks=1'):>8}   {seed}"
    )
    out.append(
        f"  idempotent acks=all / acks=all              "
        f"{ratio('produce idempotent acks=all', 'produce acks=all'):>8}   n/a (not in the seed)"
    )
    out.append(
        f"  acks=all / acks=1 (both without idempotence)"
        f"{ratio('produce acks=all', 'produce acks=1'):>8}   n/a (not in the seed)"
    )
    out.append(
        "consume ratio (acksall) / (acks1): " + ratio("consume (acksall)", "consume (acks1)")
    )
    out.append(
        "Seed 001's figures are Apache Kafka's on a larger multi-broker JVM cluster with "
        "replication; they are context, not a like-for-like comparison."
    )
    return "\n".join(out)


# --- record validation: the same acks=1 phase on a broker that does not read records -------

NO_VALIDATION = "oncelog.record.validation.enable=false"


@dataclass
class ValidationCost:
    with_validation: list[Phase]
    without_validation: list[Phase]

    @staticmethod
    def median_rps(phases: list[Phase]) -> float:
        return statistics.median(p.rps for p in phases)

    @property
    def ratio(self) -> float:
        return self.median_rps(self.with_validation) / self.median_rps(self.without_validation)


def measure_validation_cost(
    args: argparse.Namespace, validating: BrokerProcess, work: Path
) -> ValidationCost:
    """Alternate the acks=1 phase between the two brokers (order flipped every round, so
    a load change on the shared machine hits both sides alike)."""
    plain = BrokerProcess(work / "no-validation", [*args.set, NO_VALIDATION])
    plain.data_dir.parent.mkdir()
    cost = ValidationCost([], [])
    try:
        plain.start()
        sides = [(validating, cost.with_validation), (plain, cost.without_validation)]
        for round_no in range(args.validation_rounds):
            topic = f"bench-validation-{round_no}"
            for broker, _ in sides:
                create_topics(broker.bootstrap, [topic], args.partitions)
            for broker, phases in sides if round_no % 2 == 0 else sides[::-1]:
                label = "with" if broker is validating else "without"
                print(f"validation round {round_no + 1}: {label} ...", file=sys.stderr)
                phases.append(
                    produce(
                        f"produce acks=1, {label} validation",
                        broker.bootstrap,
                        topic,
                        "1",
                        False,
                        args.records,
                        args.phase_timeout,
                        broker,
                        args.validation_compression,
                    )
                )
    finally:
        plain.stop()
    return cost


def report_validation(cost: ValidationCost, compression: str) -> str:
    codec = "uncompressed" if compression == "none" else f"{compression}, hex-text values"
    out = ["", f"record validation cost (produce acks=1, {codec}, alternating brokers)"]
    for name, phases in (
        ("with validation", cost.with_validation),
        ("without validation", cost.without_validation),
    ):
        rounds = ", ".join(f"{p.rps:,.0f}" for p in phases)
        cpu = [p.broker_cpu_s / p.seconds for p in phases if p.broker_cpu_s is not None]
        cpu_text = f", broker CPU median {statistics.median(cpu):.0%}" if cpu else ""
        flag = "" if all(p.complete for p in phases) else "  (INCOMPLETE: timed out)"
        out.append(
            f"  {name:<19} median {ValidationCost.median_rps(phases):>10,.0f} records/s "
            f"(rounds: {rounds}){cpu_text}{flag}"
        )
    out.append(f"  ratio with / without: {cost.ratio:.2f}  (issue 8 asks for at least 0.80)")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    # 1M rather than 200k: at 200k a phase lasts under a second here, and the consume
    # figure is then dominated by what librdkafka prefetches around the first record.
    parser.add_argument(
        "--records",
        type=int,
        default=1_000_000,
        help="records per phase (1 KiB each; about 1 GB per topic on disk, 3 topics)",
    )
    parser.add_argument("--partitions", type=int, default=1, help="partitions per topic")
    parser.add_argument(
        "--phase-timeout",
        type=float,
        default=300.0,
        help="seconds allowed per phase (a phase cut short is flagged)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="broker configuration override (repeatable)",
    )
    parser.add_argument(
        "--validation-rounds",
        type=int,
        default=3,
        help="rounds of the record validation comparison (0: skip it)",
    )
    parser.add_argument(
        "--validation-compression",
        choices=["none", "gzip", "snappy", "lz4", "zstd"],
        default="none",
        help="producer codec in the validation comparison (the broker then decompresses "
        "every batch to read its records)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)
    if args.records < 1:
        parser.error("--records must be positive")

    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started ignoring it
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGHUP, _on_signal)
    work = Path(tempfile.mkdtemp(prefix="oncelog-bench-"))
    broker = BrokerProcess(work, args.set)
    phases: list[Phase] = []
    try:
        broker.start()
        create_topics(
            broker.bootstrap, [topic for _, topic, _, _ in PRODUCE_PHASES], args.partitions
        )
        for name, topic, acks, idempotent in PRODUCE_PHASES:
            print(f"{name}: {args.records:,} records ...", file=sys.stderr)
            phases.append(
                produce(
                    name,
                    broker.bootstrap,
                    topic,
                    acks,
                    idempotent,
                    args.records,
                    args.phase_timeout,
                    broker,
                )
            )
        for name, topic, _, _ in PRODUCE_PHASES:
            print(f"consuming {topic} ...", file=sys.stderr)
            phases.append(
                consume(
                    broker.bootstrap,
                    topic,
                    args.partitions,
                    _produced(phases, name),
                    args.phase_timeout,
                    broker,
                )
            )
        cost = None
        if args.validation_rounds > 0:
            cost = measure_validation_cost(args, broker, work)
            phases += cost.with_validation + cost.without_validation
        print(report(args, phases, len(phases) if cost is None else len(PRODUCE_PHASES) * 2))
        if cost is not None:
            print(report_validation(cost, args.validation_compression))
        return 0 if all(p.complete for p in phases) else 1
    except (KeyboardInterrupt, _Stop):
        print("interrupted; stopping the broker", file=sys.stderr)
        return 130
    except Exception:
        tail = broker.log_tail()
        if tail:
            print(f"broker log tail ({broker.log_path}):\n{tail}", file=sys.stderr)
        raise
    finally:
        broker.stop()
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


def _produced(phases: list[Phase], name: str) -> int:
    return next(p.records for p in phases if p.name == name)


if __name__ == "__main__":
    sys.exit(main())
