"""Producer state survives restarts: clean stop, SIGKILL, lost or corrupt snapshots.

The state is compared through DescribeProducers (every field of every producer of every
partition) and through what matters to a producer: after the restart a retry of any of
its last 5 batches is still answered with the original offsets, an older one is refused,
and the next sequence is accepted. Start-up cost is checked through the loader's log line
"rebuilt producer state from offset N (K batches replayed)".
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oncelog.client.connection import KafkaConnection
from oncelog.producers.snapshot import snapshot_path
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import Record, build_batch, iter_stored_batches
from oncelog.testing import BrokerProcess, EmbeddedBroker

# Recent timestamps: the broker expires producers idle for producer.id.expiration.ms,
# measured from the batches' own timestamps.
BASE_TS = int(time.time() * 1000)
REPLAYED = re.compile(
    r"(\S+)-(\d+): rebuilt producer state from offset (\d+) \((\d+) batches replayed\)"
)
LOADER = "oncelog.producers.loader"
TOPIC = "restart"
LOG_APPEND_TOPIC = "restart-append-time"
SEGMENT_BYTES = "1024"  # about 8 of our batches per segment: every workload rolls a few times


# -- a raw producer that remembers what it was answered -------------------------------


@dataclasses.dataclass
class Sent:
    partition: int
    epoch: int
    first: int
    last: int
    base_offset: int


class RawProducer:
    def __init__(self, conn: KafkaConnection, topic: str) -> None:
        answer = conn.request(
            ApiKey.INIT_PRODUCER_ID,
            {
                "transactional_id": None,
                "transaction_timeout": 60_000,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
        assert answer.error_code == ErrorCode.none
        self.conn = conn
        self.topic = topic
        self.pid = answer.producer_id
        self.epoch = 0
        self.next_seq: dict[int, int] = {}
        self.sent: list[Sent] = []
        self._clock = itertools.count(BASE_TS + 1000 * self.pid, 7)

    def produce(self, partition: int, first: int, last: int, epoch: int) -> Any:
        ts = next(self._clock)  # each record 1 ms later: base and max timestamp differ
        records = [
            Record(b"k", b"%d-%d-%d" % (self.pid, epoch, s), timestamp_ms=ts + s - first)
            for s in range(first, last + 1)
        ]
        batch = build_batch(
            records,
            producer_id=self.pid,
            producer_epoch=epoch,
            base_sequence=first,
            timestamp_ms=ts,
        )
        response = self.conn.request(
            ApiKey.PRODUCE,
            {
                "transactional_id": None,
                "acks": -1,
                "timeout": 10_000,
                "topic_data": [
                    {"name": self.topic, "partition_data": [{"index": partition, "records": batch}]}
                ],
            },
        )
        return response.responses[0].partition_responses[0]

    def send(self, partition: int, count: int, *, start: int | None = None) -> Sent:
        """The next batch of ``count`` records (or one starting at ``start``)."""
        first = self.next_seq.get(partition, 0) if start is None else start
        answer = self.produce(partition, first, first + count - 1, self.epoch)
        assert answer.error_code == ErrorCode.none, answer
        sent = Sent(partition, self.epoch, first, first + count - 1, answer.base_offset)
        self.next_seq[partition] = first + count
        self.sent.append(sent)
        return sent

    def bump_epoch(self) -> None:
        self.epoch += 1
        self.next_seq.clear()

    def last_batches(self, partition: int, n: int = 6) -> list[Sent]:
        return [s for s in self.sent if s.partition == partition][-n:]


def workload(conn: KafkaConnection, topic: str, rounds: int = 3) -> list[RawProducer]:
    """Three producers over two partitions: long runs, an epoch bump, a KIP-360 start at
    114, interleaved so every partition rolls several segments."""
    a, b, c = (RawProducer(conn, topic) for _ in range(3))
    c.next_seq[1] = 114
    for i in range(rounds):
        for _ in range(3):
            a.send(0, 1 + i % 3)
            c.send(1, 2)
        b.send(0, 2)
        b.send(1, 1)
        if i == 1:
            b.bump_epoch()
    return [a, b, c]


def check_retries(conn: KafkaConnection, producer: RawProducer, partition: int) -> None:
    """Each of the producer's last 5 batches is a duplicate answered with its original
    offset; the 6th-last is out of order; the next sequence appends at the log end."""
    producer.conn = conn
    sixth, *last_five = producer.last_batches(partition)
    for sent in last_five:
        answer = producer.produce(partition, sent.first, sent.last, sent.epoch)
        assert (answer.error_code, answer.base_offset) == (ErrorCode.none, sent.base_offset), sent
    answer = producer.produce(partition, sixth.first, sixth.last, sixth.epoch)
    assert answer.error_code == ErrorCode.out_of_order_sequence_number, answer
    log_end = log_end_offset(conn, producer.topic, partition)
    assert producer.send(partition, 1).base_offset == log_end


# -- observing the broker ------------------------------------------------------------------


def create_topic(conn: KafkaConnection, name: str, **configs: str) -> None:
    response = conn.request(
        ApiKey.CREATE_TOPICS,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": 2,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in configs.items()],
                }
            ],
            "timeout": 10_000,
            "validate_only": False,
        },
    )
    assert response.topics[0].error_code == ErrorCode.none


def producer_states(
    conn: KafkaConnection, *topics: str
) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """Every field DescribeProducers reports, per partition."""
    response = conn.request(
        ApiKey.DESCRIBE_PRODUCERS,
        {"topics": [{"name": t, "partition_indexes": [0, 1]} for t in topics]},
    )
    states = {}
    for topic in response.topics:
        for partition in topic.partitions:
            assert partition.error_code == ErrorCode.none
            states[(topic.name, partition.partition_index)] = [
                dataclasses.asdict(p) for p in partition.active_producers
            ]
    return states


def log_end_offset(conn: KafkaConnection, topic: str, partition: int) -> int:
    response = conn.request(
        ApiKey.LIST_OFFSETS,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "timeout": 10_000,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": partition, "current_leader_epoch": -1, "timestamp": -1}
                    ],
                }
            ],
        },
    )
    answer = response.topics[0].partitions[0]
    assert answer.error_code == ErrorCode.none
    return answer.offset


def replays(text: str) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (from offset, batches replayed) from the loader's log lines;
    a partition that replayed nothing logs nothing."""
    return {(m[1], int(m[2])): (int(m[3]), int(m[4])) for m in REPLAYED.finditer(text)}


