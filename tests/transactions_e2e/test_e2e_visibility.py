"""Aborted records never reach read_committed consumers (issue 4, "What it must show").

Several transactional producers interleave committed and aborted transactions over
several partitions, with non-transactional records in between. Every aborted batch is
flushed before abort_transaction, so it really is in the log (checked through the high
watermarks: every record and every marker takes one offset). The read_committed view is
checked exactly, with both clients' consumers; read_uncommitted sees everything; control
records never come out as messages.
"""

from __future__ import annotations

from collections import Counter

from oncelog.testing import EmbeddedBroker

from .e2e_helpers import (
    TIMEOUT_S,
    create_topic,
    plain_produce,
    produce_flushed,
    read_confluent,
    read_kafka_python,
    transactions_ended,
    txn_producer,
)

PARTITIONS = 4
PRODUCERS = 3
ROUNDS = 6
PER_TXN = 8  # two records per partition


def _check_views(
    broker: EmbeddedBroker, topic: str, committed: list[bytes], aborted: list[bytes]
) -> None:
    bootstrap = broker.bootstrap_servers
    assert broker.broker is not None
    transactions_ended(broker, topic, PARTITIONS)
    partitions = [broker.broker.topics.partition(topic, p) for p in range(PARTITIONS)]
    ends = {p.index: p.high_watermark for p in partitions}
    for read in (read_confluent, read_kafka_python):
        got, positions = read(bootstrap, topic, ends, "read_committed")
        values = Counter(v for _, _, v in got)
        assert values == Counter(committed), (
            f"{read.__name__}: missing {sorted((Counter(committed) - values).elements())[:10]}, "
            f"unexpected {sorted((values - Counter(committed)).elements())[:10]}"
        )
        assert positions == ends, (
            f"{read.__name__}: read_committed did not get past the last markers"
        )
        got, positions = read(bootstrap, topic, ends, "read_uncommitted")
        values = Counter(v for _, _, v in got)
        assert values == Counter(committed + aborted), f"{read.__name__} read_uncommitted"
        assert positions == ends
        # Control records take offsets but never come out as messages: the offsets
        # returned are exactly the data offsets (no gaps filled, no marker offsets).
        assert len({(p, o) for p, o, _ in got}) == len(committed) + len(aborted)


def test_interleaved_confluent_producers(broker: EmbeddedBroker, topic: str) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic, PARTITIONS)
    producers = [txn_producer(bootstrap, f"{topic}-txn-{i}") for i in range(PRODUCERS)]
    committed: list[bytes] = []
    aborted: list[bytes] = []
    transactions = 0
    try:
        for r in range(ROUNDS):
            for p in producers:
                p.begin_transaction()
            # Interleave: every producer writes half its records, then the other half,
            # so the transactions overlap on every partition.
            batches: dict[int, list[bytes]] = {}
            for half in range(2):
                for i, p in enumerate(producers):
                    values = [
                        (k % PARTITIONS, b"txn%d-r%d-k%d" % (i, r, k))
                        for k in range(half * PER_TXN // 2, (half + 1) * PER_TXN // 2)
                    ]
                    errors = produce_flushed(p, topic, values)
                    assert errors == [None] * len(values)
                    batches.setdefault(i, []).extend(v for _, v in values)
                plain = [(k, b"plain-r%d-h%d-p%d" % (r, half, k)) for k in range(PARTITIONS)]
                plain_produce(bootstrap, topic, plain)
                committed.extend(v for _, v in plain)
            # End them in a rotating order; which ones commit changes every round.
            for j in range(PRODUCERS):
                i = (r + j) % PRODUCERS
                if (i + r) % 2 == 0:
                    producers[i].commit_transaction(TIMEOUT_S)
                    committed.extend(batches[i])
                else:
                    producers[i].abort_transaction(TIMEOUT_S)
                    aborted.extend(batches[i])
                transactions += 1
    finally:
        for p in producers:
            p.flush(1)

    assert broker.broker is not None
    transactions_ended(broker, topic, PARTITIONS)
    total = sum(broker.broker.topics.partition(topic, p).high_watermark for p in range(PARTITIONS))
    # every record, plus one marker per transaction and partition: the aborted batches
    # really are in the log
    assert total == len(committed) + len(aborted) + transactions * PARTITIONS
    assert len(aborted) == 9 * PER_TXN and len(committed) == 9 * PER_TXN + ROUNDS * 2 * PARTITIONS
    _check_views(broker, topic, committed, aborted)


def test_interleaved_kafka_python_producers(broker: EmbeddedBroker, topic: str) -> None:
    from kafka import KafkaProducer

    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic, PARTITIONS)
    producers = [
        KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}-kp-{i}", linger_ms=2)
        for i in range(2)
    ]
    committed: list[bytes] = []
    aborted: list[bytes] = []
    transactions = 0
    try:
        for p in producers:
            p.init_transactions()
        for r in range(4):
            for p in producers:
                p.begin_transaction()
            written: dict[int, list[bytes]] = {0: [], 1: []}
            for k in range(PER_TXN):
                for i, p in enumerate(producers):
                    value = b"kp%d-r%d-k%d" % (i, r, k)
                    p.send(topic, value=value, partition=k % PARTITIONS).get(TIMEOUT_S)
                    written[i].append(value)
            for i, p in enumerate(producers):
                p.flush(TIMEOUT_S)
                if (i + r) % 2 == 0:
                    p.commit_transaction()
                    committed.extend(written[i])
                else:
                    p.abort_transaction()
                    aborted.extend(written[i])
                transactions += 1
    finally:
        for p in producers:
            p.close(timeout=5)
    assert broker.broker is not None
    transactions_ended(broker, topic, PARTITIONS)
    total = sum(broker.broker.topics.partition(topic, p).high_watermark for p in range(PARTITIONS))
    assert total == len(committed) + len(aborted) + transactions * PARTITIONS
    _check_views(broker, topic, committed, aborted)
