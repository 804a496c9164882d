"""Chaos test of the idempotent producer with a real client (issue 3, "What it must show").

confluent-kafka (librdkafka) sends numbered records (value = sequence number, keys spread
over 3 partitions) through the FaultInjectionProxy while it drops about 5 % of the produce
responses (the "lost acknowledgement": the broker stored the batch, the client retries it)
and cuts connections, both at random and all at once from a thread. Afterwards the proxy
is stopped, the broker advertises itself again and the topic is read back directly:

* idempotence on: every record exactly once, in send order per partition, every delivery
  report successful and naming the offset where the record really is (a retry answered as
  a duplicate must get the original offsets back);
* idempotence off, retries on: the same faults leave duplicates in the log. This proves
  the faults reach the broker and that the checks above can fail.
"""

from __future__ import annotations

import collections
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.protocol.api_versions import ApiKey
from oncelog.testing import EmbeddedBroker, FaultInjectionProxy
from oncelog.testing.proxy import ProxyStats

from .numbered_readback import read_numbered

PARTITIONS = 3
RECORDS = 50_000
KEYS = 101  # key = i % KEYS; librdkafka's partitioner spreads them over the 3 partitions
DROP_RESPONSE_RATE = 0.05
CUT_CONNECTION_RATE = 0.005
CUT_ALL_EVERY_S = 0.5
PRODUCE_BUDGET_S = 75.0  # each run stays well under 90 s
TIMEOUT_S = 20.0

# See tests/testing/test_proxy.py: without these, every disconnect costs librdkafka 2.16 a
# re-bootstrap and a reconnect backoff growing to 10 s.
FAST_RECONNECT = {
    "metadata.recovery.strategy": "none",
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 100,
    "retry.backoff.ms": 10,
    "retry.backoff.max.ms": 100,
}
PRODUCER_SETTINGS: dict[str, Any] = {
    "acks": "all",
    "max.in.flight.requests.per.connection": 5,
    "request.timeout.ms": 1000,
    "message.timeout.ms": 60_000,
    "retries": 1_000_000,
    "linger.ms": 2,
    # Small batches: many produce requests (about 1,000 of 50 records), so 5 % of their
    # responses is about 50 lost acknowledgements, not one or two.
    "batch.num.messages": 50,
    **FAST_RECONNECT,
}


@dataclass
class Run:
    """What the producer side saw."""

    sent_to: dict[int, list[int]] = field(default_factory=lambda: collections.defaultdict(list))
    reported_offset: dict[int, tuple[int, int]] = field(default_factory=dict)  # seq -> (p, offset)
    errors: list[str] = field(default_factory=list)
    undelivered: int = 0
    seconds: float = 0.0
    stats: ProxyStats | None = None


@pytest.fixture
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as embedded:
        yield embedded


def _create_topic(bootstrap: str) -> str:
    name = f"chaos-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(TIMEOUT_S)
    return name


def _cut_periodically(proxy: FaultInjectionProxy, stop: threading.Event) -> None:
    while not stop.wait(CUT_ALL_EVERY_S):
        try:
            proxy.cut_all_connections()
        except Exception:  # the proxy stopping under us: nothing left to cut
            return


def _produce_through_chaos(
    broker: EmbeddedBroker,
    idempotence: bool,
    records: int,
    close_after_drop_ms: float | None = 50.0,
) -> tuple[str, Run]:
    """Produce `records` numbered records through a faulty proxy; the broker then
    advertises itself again, so the caller reads without the proxy."""
    run = Run()
    with FaultInjectionProxy(
        drop_response_rate=DROP_RESPONSE_RATE,
        cut_connection_rate=CUT_CONNECTION_RATE,
        api_keys={ApiKey.PRODUCE},
        close_after_drop_ms=close_after_drop_ms,
        seed=3,
    ) as proxy:
        proxy.attach(broker)
        proxy.pause()  # no faults while the topic is created and the client connects
        topic = _create_topic(proxy.bootstrap_servers)
        producer = Producer(
            {
                "bootstrap.servers": proxy.bootstrap_servers,
                "enable.idempotence": idempotence,
                **PRODUCER_SETTINGS,
            }
        )
        producer.list_topics(topic, timeout=TIMEOUT_S)

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                if len(run.errors) < 10:
                    run.errors.append(str(err))
                return
            seq = int(msg.value())
            run.sent_to[msg.partition()].append(seq)
            run.reported_offset[seq] = (msg.partition(), msg.offset())

        stop = threading.Event()
        cutter = threading.Thread(target=_cut_periodically, args=(proxy, stop), daemon=True)
        proxy.resume()
        started = time.monotonic()
        deadline = started + PRODUCE_BUDGET_S
        cutter.start()
        try:
            for i in range(records):
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
                        assert time.monotonic() < deadline, f"only {i} records queued in time"
                if i % 1000 == 0:
                    producer.poll(0)
            while (left := producer.flush(0.5)) and time.monotonic() < deadline:
                pass
            run.undelivered = left
        finally:
            stop.set()
            cutter.join(TIMEOUT_S)
            run.seconds = time.monotonic() - started
            proxy.pause()
            run.stats = proxy.stats
            # Whatever is left is reported (as errors) before the proxy goes away.
            producer.purge()
            producer.flush(TIMEOUT_S)
    assert broker.broker is not None
    broker.broker.advertise("127.0.0.1", broker.port)  # from now on, no proxy in the way
    return topic, run


