"""Seed 001's consume-transform-produce loop on a 3-broker cluster (replication factor 3)
while brokers are SIGKILLed and restarted, among them the loops' transaction and group
coordinators.

A confluent-kafka loop and a kafka-python loop (tests/eos/ctp_worker.py, one process each)
run at the same time, each from its own input topic to its own output topic, while a
feeder keeps writing input. Every kill takes a broker down with SIGKILL and restarts it;
the victims cycle through the transaction coordinator of each loop, the group coordinator
of each loop, and a random broker. Now and then a loop process is killed too and a new
instance (same transactional.id and group) takes over; so does one after a worker exits
on its own (kafka-python's Sender drops a transactional request sent while its
coordinator is down; librdkafka's send_offsets_to_transaction hangs on a group coordinator
that left the metadata, confluentinc/librdkafka#5511; the worker bounds those calls and
exits: tests/eos/ctp_worker.py). Then the feeder
stops and the last instances drain their input. Afterwards, for each loop:

- the read_committed output holds the transform of every input record exactly once (an
  input the feeder wrote twice, once in CI, is two records), in input order per partition
  (so no aborted record was ever returned: it would be there twice, once aborted and once
  from the transaction that redid it);
- the group's committed offsets equal the input's end offsets.

The control runs the same plain loop (no transactions, offsets committed every 600
records) through fewer kills and must show duplicates.
"""

from __future__ import annotations

import json
import logging
import random
import subprocess
import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.client.admin import Admin, AdminError
from oncelog.coordinator_partitions import partition_for
from oncelog.testing.cluster import LocalCluster

from ..eos.ctp_loop import Worker, committed_offsets, end_offsets, read_all
from .coordination import (
    COORDINATOR_CONFIG,
    FAST_FAILOVER_CONFIG,
    INTERNAL_PARTITIONS,
    OFFSETS,
    TXN_STATE,
)

pytestmark = pytest.mark.slow

PARTITIONS = 3
CONFIG = {**FAST_FAILOVER_CONFIG, **COORDINATOR_CONFIG}
SEED = 1100
FEED_PER_S = 100  # input records per second and loop while the kills go on
PROGRESS_TIMEOUT_S = 150.0
DONE = b"|done"


@dataclass
class Loop:
    """One consume-transform-produce loop: its topics, ids, and the processes it ran."""

    client: str
    mode: str
    run_dir: Path
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    workers: list[Worker] = field(default_factory=list)
    restarts_after_exit: int = 0
    killed: int = 0

    @property
    def input(self) -> str:
        return f"in-{self.client}"

    @property
    def output(self) -> str:
        return f"out-{self.client}"

    @property
    def transactional_id(self) -> str:
        return f"ctp-{self.client}-{self.tag}"

    @property
    def group(self) -> str:
        return f"ctp-group-{self.client}-{self.tag}"

    def argv(self, bootstrap: str) -> list[str]:
        argv = [
            "--bootstrap", bootstrap,
            "--client", self.client,
            "--mode", self.mode,
            "--transactional-id", self.transactional_id,
            "--group", self.group,
            "--input", self.input,
            "--output", self.output,
            "--partitions", str(PARTITIONS),
            "--batch", "100",
            "--commit-every", "600",
            "--work-s", "0.05",
            "--session-timeout-ms", "6000",
            "--heartbeat-interval-ms", "500",
            "--idle-s", "5",
            "--max-run-s", "900",
        ]  # fmt: skip
        return argv + (["--flush-in-txn"] if self.mode == "eos" else [])

    def start(self, bootstrap: str) -> None:
        self.workers.append(Worker(self.run_dir, len(self.workers), self.argv(bootstrap)))

    @property
    def current(self) -> Worker:
        return self.workers[-1]

    def commits(self) -> int:
        return sum(w.commits() for w in self.workers)

    def hung(self) -> int:
        """Workers that exited because a client call hung (see ctp_worker.bounded)."""
        return sum(any(" HUNG in " in line for line in w.lines()) for w in self.workers)

    def keep_running(self, bootstrap: str) -> None:
        """A loop that stopped (a fatal client error, or DONE while the feeder paused) is
        started again, as an operator's supervisor would."""
        if self.current.proc.poll() is not None:
            self.restarts_after_exit += 1
            self.start(bootstrap)

    def kill(self, bootstrap: str) -> None:
        self.current.kill()
        self.killed += 1
        self.start(bootstrap)


