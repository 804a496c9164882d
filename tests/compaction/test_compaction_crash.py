"""SIGKILL during compaction, at many points of the pass: every restart recovers a log
that reads the same latest committed values, with no aborted record and no file of an
unfinished pass left behind."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.testing import BrokerProcess

TIMEOUT_S = 60.0
KEYS = 300
REWRITES = 8  # each key written this many times a round: passes long enough to land in
TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": "65536",
    "segment.ms": "200",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "600000",
    # A round's writes become cleanable together, after they are all in: one long pass.
    "min.compaction.lag.ms": "1500",
}
BROKER_CONFIG = {
    "log.cleaner.backoff.ms": "50",
    "transaction.state.log.num.partitions": "2",
    "offsets.topic.num.partitions": "2",
}
# Delays after the pass starts; the last ones land after the swap.
KILL_DELAYS_S = (0.0, 0.03, 0.07, 0.15, 0.4)


def write_round(bootstrap: str, topic: str, round_no: int, expected: dict[bytes, bytes]) -> None:
    """Every key several times more, some deleted at the end, and an aborted transaction
    over a third of them."""
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for rewrite in range(REWRITES):
        for i in range(KEYS):
            key = b"key-%d" % i
            value: bytes | None = b"r%d-%d-%d-" % (round_no, rewrite, i) + b"x" * 100
            if rewrite == REWRITES - 1 and (i + round_no) % 13 == 0:
                value = None
            plain.produce(topic, key=key, value=value, partition=0)
            if value is None:
                expected.pop(key, None)
            else:
                expected[key] = value
    assert plain.flush(TIMEOUT_S) == 0
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"crash-{round_no}"})
    txn.init_transactions(TIMEOUT_S)
    txn.begin_transaction()
    for i in range(0, KEYS, 3):
        txn.produce(topic, key=b"key-%d" % i, value=b"aborted", partition=0)
    txn.abort_transaction(TIMEOUT_S)


def committed_view(bootstrap: str, topic: str) -> tuple[dict[bytes, bytes], int]:
    """Latest value per key under read_committed, and how many records were read."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    tp = TopicPartition(topic, 0, OFFSET_BEGINNING)
    consumer.assign([tp])
    _, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), TIMEOUT_S)
    view: dict[bytes, bytes] = {}
    count = 0
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while consumer.position([TopicPartition(topic, 0)])[0].offset < end:
            assert time.monotonic() < deadline, "read did not reach the high watermark"
            for message in consumer.consume(500, 0.5):
                if message.error() is not None:
                    continue
                count += 1
                assert message.value() != b"aborted", f"aborted record at {message.offset()}"
                if message.value() is None:
                    view.pop(message.key(), None)
                else:
                    view[message.key()] = message.value()
    finally:
        consumer.close()
    return view, count


def wait_for_pass_start(broker: BrokerProcess, topic: str, seen: int) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while broker.read_log().count(f"cleaning {topic}-0: offsets") <= seen:
        assert time.monotonic() < deadline, "no cleaning pass started"
        time.sleep(0.005)


@pytest.mark.slow
def test_sigkill_during_compaction_recovers_the_same_values(tmp_path: Path) -> None:
    topic = "crash-compacted"
    expected: dict[bytes, bytes] = {}
    partition_dir = tmp_path / "data" / f"{topic}-0"
    killed_mid_pass = 0
    with BrokerProcess(tmp_path / "data", BROKER_CONFIG) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic(topic, 1, config=TOPIC_CONFIGS)])[topic].result(TIMEOUT_S)
        for round_no, delay in enumerate(KILL_DELAYS_S):
            write_round(broker.bootstrap_servers, topic, round_no, expected)
            time.sleep(0.3)  # the segment ages past segment.ms: the next append rolls it
            write_round(broker.bootstrap_servers, topic, round_no + 100, expected)
            seen = broker.read_log().count(f"cleaning {topic}-0: offsets")
            wait_for_pass_start(broker, topic, seen)
            time.sleep(delay)
            broker.kill()
            if any(p.suffix in (".cleaned", ".swap") for p in partition_dir.iterdir()):
                killed_mid_pass += 1
            broker.restart()
            view, _ = committed_view(broker.bootstrap_servers, topic)
            assert view == expected, f"round {round_no}: values differ after the crash"
        time.sleep(1.0)  # let a last pass finish undisturbed
        view, count = committed_view(broker.bootstrap_servers, topic)
        assert view == expected
        assert count < 2 * KEYS, "the history was compacted"
        assert broker.read_log().count(f"cleaned {topic}-0 in") >= 1
    assert killed_mid_pass >= 2, "the kills must land inside passes, not only between them"
