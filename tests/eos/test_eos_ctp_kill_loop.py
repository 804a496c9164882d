"""Seed 001's consume-transform-produce loop, killed with SIGKILL and restarted many times.

A broker runs as a subprocess (BrokerProcess); the loop runs as another subprocess
(tests/eos/ctp_worker.py) that the test kills at seeded random points and restarts with
the same transactional.id and group, then lets the last instance finish. Afterwards:

- read_committed output holds every input record exactly once, transformed, in input
  order per partition;
- the group's committed offsets equal the input's end offsets;
- read_uncommitted output is reported beside it (leftovers of aborted transactions).

The control run uses the same loop without transactions (plain producer, offsets
committed every N records) and must show duplicates: proof the checks can fail.

Environment knobs: ONCELOG_EOS_SEED (int), ONCELOG_EOS_DEBUG=1 (client debug logs in each
worker's stderr file, kept in the test's tmp_path).
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.testing import BrokerProcess

from .ctp_loop import Worker, committed_offsets, end_offsets, read_all

pytestmark = pytest.mark.slow

INPUT, OUTPUT, PARTITIONS = "input", "output", 3
BROKER_CONFIG = {
    "transaction.state.log.num.partitions": "4",
    "offsets.topic.num.partitions": "4",
    "group.initial.rebalance.delay.ms": "0",
    # lets the worker use a short session, so a killed member leaves the group quickly
    "group.min.session.timeout.ms": "1000",
}
SEED = int(os.environ.get("ONCELOG_EOS_SEED", "20240601"))
DEBUG = os.environ.get("ONCELOG_EOS_DEBUG") == "1"
IO_TIMEOUT_S = 30.0


# -- helpers -----------------------------------------------------------------------------------


def record_value(i: int) -> bytes:
    return b"%06d" % i


def setup_topics_and_input(bootstrap: str, records: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for topic in (INPUT, OUTPUT):
        admin.create_topics([NewTopic(topic, PARTITIONS)])[topic].result(IO_TIMEOUT_S)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    for i in range(records):
        value = record_value(i)
        while True:
            try:
                producer.produce(INPUT, key=value, value=value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(IO_TIMEOUT_S) == 0, "input not flushed"


@dataclass
class LoopStats:
    client: str
    mode: str
    seed: int
    records: int
    group: str = ""
    kills: int = 0
    # last progress line was "in txn": records in the log, commit_transaction not returned
    # (the commit may still have reached the broker when the kill came during EndTxn)
    kills_inside_written_txn: int = 0
    # of those, kills of the "in-txn" kind: sent within ms of the line, during the worker's
    # --work-s pause, so before send_offsets_to_transaction and EndTxn
    kills_before_end_txn: int = 0
    kill_points: list[str] = field(default_factory=list)
    runs: int = 0
    loop_s: float = 0.0
    final_run_s: float = 0.0
    committed_batches_seen: int = 0
    aborts_in_worker: int = 0
    # filled in by the checks
    read_committed: int = 0
    read_uncommitted: int = 0
    aborted_leftovers: int = 0
    duplicates: int = 0
    missing: int = 0


def run_kill_loop(
    bootstrap: str,
    run_dir: Path,
    *,
    client: str,
    mode: str,
    kills: int,
    records: int,
    seed: int,
    extra: list[str] | None = None,
    stall_s: float = 45.0,
) -> LoopStats:
    rng = random.Random(seed)
    tag = uuid.uuid4().hex[:8]
    argv = [
        "--bootstrap",
        bootstrap,
        "--client",
        client,
        "--mode",
        mode,
        "--transactional-id",
        f"ctp-{tag}",
        "--group",
        f"ctp-group-{tag}",
        "--input",
        INPUT,
        "--output",
        OUTPUT,
        "--partitions",
        str(PARTITIONS),
        "--session-timeout-ms",
        "2500",
        "--heartbeat-interval-ms",
        "300",
        *(extra or []),
        *(["--debug"] if DEBUG else []),
    ]
    stats = LoopStats(
        client=client, mode=mode, seed=seed, records=records, group=f"ctp-group-{tag}"
    )
    workers: list[Worker] = []
    start = time.monotonic()
    try:
        for _ in range(kills):
            w = Worker(run_dir, len(workers), argv)
            workers.append(w)
            kind = rng.random()
            if kind < 0.25:
                # anywhere from interpreter start through init_transactions and the group join
                delay = rng.uniform(0.1, 2.5)
                point = f"t+{delay:.2f}s"
                deadline = w.started + delay
                while time.monotonic() < deadline and w.proc.poll() is None:
                    time.sleep(0.01)
            elif kind < 0.6 and mode == "eos":
                # right after the k-th transaction of this run has written its records
                k = rng.randint(1, 6)
                point = f"in-txn#{k}"
                deadline = time.monotonic() + 45
                while w.in_txn() < k and w.proc.poll() is None:
                    assert time.monotonic() < deadline, (
                        f"worker made no progress\n{w.diagnostics()}"
                    )
                    time.sleep(0.002)
            else:
                # inside the loop: after the k-th committed batch of this run, plus a little
                k = rng.randint(1, 6)
                extra_delay = rng.uniform(0.0, 0.25)
                point = f"commit#{k}+{extra_delay:.2f}s"
                deadline = time.monotonic() + 45
                while w.commits() < k and w.proc.poll() is None:
                    assert time.monotonic() < deadline, (
                        f"worker made no progress\n{w.diagnostics()}"
                    )
                    time.sleep(0.005)
                time.sleep(extra_delay)
            if w.proc.poll() is not None:
                assert w.proc.returncode == 0, (
                    f"worker failed ({w.proc.returncode})\n{w.diagnostics()}"
                )
                stats.kill_points.append(f"{point}: finished first")
                break
            w.kill()
            stats.kills += 1
            inside = w.killed_inside_txn()
            stats.kills_inside_written_txn += inside
            stats.kills_before_end_txn += inside and point.startswith("in-txn")
            stats.kill_points.append(
                f"{point} (after {w.commits()} batches{', inside txn' if inside else ''})"
            )

        final = Worker(run_dir, len(workers), argv)
        workers.append(final)
        rc = final.wait_while_progressing(stall_s)
        if rc is None:
            final.kill()
            raise AssertionError(
                f"the last worker made no progress for {stall_s} s\n{final.diagnostics()}"
            )
        assert rc == 0, f"the last worker exited with {rc}\n{final.diagnostics()}"
        assert any(line.endswith("DONE") for line in final.lines()), final.diagnostics()
        stats.final_run_s = time.monotonic() - final.started
    finally:
        for w in workers:
            w.kill()
    stats.loop_s = time.monotonic() - start
    stats.runs = len(workers)
    stats.committed_batches_seen = sum(w.commits() for w in workers)
    stats.aborts_in_worker = sum(
        1 for w in workers for line in w.lines() if " abort after " in line
    )
    return stats


def check_output(bootstrap: str, stats: LoopStats, *, exactly_once: bool) -> None:
    expected = {record_value(i) + b"|done": i for i in range(stats.records)}
    committed = read_all(bootstrap, OUTPUT, "read_committed", PARTITIONS)
    uncommitted = read_all(bootstrap, OUTPUT, "read_uncommitted", PARTITIONS)
    counts = Counter(value for _, _, _, value in committed)
    stats.read_committed = len(committed)
    stats.read_uncommitted = len(uncommitted)
    stats.aborted_leftovers = len(uncommitted) - len(committed)
    stats.duplicates = sum(c - 1 for c in counts.values() if c > 1)
    stats.missing = sum(1 for v in expected if v not in counts)
    unexpected = [v for v in counts if v not in expected]
    assert not unexpected, f"values that are no transform of any input: {unexpected[:10]}"
    assert stats.missing == 0, f"{stats.missing} input records never reached the output"
    for partition, _, key, value in committed:
        i = expected[value]
        assert partition == i % PARTITIONS and key == record_value(i), (partition, key, value)
    if exactly_once:
        dups = sorted(v for v, c in counts.items() if c > 1)
        assert stats.duplicates == 0, f"{stats.duplicates} duplicates, e.g. {dups[:10]}"
        assert len(committed) == stats.records
        for p in range(PARTITIONS):  # one worker at a time: input order is kept per partition
            seq = [expected[v] for part, _, _, v in sorted(committed) if part == p]
            assert seq == list(range(p, stats.records, PARTITIONS)), f"partition {p} out of order"
        # everything read_committed shows is also in the raw log
        assert not counts - Counter(v for *_, v in uncommitted), (
            "read_committed saw records the log lacks"
        )


def report(tmp_path: Path, stats: LoopStats) -> None:
    text = json.dumps(asdict(stats), indent=1)
    (tmp_path / "stats.json").write_text(text)
    print(f"\nEOS kill loop stats: {text}")


@pytest.fixture
def broker(tmp_path: Path):
    with BrokerProcess(tmp_path / "broker", BROKER_CONFIG) as b:
        yield b


# -- the tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_ctp_loop_killed_and_restarted_is_exactly_once(
    broker: BrokerProcess, tmp_path: Path, client: str
) -> None:
    records, kills = 20_000, 10
    bootstrap = broker.bootstrap_servers
    setup_topics_and_input(bootstrap, records)
    seed = SEED + (0 if client == "confluent" else 1)
    stats = run_kill_loop(
        bootstrap,
        tmp_path,
        client=client,
        mode="eos",
        kills=kills,
        records=records,
        seed=seed,
        # a little "work" inside each transaction, so kills often land with records written
        # but not committed (these show up as aborted leftovers under read_uncommitted)
        extra=["--batch", "200", "--work-s", "0.03", "--flush-in-txn"],
    )
    try:
        check_output(bootstrap, stats, exactly_once=True)
        assert stats.kills >= kills // 2, f"too few kills landed: {stats.kill_points}"
        ends = end_offsets(bootstrap, INPUT, PARTITIONS)
        assert ends == {p: len(range(p, records, PARTITIONS)) for p in range(PARTITIONS)}
        assert committed_offsets(bootstrap, stats.group, INPUT, PARTITIONS) == ends
        if stats.kills_before_end_txn:
            # those transactions' records are in the log, aborted by the next instance's
            # init_transactions: read_uncommitted shows them, read_committed does not
            assert stats.aborted_leftovers > 0, stats.kill_points
    finally:
        report(tmp_path, stats)


def test_control_without_transactions_duplicates(broker: BrokerProcess, tmp_path: Path) -> None:
    """Same loop, same kills, no transactions: offsets committed every 600 records after the
    output is flushed. Kills between the produce and the commit must leave duplicates."""
    records, kills = 20_000, 10
    bootstrap = broker.bootstrap_servers
    setup_topics_and_input(bootstrap, records)
    stats = run_kill_loop(
        bootstrap,
        tmp_path,
        client="confluent",
        mode="plain",
        kills=kills,
        records=records,
        seed=SEED + 2,
        extra=["--batch", "200", "--commit-every", "600", "--work-s", "0.03"],
    )
    try:
        check_output(bootstrap, stats, exactly_once=False)
        assert stats.kills >= kills // 2, f"too few kills landed: {stats.kill_points}"
        assert stats.duplicates > 0, (
            "the control run shows no duplicates: the kill loop proves nothing"
        )
        assert stats.aborted_leftovers == 0  # nothing transactional here
    finally:
        report(tmp_path, stats)