class Feeder:
    """Writes numbered input records to every loop's input topic until stopped (idempotent,
    acks=all): the input keeps growing while the brokers die."""

    def __init__(self, bootstrap: str, topics: list[str], trace: Path) -> None:
        # librdkafka's idempotence states (PID requests, drains, epoch bumps) go to
        # ``trace``: the feeder stopped delivering after a broker restart in one loaded run
        # (11:28 on 2026-11-23, notes/suitetime2.md), and its stderr did not say why.
        self._trace = logging.FileHandler(trace)
        self._trace.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        self._log = logging.getLogger(f"feeder-{trace.parent.name}")
        self._log.propagate = False
        self._log.setLevel(logging.DEBUG)
        self._log.addHandler(self._trace)
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "linger.ms": 5,
                "debug": "eos",
            },
            logger=self._log,
        )
        self._topics = topics
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="feeder", daemon=True)
        self.sent = 0

    def start(self) -> Feeder:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(120)
        try:
            assert self._producer.flush(120) == 0, (
                "the feeder's input was not all delivered (its idempotence trace: feeder.log)"
            )
        finally:
            self._log.removeHandler(self._trace)
            self._trace.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            for topic in self._topics:
                value = f"{topic}-{self.sent:07d}".encode()
                self._producer.produce(topic, key=value, value=value, partition=self.sent % 3)
            self.sent += 1
            self._producer.poll(0)
            time.sleep(1 / FEED_PER_S)


@dataclass
class Outcome:
    client: str
    mode: str
    input: int = 0
    # Input records the feeder wrote twice. librdkafka's idempotent producer (2.16) did so
    # once in CI: a request in flight to a killed leader was persisted, and after a later
    # request's OUT_OF_ORDER_SEQUENCE_NUMBER (a real gap, as Kafka's broker answers) it
    # bumped the epoch and numbered every queued message anew from the first unacknowledged
    # one, the persisted one included (rd_kafka_toppar_pid_change), so the new leader took it
    # again. The loop must transform each input record once, so a twice-written input is
    # expected twice in the output.
    input_duplicates: int = 0
    read_committed: int = 0
    read_uncommitted: int = 0
    duplicates: int = 0
    missing: int = 0
    workers: int = 0
    killed: int = 0
    restarts_after_exit: int = 0
    hung: int = 0


def create_topics(cluster: LocalCluster, loops: list[Loop]) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    topics = [
        NewTopic(name, PARTITIONS, 3, config={"min.insync.replicas": "2"})
        for loop in loops
        for name in (loop.input, loop.output)
    ]
    for future in admin.create_topics(topics).values():
        future.result(60)
    # Every broker knows every partition before the loops start, so no worker's Metadata
    # can lack its input (the kafka-python worker also waits for its input's partitions
    # before joining: ctp_worker.know_partitions_before_joining says why).
    names = [topic.topic for topic in topics]
    deadline = time.monotonic() + 60
    while not all(knows_every_partition(cluster, b, names) for b in cluster.broker_ids):
        assert time.monotonic() < deadline, "the brokers never all knew the new topics"
        time.sleep(0.1)


def knows_every_partition(cluster: LocalCluster, broker_id: int, topics: list[str]) -> bool:
    """Whether broker ``broker_id``'s Metadata lists every partition of ``topics``."""
    with Admin.connect(cluster.address(broker_id)) as admin:
        try:
            known = admin.topic_partitions(topics)
        except AdminError:  # UNKNOWN_TOPIC_OR_PARTITION: not there yet
            return False
    return all(len(known.get(topic, [])) == PARTITIONS for topic in topics)


def coordinators(cluster: LocalCluster, loop: Loop) -> tuple[int | None, int | None]:
    """(transaction coordinator, group coordinator) of ``loop`` now."""
    return (
        cluster.leader(TXN_STATE, partition_for(loop.transactional_id, INTERNAL_PARTITIONS)),
        cluster.leader(OFFSETS, partition_for(loop.group, INTERNAL_PARTITIONS)),
    )


