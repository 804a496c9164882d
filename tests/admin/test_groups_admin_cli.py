"""`oncelog groups list|describe`: committed offsets, HW, LSO and both lags (seed 001)."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer

from oncelog.client.group_lag import decode_assignment
from oncelog.testing import EmbeddedBroker

from .admin_helpers import TIMEOUT_S, create_topic, plain_produce, run_cli, run_json

N, M, OPEN, AFTER = 10, 4, 3, 2


def consume_and_commit(bootstrap: str, topic: str, group: str, count: int) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([topic])
    got = 0
    deadline = time.monotonic() + TIMEOUT_S
    while got < count and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is None or message.error():
            continue
        got += 1
        if got == count:
            consumer.commit(message, asynchronous=False)
    assert got == count
    return consumer


def test_describe_shows_committed_offsets_and_both_lags(broker: EmbeddedBroker) -> None:
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, partitions=1)
    group = f"g-{uuid.uuid4().hex[:6]}"
    plain_produce(bootstrap, topic, N)
    consumer = consume_and_commit(bootstrap, topic, group, M)
    try:
        described = run_json(bootstrap, "groups", "describe", "--group", group)
        assert described["state"] == "Stable"
        assert (described["protocol_type"], len(described["members"])) == ("consumer", 1)
        assert described["members"][0]["assignment"] == [f"{topic}-0"]
        (row,) = described["partitions"]
        assert (row["committed_offset"], row["high_watermark"], row["last_stable_offset"]) == (
            M,
            N,
            N,
        )
        assert (row["lag_hw"], row["lag_lso"], row["unstable"]) == (N - M, N - M, 0)
        assert row["member_id"] == described["members"][0]["member_id"]

        # A transaction opens and stays open; more records arrive after it.
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": f"{group}-txn",
                "linger.ms": 2,
                "transaction.timeout.ms": 600_000,
            }
        )
        producer.init_transactions(TIMEOUT_S)
        producer.begin_transaction()
        for i in range(OPEN):
            producer.produce(topic, b"open-%d" % i, partition=0)
        assert producer.flush(TIMEOUT_S) == 0
        plain_produce(bootstrap, topic, AFTER)

        (row,) = run_json(bootstrap, "groups", "describe", "--group", group)["partitions"]
        high = N + OPEN + AFTER
        assert (row["committed_offset"], row["high_watermark"], row["last_stable_offset"]) == (
            M,
            high,
            N,
        )
        assert row["lag_hw"] == high - M  # what Kafka's tools show as LAG
        assert row["lag_lso"] == N - M  # what a read_committed consumer can actually read
        assert row["lag_lso"] < row["lag_hw"]
        assert row["unstable"] == OPEN + AFTER

        table = run_cli(bootstrap, "groups", "describe", "--group", group).output
        assert "Lag (HW)" in table and "Lag (LSO)" in table
        assert (
            f"Total lag: {high - M} to the high watermark, {N - M} to the last stable offset."
            in table
        )

        producer.commit_transaction(TIMEOUT_S)
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            (row,) = run_json(bootstrap, "groups", "describe", "--group", group)["partitions"]
            if row["unstable"] == 0:
                break
            time.sleep(0.02)
        # The commit marker takes one offset.
        assert (row["high_watermark"], row["last_stable_offset"]) == (high + 1, high + 1)
        assert row["lag_hw"] == row["lag_lso"] == high + 1 - M
    finally:
        consumer.close()

    listed = {g["group_id"]: g for g in run_json(bootstrap, "groups", "list")}
    assert listed[group] == {"group_id": group, "protocol_type": "consumer", "state": "Empty"}
    # An empty group still shows its committed offsets, with no member.
    (row,) = run_json(bootstrap, "groups", "describe", "--group", group)["partitions"]
    assert (row["committed_offset"], row["member_id"]) == (M, None)


def test_describe_a_group_with_nothing_committed(broker: EmbeddedBroker) -> None:
    described = run_json(broker.bootstrap_servers, "groups", "describe", "--group", "never-seen")
    assert (described["state"], described["members"], described["partitions"]) == ("Dead", [], [])
    out = run_cli(broker.bootstrap_servers, "groups", "describe", "--group", "never-seen").output
    assert "No committed offsets" in out


def test_decode_assignment() -> None:
    data = (
        b"\x00\x01"
        + b"\x00\x00\x00\x02"
        + b"\x00\x01a"
        + b"\x00\x00\x00\x02"
        + b"\x00\x00\x00\x00"
        + b"\x00\x00\x00\x03"
        + b"\x00\x01b"
        + b"\x00\x00\x00\x00"
        + b"\xff\xff\xff\xff"
    )
    assert decode_assignment(data) == [("a", 0), ("a", 3)]
    assert decode_assignment(data[:9]) is None
    assert decode_assignment(b"") is None
