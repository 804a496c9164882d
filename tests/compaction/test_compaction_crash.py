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
# A pass reads about a megabyte and writes far less: at this rate it lasts several seconds
# on any machine, so the kills below land inside it however fast the disk.
CLEANER_BYTES_PER_S = 200_000
BROKER_CONFIG = {
    "log.cleaner.backoff.ms": "50",
    "log.cleaner.io.max.bytes.per.second": str(CLEANER_BYTES_PER_S),
    "transaction.state.log.num.partitions": "2",
    "offsets.topic.num.partitions": "2",
}
IDLE_AFTER_S = 3.0  # at log.cleaner.backoff.ms=50 a pending pass starts well within this
# Where each round's kill lands: a delay after the pass starts (building its key map, which
# writes nothing) or after its copy wrote the first cleaned file.
KILL_POINTS = (("map", 0.0), ("copy", 0.0), ("map", 0.5), ("copy", 0.3), ("copy", 0.8))


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


def wait_for_cleaned_file(partition_dir: Path) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not has_cleaned_files(partition_dir):
        assert time.monotonic() < deadline, "the pass wrote no cleaned file"
        time.sleep(0.005)


def has_cleaned_files(partition_dir: Path) -> bool:
    return any(p.suffix in (".cleaned", ".swap") for p in partition_dir.iterdir())


def pass_running(broker: BrokerProcess, topic: str) -> bool:
    run = broker.read_log(current_run=True)
    started = run.count(f"cleaning {topic}-0: offsets")
    return started > run.count(f"cleaned {topic}-0 in") + run.count(f"cleaning of {topic}-0 ")


def wait_for_cleaner_idle(broker: BrokerProcess, topic: str) -> None:
    """Until every pass this broker run started has ended (a pass interrupted by the last
    kill runs again after the restart), the cleaner having had time to start one."""
    started_at = time.monotonic()
    deadline = started_at + TIMEOUT_S
    while True:
        if not pass_running(broker, topic) and time.monotonic() - started_at > IDLE_AFTER_S:
            return
        assert time.monotonic() < deadline, "the cleaner did not finish its passes"
        time.sleep(0.05)


@pytest.mark.slow
def test_sigkill_during_compaction_recovers_the_same_values(tmp_path: Path) -> None:
    topic = "crash-compacted"
    expected: dict[bytes, bytes] = {}
    partition_dir = tmp_path / "data" / f"{topic}-0"
    killed_in = {"map": 0, "copy": 0}
    with BrokerProcess(tmp_path / "data", BROKER_CONFIG) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic(topic, 1, config=TOPIC_CONFIGS)])[topic].result(TIMEOUT_S)
        for round_no, (phase, delay) in enumerate(KILL_POINTS):
            write_round(broker.bootstrap_servers, topic, round_no, expected)
            time.sleep(0.3)  # the segment ages past segment.ms: the next append rolls it
            write_round(broker.bootstrap_servers, topic, round_no + 100, expected)
            seen = broker.read_log().count(f"cleaning {topic}-0: offsets")
            wait_for_pass_start(broker, topic, seen)
            if phase == "copy":
                wait_for_cleaned_file(partition_dir)
            time.sleep(delay)
            broker.kill()
            if pass_running(broker, topic) and has_cleaned_files(partition_dir) == (
                phase == "copy"
            ):
                killed_in[phase] += 1
            broker.restart()
            view, _ = committed_view(broker.bootstrap_servers, topic)
            assert view == expected, f"round {round_no}: values differ after the crash"
        wait_for_cleaner_idle(broker, topic)  # a last pass, undisturbed
        view, count = committed_view(broker.bootstrap_servers, topic)
        assert view == expected
        assert count < 2 * KEYS, "the history was compacted"
    assert f"cleaned {topic}-0 in" in broker.read_log(), "a pass finished"
    # The cleaner's rate limit makes each phase last seconds: every kill lands where aimed.
    assert killed_in == {"map": 2, "copy": 3}, "the kills must land inside passes"