def group_log(cluster: LocalCluster, loop: Loop, lines: int = 30) -> str:
    """What each broker logged about the loop's group and its ``__consumer_offsets``
    partition (coordinator loads, rebalances, members removed): the last ``lines`` each."""
    partition = f"{OFFSETS}-{partition_for(loop.group, INTERNAL_PARTITIONS)}:"
    out = []
    for broker_id, broker in cluster.brokers.items():
        found = [
            line[:400]
            for line in broker.read_log().splitlines()
            if loop.group in line or partition in line
        ]
        out.append(f"broker {broker_id}:\n  " + "\n  ".join(found[-lines:]))
    return "\n".join(out)


def wait_for_progress(cluster: LocalCluster, loops: list[Loop], before: list[int]) -> None:
    deadline = time.monotonic() + PROGRESS_TIMEOUT_S
    bootstrap = cluster.bootstrap_servers
    while any(loop.commits() < n + 2 for loop, n in zip(loops, before, strict=True)):
        for loop in loops:
            loop.keep_running(bootstrap)
        stalled = [loop for loop, n in zip(loops, before, strict=True) if loop.commits() < n + 2]
        assert time.monotonic() < deadline, "no progress:\n" + "\n".join(
            f"{loop.client}:\n{loop.current.diagnostics()}\n{group_log(cluster, loop)}"
            for loop in stalled
        )
        time.sleep(0.1)


@dataclass
class Kill:
    """One broker kill and where its time went (seconds): waiting for both loops to commit
    since the last kill, the broker down, its restart, its return to every ISR."""

    victim: int
    progress_s: float
    down_s: float
    restart_s: float
    in_sync_s: float