def snapshots(directory: Path) -> list[int]:
    return sorted(int(p.stem) for p in directory.glob("*.snapshot"))


def active_segment(directory: Path) -> tuple[int, int]:
    """(base offset, batch count) of the partition's newest segment."""
    newest = max(directory.glob("*.log"), key=lambda p: int(p.stem))
    return int(newest.stem), sum(1 for _ in iter_stored_batches(newest.read_bytes()))


def batch_count(directory: Path) -> int:
    return sum(sum(1 for _ in iter_stored_batches(p.read_bytes())) for p in directory.glob("*.log"))


def populated(states: dict[tuple[str, int], list[dict[str, Any]]]) -> None:
    """Guard against comparing two empty answers."""
    assert all(rows for rows in states.values()), states
    assert any(row["producer_epoch"] == 1 for rows in states.values() for row in rows)


# -- fixtures ---------------------------------------------------------------------------


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    broker = EmbeddedBroker(data_dir=tmp_path / "data")
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def process(tmp_path: Path) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path / "data", start_timeout_s=30, stop_timeout_s=30)
    broker.start()
    try:
        yield broker
    finally:
        if broker.running:
            broker.kill()


def connect(bootstrap: str) -> KafkaConnection:
    return KafkaConnection(bootstrap, timeout_s=10)


# -- the three restarts ------------------------------------------------------------------


