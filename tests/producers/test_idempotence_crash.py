"""Crash test of the idempotent producer (issue 3, "What it must show").

A broker subprocess is killed with SIGKILL three times while confluent-kafka produces
numbered records with enable.idempotence=true, and restarted each time on the same data
directory and port. The producer keeps running (message.timeout.ms 60 s), reconnects,
retries what was in flight (librdkafka marks it "possibly persisted" and resends it with
the same producer id, epoch and sequences) and finishes with every delivery report
successful. The broker must then hold every record exactly once, with no gap, in send
order per partition, at the offsets the delivery reports named.
"""

from __future__ import annotations

import collections
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.testing import BrokerProcess

from .numbered_readback import read_numbered

PARTITIONS = 3
RECORDS = 60_000
KEYS = 101
KILLS = 3
TIMEOUT_S = 20.0
RUN_BUDGET_S = 75.0

PRODUCER_SETTINGS: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "max.in.flight.requests.per.connection": 5,
    "request.timeout.ms": 5000,
    "message.timeout.ms": 60_000,  # longer than any outage here: nothing may time out
    "linger.ms": 5,
    "batch.num.messages": 200,
    # Reconnect fast to the restarted broker (see tests/testing/test_proxy.py).
    "metadata.recovery.strategy": "none",
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 100,
    "retry.backoff.ms": 10,
    "retry.backoff.max.ms": 100,
}


def _create_topic(bootstrap: str) -> str:
    name = f"crash-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(TIMEOUT_S)
    return name


def _read_all(bootstrap: str, topic: str) -> dict[int, list[tuple[int, int]]]:
    """(offset, sequence number) of every record per partition, up to the high watermarks."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "crash-check", "enable.auto.commit": False}
    )
    try:
        return read_numbered(consumer, topic, PARTITIONS, TIMEOUT_S)
    finally:
        consumer.close()


@pytest.mark.slow
def test_sigkilled_broker_restarts_and_the_idempotent_producer_finishes_exactly_once(
    tmp_path: Path,
) -> None:
    sent_to: dict[int, list[int]] = collections.defaultdict(list)
    reported: dict[int, tuple[int, int]] = {}
    errors: list[str] = []
    delivered = 0
    lock = threading.Lock()
    outcome: dict[str, Any] = {}

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        nonlocal delivered
        if err is not None:
            if len(errors) < 10:
                errors.append(str(err))
            return
        seq = int(msg.value())
        with lock:
            sent_to[msg.partition()].append(seq)
            reported[seq] = (msg.partition(), msg.offset())
            delivered += 1

    def produce_all(producer: Producer, topic: str, deadline: float) -> None:
        try:
            for i in range(RECORDS):
                while True:
                    try:
                        producer.produce(
                            topic,
                            key=b"key-%d" % (i % KEYS),
                            value=b"%d" % i,
                            on_delivery=on_delivery,
                        )
                        break
                    except BufferError:
                        producer.poll(0.05)
                        if time.monotonic() > deadline:
                            raise TimeoutError(f"only {i} records queued in time") from None
                # Pace the producer a little so the kills land in the middle of the run.
                if i % 500 == 0:
                    producer.poll(0.02)
            while (left := producer.flush(0.5)) and time.monotonic() < deadline:
                pass
            outcome["undelivered"] = left
        except BaseException as exc:  # reported by the main thread
            outcome["exception"] = exc

    broker = BrokerProcess(tmp_path / "data")
    with broker:
        port = broker.port
        topic = _create_topic(broker.bootstrap_servers)
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, **PRODUCER_SETTINGS})
        producer.list_topics(topic, timeout=TIMEOUT_S)
        started = time.monotonic()
        deadline = started + RUN_BUDGET_S
        thread = threading.Thread(target=produce_all, args=(producer, topic, deadline), daemon=True)
        thread.start()
        kills: list[tuple[int, float]] = []  # (records delivered at the kill, seconds down)
        for k in range(1, KILLS + 1):
            # Kill at about k/(KILLS+1) of the run, with records certainly in flight.
            while delivered < RECORDS * k // (KILLS + 1) and thread.is_alive():
                assert time.monotonic() < deadline, f"stuck at {delivered} delivered"
                time.sleep(0.005)
            assert thread.is_alive(), "the producer finished before the kill"
            at = delivered
            killed = time.monotonic()
            broker.kill()
            time.sleep(0.3)  # the client sees refused connections and keeps retrying
            broker.restart()
            assert broker.port == port, "restart must reuse the port, or the client is lost"
            kills.append((at, time.monotonic() - killed))
        thread.join(max(0.0, deadline - time.monotonic()) + 5)
        assert not thread.is_alive(), f"producer still running after {RUN_BUDGET_S} s"
        seconds = time.monotonic() - started
        if "exception" in outcome:
            raise outcome["exception"]
        producer.purge()
        producer.flush(TIMEOUT_S)
        stored = _read_all(broker.bootstrap_servers, topic)
        log = broker.read_log()

    summary = (
        f"{RECORDS} records, {seconds:.1f} s, kills at {kills}, per partition "
        f"{[len(stored[p]) for p in range(PARTITIONS)]}"
    )
    print(summary)
    assert log.count("=== BrokerProcess start") == KILLS + 1
    assert errors == [] and outcome.get("undelivered") == 0, (errors, outcome, summary)
    assert delivered == RECORDS
    for p in range(PARTITIONS):
        values = [seq for _, seq in stored[p]]
        duplicates = len(values) - len(set(values))
        assert duplicates == 0, f"partition {p}: {duplicates} duplicates; {summary}"
        assert sent_to[p] == sorted(sent_to[p]), f"partition {p}: reports out of send order"
        assert values == sorted(sent_to[p]), f"partition {p}: stored differs from sent; {summary}"
        wrong = [
            (seq, reported[seq], offset)
            for offset, seq in stored[p]
            if reported[seq] != (p, offset)
        ]
        assert wrong == [], f"partition {p}: reported (partition, offset) != stored: {wrong[:5]}"
    all_values = sorted(seq for rows in stored.values() for _, seq in rows)
    assert all_values == list(range(RECORDS)), "a gap or a duplicate across partitions"