def run_with_kills(
    cluster: LocalCluster, loops: list[Loop], kills: int, worker_kill_every: int
) -> list[Kill]:
    """Kill brokers ``kills`` times (and a loop process every ``worker_kill_every`` kills);
    the kills, in order."""
    rng = random.Random(SEED + kills)
    bootstrap = cluster.bootstrap_servers
    done: list[Kill] = []
    for k in range(kills):
        started = time.monotonic()
        wait_for_progress(cluster, loops, [loop.commits() for loop in loops])
        progressed = time.monotonic()
        loop = loops[(k // 3) % len(loops)]
        txn_coordinator, group_coordinator = coordinators(cluster, loop)
        victim = [txn_coordinator, group_coordinator, None][k % 3] or rng.choice(cluster.broker_ids)
        cluster.kill(victim)
        if worker_kill_every and k % worker_kill_every == worker_kill_every - 1:
            rng.choice(loops).kill(bootstrap)
        time.sleep(rng.uniform(0.0, 1.5))
        killed = time.monotonic()
        cluster.restart(victim)
        cluster.wait_for_brokers([victim], 60)
        restarted = time.monotonic()
        cluster.wait_until_in_sync(120)
        in_sync = time.monotonic()
        done.append(
            Kill(
                victim,
                progress_s=round(progressed - started, 1),
                down_s=round(killed - progressed, 1),
                restart_s=round(restarted - killed, 1),
                in_sync_s=round(in_sync - restarted, 1),
            )
        )
        print(f"kill {k + 1}/{kills}: {asdict(done[-1])}", flush=True)
    return done


def drain(cluster: LocalCluster, loops: list[Loop]) -> None:
    """Let each loop's last instance consume everything and stop by itself."""
    bootstrap = cluster.bootstrap_servers
    deadline = time.monotonic() + 240
    for loop in loops:
        while True:
            loop.keep_running(bootstrap)
            worker = loop.current
            try:
                worker.proc.wait(max(deadline - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                worker.kill()
                raise AssertionError(
                    f"{loop.client} did not finish\n{worker.diagnostics()}\n"
                    f"{group_log(cluster, loop)}"
                ) from None
            done = any(line.endswith("DONE") for line in worker.lines())
            if worker.proc.returncode == 0 and done:
                break
            assert time.monotonic() < deadline, worker.diagnostics()


def check(cluster: LocalCluster, loop: Loop, *, exactly_once: bool) -> Outcome:
    bootstrap = cluster.bootstrap_servers
    inputs = read_all(bootstrap, loop.input, "read_committed", PARTITIONS)
    committed = read_all(bootstrap, loop.output, "read_committed", PARTITIONS)
    uncommitted = read_all(bootstrap, loop.output, "read_uncommitted", PARTITIONS)
    expected = Counter(value + DONE for _, _, _, value in inputs)
    produced = Counter(value for _, _, _, value in committed)
    outcome = Outcome(
        loop.client,
        loop.mode,
        input=len(inputs),
        input_duplicates=sum(n - 1 for n in expected.values() if n > 1),
        read_committed=len(committed),
        read_uncommitted=len(uncommitted),
        duplicates=sum(max(produced[v] - expected[v], 0) for v in produced),
        missing=sum((expected - produced).values()),
        workers=len(loop.workers),
        killed=loop.killed,
        restarts_after_exit=loop.restarts_after_exit,
        hung=loop.hung(),
    )
    unexpected = [v for v in produced if v not in expected]
    assert not unexpected, f"{loop.client}: output that is no input's transform: {unexpected[:5]}"
    assert outcome.missing == 0, f"{loop.client}: {outcome.missing} input records lost"
    if exactly_once:
        dups = [v for v, n in produced.items() if n > expected[v]]
        assert not dups, f"{loop.client}: {len(dups)} records twice, e.g. {dups[:5]}"
        for p in range(PARTITIONS):
            wanted = [v + DONE for part, _, _, v in sorted(inputs) if part == p]
            got = [v for part, _, _, v in sorted(committed) if part == p]
            assert got == wanted, f"{loop.client}: partition {p} out of order"
        ends = end_offsets(bootstrap, loop.input, PARTITIONS)
        assert committed_offsets(bootstrap, loop.group, loop.input, PARTITIONS) == ends
    return outcome


def run(tmp_path: Path, mode: str, kills: int, worker_kill_every: int) -> list[Outcome]:
    with LocalCluster(tmp_path / "cluster", brokers=3, config=CONFIG) as cluster:
        loops = [Loop(client, mode, tmp_path / client) for client in ("confluent", "kafka-python")]
        for loop in loops:
            loop.run_dir.mkdir()
        create_topics(cluster, loops)
        feeder = Feeder(
            cluster.bootstrap_servers, [loop.input for loop in loops], tmp_path / "feeder.log"
        ).start()
        try:
            for loop in loops:
                loop.start(cluster.bootstrap_servers)
            started = time.monotonic()
            kills_done = run_with_kills(cluster, loops, kills, worker_kill_every)
            feeder.stop()
            killed = time.monotonic()
            drain(cluster, loops)
            drained = time.monotonic()
        finally:
            feeder.stop()
            for loop in loops:
                for worker in loop.workers:
                    worker.kill()
        outcomes = [check(cluster, loop, exactly_once=mode == "eos") for loop in loops]
    report = {
        "victims": [kill.victim for kill in kills_done],
        "fed": feeder.sent,
        "loops": [asdict(o) for o in outcomes],
        "seconds": {
            "kills": round(killed - started, 1),
            "drain": round(drained - killed, 1),
            **{
                phase: round(sum(getattr(kill, phase) for kill in kills_done), 1)
                for phase in ("progress_s", "down_s", "restart_s", "in_sync_s")
            },
        },
        "kills": [asdict(kill) for kill in kills_done],
    }
    (tmp_path / "outcome.json").write_text(json.dumps(report, indent=1))
    print(f"\nCTP on a cluster ({mode}): {json.dumps(report)}")
    return outcomes


def test_ctp_loop_is_exactly_once_through_twenty_broker_kills(tmp_path: Path) -> None:
    outcomes = run(tmp_path, "eos", kills=21, worker_kill_every=5)
    assert all(o.duplicates == 0 and o.missing == 0 for o in outcomes)


def test_control_without_transactions_duplicates(tmp_path: Path) -> None:
    outcomes = run(tmp_path, "plain", kills=6, worker_kill_every=2)
    assert sum(o.duplicates for o in outcomes) > 0, (
        "the plain loop showed no duplicates: the kill loop proves nothing"
    )