def test_same_state_after_a_clean_restart(
    embedded: EmbeddedBroker, caplog: pytest.LogCaptureFixture
) -> None:
    with connect(embedded.bootstrap_servers) as conn:
        create_topic(conn, TOPIC, **{"segment.bytes": SEGMENT_BYTES})
        producers = workload(conn, TOPIC)
        before = producer_states(conn, TOPIC)
        ends = [log_end_offset(conn, TOPIC, p) for p in (0, 1)]
    populated(before)

    with caplog.at_level(logging.INFO, logger=LOADER):
        embedded.restart()
    for partition, end in enumerate(ends):
        # The clean stop wrote a snapshot at the log end, so nothing was replayed.
        assert snapshots(embedded.data_dir / f"{TOPIC}-{partition}")[-1] == end
    assert replays(caplog.text) == {}

    with connect(embedded.bootstrap_servers) as conn:
        assert producer_states(conn, TOPIC) == before
        for producer in producers:
            for partition in (0, 1):
                if len(producer.last_batches(partition)) == 6:
                    check_retries(conn, producer, partition)


def test_same_state_after_a_crash(process: BrokerProcess) -> None:
    with connect(process.bootstrap_servers) as conn:
        create_topic(conn, TOPIC, **{"segment.bytes": SEGMENT_BYTES})
        create_topic(
            conn,
            LOG_APPEND_TOPIC,
            **{"segment.bytes": SEGMENT_BYTES, "message.timestamp.type": "LogAppendTime"},
        )
        producers = workload(conn, TOPIC)
        workload(conn, LOG_APPEND_TOPIC)
        before = producer_states(conn, TOPIC, LOG_APPEND_TOPIC)
    populated(before)

    process.kill()
    process.restart()
    replayed = replays(process.read_log(current_run=True))
    for partition in (0, 1):
        # No clean-stop snapshot: the newest roll snapshot plus the active segment.
        base, count = active_segment(process.data_dir / f"{TOPIC}-{partition}")
        assert base > 0, "the workload should have rolled segments"
        assert replayed[(TOPIC, partition)] == (base, count)

    with connect(process.bootstrap_servers) as conn:
        assert producer_states(conn, TOPIC, LOG_APPEND_TOPIC) == before
        check_retries(conn, producers[0], 0)
        check_retries(conn, producers[2], 1)


def test_same_state_rebuilt_from_the_log_without_snapshots(process: BrokerProcess) -> None:
    with connect(process.bootstrap_servers) as conn:
        create_topic(conn, TOPIC, **{"segment.bytes": SEGMENT_BYTES})
        producers = workload(conn, TOPIC)
        before = producer_states(conn, TOPIC)
    populated(before)

    process.stop()
    deleted = list(process.data_dir.glob(f"{TOPIC}-*/*.snapshot"))
    assert len(deleted) >= 4  # roll snapshots and the clean-stop ones, both partitions
    for path in deleted:
        path.unlink()
    process.restart()
    replayed = replays(process.read_log(current_run=True))
    for partition in (0, 1):
        directory = process.data_dir / f"{TOPIC}-{partition}"
        assert replayed[(TOPIC, partition)] == (0, batch_count(directory))

    with connect(process.bootstrap_servers) as conn:
        assert producer_states(conn, TOPIC) == before
        check_retries(conn, producers[0], 0)
        check_retries(conn, producers[2], 1)


def test_corrupt_snapshot_is_ignored_and_state_rebuilt(
    embedded: EmbeddedBroker, caplog: pytest.LogCaptureFixture
) -> None:
    with connect(embedded.bootstrap_servers) as conn:
        create_topic(conn, TOPIC, **{"segment.bytes": SEGMENT_BYTES})
        producers = workload(conn, TOPIC)
        before = producer_states(conn, TOPIC)
        end = log_end_offset(conn, TOPIC, 0)
    populated(before)

    embedded.stop()
    directory = embedded.data_dir / f"{TOPIC}-0"
    newest = snapshot_path(directory, end)
    older = [o for o in snapshots(directory) if o < end]
    assert newest.exists() and older
    data = bytearray(newest.read_bytes())
    data[-1] ^= 0x01  # one bit of the last batch's timestamp: only the CRC can tell
    newest.write_bytes(bytes(data))

    with caplog.at_level(logging.INFO, logger=LOADER):
        embedded.start()
    warnings = [
        r
        for r in caplog.records
        if r.levelno == logging.WARNING and "corrupt producer snapshot" in r.getMessage()
    ]
    assert len(warnings) == 1 and str(newest) in warnings[0].getMessage()
    from_offset, count = replays(caplog.text)[(TOPIC, 0)]
    assert from_offset == older[-1] and count > 0  # the next older snapshot, then the log
    assert (TOPIC, 1) not in replays(caplog.text)  # partition 1's snapshot was intact

    with connect(embedded.bootstrap_servers) as conn:
        assert producer_states(conn, TOPIC) == before
        check_retries(conn, producers[0], 0)