def _read_directly(broker: EmbeddedBroker, topic: str) -> dict[int, list[tuple[int, int]]]:
    """(offset, sequence number) of every record of every partition, read from the broker
    itself up to the high watermarks taken first."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": "chaos-check",
            "enable.auto.commit": False,
        }
    )
    try:
        brokers = consumer.list_topics(topic, timeout=TIMEOUT_S).brokers
        assert [(b.host, b.port) for b in brokers.values()] == [("127.0.0.1", broker.port)]
        return read_numbered(consumer, topic, PARTITIONS, TIMEOUT_S)
    finally:
        consumer.close()


def _summary(run: Run, stored: dict[int, list[tuple[int, int]]]) -> str:
    values = [seq for rows in stored.values() for _, seq in rows]
    return (
        f"{len(values)} stored, {len(set(values))} distinct, {run.seconds:.1f} s, "
        f"per partition {[len(stored[p]) for p in range(PARTITIONS)]}, {run.stats}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("close_after_drop_ms", [50.0, None], ids=["disconnect", "silent"])
def test_idempotent_producer_through_chaos_stores_every_record_once_in_order(
    broker: EmbeddedBroker, close_after_drop_ms: float | None
) -> None:
    """`disconnect`: a lost response is followed by a disconnect 50 ms later. `silent`: the
    connection just goes quiet until request.timeout.ms (1 s) makes librdkafka give up on
    it: the in-flight requests time out, their outcome unknown to the client."""
    topic, run = _produce_through_chaos(
        broker, idempotence=True, records=RECORDS, close_after_drop_ms=close_after_drop_ms
    )
    stored = _read_directly(broker, topic)
    summary = _summary(run, stored)
    print(summary)
    stats = run.stats
    assert stats is not None
    # The faults happened, at about the rates asked for.
    assert stats.responses_dropped >= 20, summary
    assert stats.connections_cut + stats.connections_cut_by_call >= 5, summary
    # Every delivery report succeeded, in time.
    assert run.errors == [] and run.undelivered == 0, (run.errors, run.undelivered, summary)
    assert sum(len(s) for s in run.sent_to.values()) == RECORDS
    assert all(len(run.sent_to[p]) > RECORDS // 10 for p in range(PARTITIONS)), "keys not spread"
    for p in range(PARTITIONS):
        values = [seq for _, seq in stored[p]]
        # Exactly once and in send order: a partition holds exactly the records sent to it,
        # in the order produce() was called (sequence numbers grow with it).
        duplicates = len(values) - len(set(values))
        assert duplicates == 0, f"partition {p}: {duplicates} duplicates; {summary}"
        expected = sorted(run.sent_to[p])
        assert run.sent_to[p] == expected, f"partition {p}: delivery reports out of send order"
        assert values == expected, (
            f"partition {p}: stored records differ from those sent; {summary}"
        )
        # The delivery reports name the real offsets, also for batches a retry got back as
        # duplicates (the broker must answer those with the original offsets).
        wrong = [
            (seq, run.reported_offset[seq], offset)
            for offset, seq in stored[p]
            if run.reported_offset[seq] != (p, offset)
        ]
        assert wrong == [], f"partition {p}: reported (partition, offset) != stored: {wrong[:5]}"


@pytest.mark.slow
def test_without_idempotence_the_same_chaos_leaves_duplicates(broker: EmbeddedBroker) -> None:
    """The control run: if this found no duplicates, the test above would prove nothing."""
    topic, run = _produce_through_chaos(broker, idempotence=False, records=RECORDS)
    stored = _read_directly(broker, topic)
    summary = _summary(run, stored)
    print(summary)
    assert run.errors == [] and run.undelivered == 0, (run.errors, run.undelivered, summary)
    values = [seq for rows in stored.values() for _, seq in rows]
    counts = collections.Counter(values)
    assert set(counts) == set(range(RECORDS)), "acks=all with retries: nothing may be lost"
    duplicates = len(values) - len(counts)
    assert duplicates > 0, summary
