"""`oncelog transactions list|describe|find-hanging|abort` against a real broker."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from confluent_kafka import Producer

from oncelog.client.admin import Admin, Isolation, OffsetSpec
from oncelog.testing import EmbeddedBroker

from .admin_helpers import (
    BROKER_CONFIG,
    TIMEOUT_S,
    RawTxnProducer,
    create_topic,
    plain_produce,
    read_committed_values,
    run_cli,
    run_json,
)


def offsets(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    """(high watermark, last stable offset)."""
    with Admin.connect(bootstrap) as admin:
        where = {topic: [partition]}
        return (
            admin.list_offsets(where, OffsetSpec.LATEST)[(topic, partition)],
            admin.list_offsets(where, OffsetSpec.LATEST, Isolation.READ_COMMITTED)[
                (topic, partition)
            ],
        )


def txn_producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 2,
            "transaction.timeout.ms": 600_000,
        }
    )
    producer.init_transactions(TIMEOUT_S)
    return producer


def test_list_and_describe_an_ongoing_and_a_completed_transaction(broker: EmbeddedBroker) -> None:
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, partitions=2)
    done = txn_producer(bootstrap, f"{topic}-done")
    done.begin_transaction()
    done.produce(topic, b"a", partition=1)
    done.commit_transaction(TIMEOUT_S)
    open_ = txn_producer(bootstrap, f"{topic}-open")
    open_.begin_transaction()
    open_.produce(topic, b"b", partition=0)
    open_.produce(topic, b"c", partition=1)
    assert open_.flush(TIMEOUT_S) == 0
    time.sleep(0.05)  # so that the open transaction has a duration above 0 ms

    listed = {t["transactional_id"]: t for t in run_json(bootstrap, "transactions", "list")}
    completed, ongoing = listed[f"{topic}-done"], listed[f"{topic}-open"]
    assert completed["state"] == "CompleteCommit"
    assert completed["duration_ms"] is None and completed["partitions"] == []
    assert ongoing["state"] == "Ongoing"
    assert ongoing["partitions"] == [f"{topic}-0", f"{topic}-1"]
    assert ongoing["timeout_ms"] == 600_000
    assert 0 < ongoing["duration_ms"] < 60_000
    assert ongoing["producer_id"] != completed["producer_id"]

    # The table shows the same rows.
    table = run_cli(bootstrap, "transactions", "list").output
    assert f"{topic}-open" in table and "Ongoing" in table and "CompleteCommit" in table

    # Filters: state, producer id, duration (ListTransactions v1).
    only_ongoing = run_json(bootstrap, "transactions", "list", "--state", "Ongoing")
    assert f"{topic}-open" in {t["transactional_id"] for t in only_ongoing}
    assert all(t["state"] == "Ongoing" for t in only_ongoing)
    by_pid = run_json(
        bootstrap, "transactions", "list", "--producer-id", str(completed["producer_id"])
    )
    assert [t["transactional_id"] for t in by_pid] == [f"{topic}-done"]
    assert f"{topic}-open" not in {
        t["transactional_id"]
        for t in run_json(bootstrap, "transactions", "list", "--duration-filter", "3600000")
    }
    bad = run_cli(bootstrap, "transactions", "list", "--state", "Sleeping", expect_exit=1)
    assert "unknown transaction states: Sleeping" in bad.output

    described = run_json(
        bootstrap, "transactions", "describe", "--transactional-id", f"{topic}-open"
    )
    assert described["state"] == "Ongoing"
    assert described["producer_id"] == ongoing["producer_id"]
    assert described["producer_epoch"] == 0
    assert described["start_time_ms"] is not None and described["start_time"].endswith("Z")
    assert described["partitions"] == [f"{topic}-0", f"{topic}-1"]

    open_.commit_transaction(TIMEOUT_S)
    # EndTxn answers once PrepareCommit is written; the markers and CompleteCommit follow.
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        after = run_json(
            bootstrap, "transactions", "describe", "--transactional-id", f"{topic}-open"
        )
        if after["state"] != "PrepareCommit" or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert (after["state"], after["partitions"], after["duration_ms"]) == (
        "CompleteCommit",
        [],
        None,
    )

    missing = run_cli(
        bootstrap, "transactions", "describe", "--transactional-id", "no-such-id", expect_exit=1
    )
    assert "TRANSACTIONAL_ID_NOT_FOUND" in missing.output


def test_describe_an_id_with_no_transaction_yet(broker: EmbeddedBroker) -> None:
    """State Empty: Kafka sends start time -1, which must reach the client as 'none'."""
    bootstrap = broker.bootstrap_servers
    raw = RawTxnProducer(bootstrap, "fresh-id")
    try:
        described = run_json(
            bootstrap, "transactions", "describe", "--transactional-id", "fresh-id"
        )
    finally:
        raw.close()
    assert described["state"] == "Empty"
    assert described["start_time_ms"] is None and described["duration_ms"] is None


def test_coordinator_tracked_transaction_is_not_hanging_and_abort_needs_force(
    broker: EmbeddedBroker,
) -> None:
    """A producer that wrote and went silent with a long transaction.timeout.ms: the
    coordinator still tracks it (it will abort it at the timeout), so Kafka's rule says it is
    not hanging. It shows as 'ongoing' on request; aborting it by hand needs --force."""
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap)
    plain_produce(bootstrap, topic, 3)
    stuck = txn_producer(bootstrap, f"{topic}-stuck")
    stuck.begin_transaction()
    for i in range(4):
        stuck.produce(topic, b"stuck-%d" % i, partition=0)
    assert stuck.flush(TIMEOUT_S) == 0  # ... and never used again
    plain_produce(bootstrap, topic, 2)
    assert offsets(bootstrap, topic) == (9, 3)

    search = ("transactions", "find-hanging", "--max-transaction-timeout", "0", "--topic", topic)
    assert run_json(bootstrap, *search) == []
    assert "No hanging transactions. (1 open one(s)" in run_cli(bootstrap, *search).output
    (found,) = run_json(bootstrap, *search, "--include-ongoing")
    assert (found["status"], found["start_offset"], found["transactional_id"]) == (
        "ongoing",
        3,
        f"{topic}-stuck",
    )
    # Silent for less than a minute: not a candidate at the default 15 minutes.
    assert (
        run_json(bootstrap, "transactions", "find-hanging", "--topic", topic, "--include-ongoing")
        == []
    )

    abort = ("transactions", "abort", "--topic", topic, "--partition", "0", "--start-offset", "3")
    refused = run_cli(bootstrap, *abort, expect_exit=1)
    assert "will end this transaction itself" in refused.output
    assert offsets(bootstrap, topic) == (9, 3)

    result = run_json(bootstrap, *abort, "--force")
    assert (result["last_stable_offset_before"], result["last_stable_offset_after"]) == (3, 10)
    assert result["high_watermark"] == 10  # the marker is one more offset
    assert read_committed_values(bootstrap, topic, 5) == [
        b"plain-0",
        b"plain-1",
        b"plain-2",
        b"plain-0",
        b"plain-1",
    ]


def _wipe_transaction_state(data_dir: Path) -> None:
    """Lose the coordinator's state, as a restored backup without __transaction_state would:
    the partitions still hold the open transaction, no coordinator will ever end it."""
    (data_dir / "topic-metadata" / "__transaction_state.json").unlink()
    for directory in data_dir.glob("__transaction_state-*"):
        shutil.rmtree(directory)


def test_hanging_transaction_found_and_aborted(tmp_path: Path) -> None:
    running = EmbeddedBroker(BROKER_CONFIG, data_dir=tmp_path).start()
    try:
        bootstrap = running.bootstrap_servers
        topic = create_topic(bootstrap, partitions=2)
        plain_produce(bootstrap, topic, 2)
        raw = RawTxnProducer(bootstrap, "orphan")
        raw.add_partition(topic, 0)
        assert raw.produce(topic, 0, 3) == 2  # offsets 2..4, never committed
        raw.close()
        plain_produce(bootstrap, topic, 2)  # offsets 5, 6: stuck behind the LSO
        assert offsets(bootstrap, topic) == (7, 2)
    finally:
        running.stop()
    _wipe_transaction_state(tmp_path)
    running = EmbeddedBroker(BROKER_CONFIG, data_dir=tmp_path).start()
    try:
        bootstrap = running.bootstrap_servers
        assert offsets(bootstrap, topic) == (7, 2)
        assert run_json(bootstrap, "transactions", "list") == []

        (hanging,) = run_json(
            bootstrap, "transactions", "find-hanging", "--max-transaction-timeout", "0"
        )
        assert hanging["status"] == "hanging"
        assert (hanging["topic"], hanging["partition"], hanging["start_offset"]) == (topic, 0, 2)
        assert hanging["producer_id"] == raw.producer_id
        assert hanging["transactional_id"] is None
        assert hanging["coordinator_epoch"] == -1  # no marker ever reached the partition
        table = run_cli(
            bootstrap,
            "transactions",
            "find-hanging",
            "--max-transaction-timeout",
            "0",
            "--topic",
            topic,
        ).output
        assert "hanging" in table and "no transactional id" in table

        # read_committed consumers are stuck at the LSO: only the first two records.
        assert read_committed_values(bootstrap, topic, 2) == [b"plain-0", b"plain-1"]

        aborted = run_json(
            bootstrap,
            "transactions",
            "abort",
            "--topic",
            topic,
            "--partition",
            "0",
            "--start-offset",
            "2",
        )
        assert (
            aborted["last_stable_offset_before"],
            aborted["last_stable_offset_after"],
            aborted["high_watermark"],
        ) == (2, 8, 8)
        assert offsets(bootstrap, topic) == (8, 8)
        assert (
            run_json(bootstrap, "transactions", "find-hanging", "--max-transaction-timeout", "0")
            == []
        )
        # Past the former LSO, and the aborted records stay invisible.
        assert read_committed_values(bootstrap, topic, 4) == [
            b"plain-0",
            b"plain-1",
            b"plain-0",
            b"plain-1",
        ]
        # Aborting again finds nothing to abort.
        again = run_cli(
            bootstrap,
            "transactions",
            "abort",
            "--topic",
            topic,
            "--partition",
            "0",
            "--start-offset",
            "2",
            expect_exit=1,
        )
        assert "no open transaction starts at offset 2" in again.output
    finally:
        running.stop()


def test_abort_by_producer_id_epoch_and_coordinator_epoch(tmp_path: Path) -> None:
    """The explicit form (Kafka's tool for brokers before 3.0): coordinator epoch -1 is sent
    as 0; a stale producer epoch is refused with the broker's error."""
    running = EmbeddedBroker(BROKER_CONFIG, data_dir=tmp_path).start()
    try:
        bootstrap = running.bootstrap_servers
        topic = create_topic(bootstrap)
        raw = RawTxnProducer(bootstrap, "orphan-2")
        raw.add_partition(topic, 0)
        raw.produce(topic, 0, 2)
        raw.close()
    finally:
        running.stop()
    _wipe_transaction_state(tmp_path)
    running = EmbeddedBroker(BROKER_CONFIG, data_dir=tmp_path).start()
    try:
        bootstrap = running.bootstrap_servers
        base = (
            "transactions",
            "abort",
            "--topic",
            topic,
            "--partition",
            "0",
            "--producer-id",
            str(raw.producer_id),
            "--coordinator-epoch",
            "-1",
        )
        usage = run_cli(bootstrap, *base, expect_exit=2)
        assert "--producer-epoch" in usage.output
        result = run_json(bootstrap, *base, "--producer-epoch", str(raw.epoch))
        assert (result["coordinator_epoch"], result["last_stable_offset_after"]) == (0, 3)
    finally:
        running.stop()