# -- start-up reads only the tail ------------------------------------------------------------


def test_startup_replays_only_the_tail(process: BrokerProcess) -> None:
    directory = process.data_dir / f"{TOPIC}-0"
    with connect(process.bootstrap_servers) as conn:
        create_topic(conn, TOPIC, **{"segment.bytes": "600"})
        producer = RawProducer(conn, TOPIC)
        for _ in range(40):
            producer.send(0, 2)
        end = log_end_offset(conn, TOPIC, 0)
    rolls = snapshots(directory)
    assert len(rolls) >= 4, "several segments should have rolled, each with its snapshot"
    assert rolls == sorted(int(p.stem) for p in directory.glob("*.log"))[1:]

    # Clean stop: a snapshot at the log end, and the next start replays nothing.
    process.restart()
    assert snapshots(directory)[-1] == end
    assert (TOPIC, 0) not in replays(process.read_log(current_run=True))

    # Crash after more segments rolled: only the active segment is replayed.
    with connect(process.bootstrap_servers) as conn:
        producer.conn = conn
        for _ in range(20):
            producer.send(0, 2)
        before = producer_states(conn, TOPIC)
    process.kill()
    base, count = active_segment(directory)
    assert base > end  # rolled since the clean-stop snapshot
    process.restart()
    from_offset, replayed = replays(process.read_log(current_run=True))[(TOPIC, 0)]
    assert (from_offset, replayed) == (base, count)
    assert replayed <= count < 20
    with connect(process.bootstrap_servers) as conn:
        assert producer_states(conn, TOPIC) == before


# -- snapshots loaded lazily, then merged ---------------------------------------------------


def test_lazily_loaded_state_survives_merged_snapshots_and_a_crash(
    process: BrokerProcess,
) -> None:
    """After a clean restart the producers stay in the loaded snapshot, undecoded; the
    next roll snapshots copy them and append the few that wrote since. A crash then
    restarts from such a merged snapshot plus the log tail: every producer, whether it
    wrote since the first restart or not, must be answered as before."""
    directory = process.data_dir / f"{TOPIC}-0"
    with connect(process.bootstrap_servers) as conn:
        create_topic(conn, TOPIC, **{"segment.bytes": "2048"})
        idle = [RawProducer(conn, TOPIC) for _ in range(30)]
        for producer in idle:
            for _ in range(6):
                producer.send(0, 1)
    process.restart()  # a clean stop: one snapshot at the log end, loaded lazily

    with connect(process.bootstrap_servers) as conn:
        busy = idle[:3]
        newcomers = [RawProducer(conn, TOPIC) for _ in range(3)]
        before_rolls = snapshots(directory)
        for _ in range(8):
            for producer in (*busy, *newcomers):
                producer.conn = conn
                producer.send(0, 2)
        merged = [o for o in snapshots(directory) if o not in before_rolls]
        assert merged, "the writes should have rolled a segment (a merged snapshot)"
        before = producer_states(conn, TOPIC)
    assert len(before[(TOPIC, 0)]) == 33

    process.kill()
    process.restart()
    from_offset, _ = replays(process.read_log(current_run=True))[(TOPIC, 0)]
    assert from_offset == merged[-1], "restarted from the newest merged snapshot"
    with connect(process.bootstrap_servers) as conn:
        assert producer_states(conn, TOPIC) == before
        for producer in (idle[-1], busy[0], newcomers[0]):  # held, taken over, new
            check_retries(conn, producer, 0)
