"""The last stable offset (issue 4): while a transaction is open, read_committed
consumers and ListOffsets stop at its first offset, even with later non-transactional
records after it (a lookup by timestamp too); after the end they move on.
DescribeProducers shows the open (hanging) transaction while it lasts."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import IsolationLevel, Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, OffsetSpec

from oncelog.broker.handlers.list_offsets import LATEST, MAX_TIMESTAMP, resolve
from oncelog.client.connection import KafkaConnection
from oncelog.protocol.api_versions import ApiKey
from oncelog.testing import EmbeddedBroker

from .e2e_helpers import (
    TIMEOUT_S,
    create_topic,
    plain_produce,
    produce_flushed,
    read_confluent,
    read_kafka_python,
    txn_producer,
)

READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def _raw_latest(bootstrap: str, topic: str, isolation: int) -> int:
    return _raw_offset(bootstrap, topic, isolation, -1)


def _raw_offset(bootstrap: str, topic: str, isolation: int, timestamp: int) -> int:
    """ListOffsets of partition 0 at `timestamp` (-1 latest, -3 max timestamp)."""
    with KafkaConnection(bootstrap) as conn:
        response = conn.request(
            ApiKey.LIST_OFFSETS,
            {
                "replica_id": -1,
                "isolation_level": isolation,
                "timeout": timedelta(seconds=10),
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {
                                "partition_index": 0,
                                "current_leader_epoch": -1,
                                "timestamp": timestamp,
                            }
                        ],
                    }
                ],
            },
        )
    (answer,) = response.topics[0].partitions
    assert answer.error_code == 0, answer
    return answer.offset


def _admin_latest(bootstrap: str, topic: str, isolation: Any) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.list_offsets(
        {CTP(topic, 0): OffsetSpec.latest()}, isolation_level=isolation, request_timeout=TIMEOUT_S
    )
    (future,) = futures.values()
    return future.result(TIMEOUT_S).offset


def _kafka_python_latest(bootstrap: str, topic: str, isolation: str) -> int:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, isolation_level=isolation)
    try:
        return consumer.end_offsets([KTP(topic, 0)])[KTP(topic, 0)]
    finally:
        consumer.close()


def _latest_everywhere(bootstrap: str, topic: str) -> dict[str, int]:
    return {
        "raw read_committed": _raw_latest(bootstrap, topic, READ_COMMITTED),
        "raw read_uncommitted": _raw_latest(bootstrap, topic, READ_UNCOMMITTED),
        "admin read_committed": _admin_latest(bootstrap, topic, IsolationLevel.READ_COMMITTED),
        "admin read_uncommitted": _admin_latest(bootstrap, topic, IsolationLevel.READ_UNCOMMITTED),
        "kafka-python read_committed": _kafka_python_latest(bootstrap, topic, "read_committed"),
        "kafka-python read_uncommitted": _kafka_python_latest(bootstrap, topic, "read_uncommitted"),
    }


def _fetch_lso(bootstrap: str, topic: str) -> tuple[int, int]:
    """(high_watermark, last_stable_offset) as a read_committed Fetch response gives them."""
    with KafkaConnection(bootstrap) as conn:
        version = min(conn.version_for(ApiKey.FETCH), 12)  # by name, not topic id
        response = conn.request(
            ApiKey.FETCH,
            {
                "replica_id": -1,
                "max_wait": timedelta(0),
                "min_bytes": 0,
                "max_bytes": 1 << 20,
                "isolation_level": READ_COMMITTED,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {
                                "partition": 0,
                                "current_leader_epoch": -1,
                                "fetch_offset": 0,
                                "last_fetched_epoch": -1,
                                "log_start_offset": -1,
                                "partition_max_bytes": 1 << 20,
                            }
                        ],
                    }
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            },
            version=version,
        )
    (answer,) = response.responses[0].partitions
    assert answer.error_code == 0, answer
    return answer.high_watermark, answer.last_stable_offset


def _describe_producers(bootstrap: str, topic: str) -> list[Any]:
    with KafkaConnection(bootstrap) as conn:
        response = conn.request(
            ApiKey.DESCRIBE_PRODUCERS, {"topics": [{"name": topic, "partition_indexes": [0]}]}
        )
    (answer,) = response.topics[0].partitions
    assert answer.error_code == 0, answer
    return list(answer.active_producers)


@pytest.mark.parametrize("end", ["commit", "abort"])
def test_lso_holds_read_committed_until_the_transaction_ends(
    broker: EmbeddedBroker, topic: str, end: str
) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic, 1)
    assert broker.broker is not None
    partition = broker.broker.topics.partition(topic, 0)

    plain_produce(bootstrap, topic, [(0, b"before-%d" % i) for i in range(3)])  # offsets 0..2
    producer = txn_producer(bootstrap, f"{topic}-txn")
    producer.begin_transaction()
    assert produce_flushed(producer, topic, [(0, b"txn-0"), (0, b"txn-1")]) == [None] * 2  # 3..4
    plain_produce(bootstrap, topic, [(0, b"after-%d" % i) for i in range(3)])  # 5..7

    # -- while the transaction is open -----------------------------------------------------
    assert (partition.high_watermark, partition.last_stable_offset) == (8, 3)
    assert _fetch_lso(bootstrap, topic) == (8, 3)
    assert _latest_everywhere(bootstrap, topic) == {
        "raw read_committed": 3,
        "raw read_uncommitted": 8,
        "admin read_committed": 3,
        "admin read_uncommitted": 8,
        "kafka-python read_committed": 3,
        "kafka-python read_uncommitted": 8,
    }
    for read in (read_confluent, read_kafka_python):
        # Wait for position 8 (never reached): the read stops at the LSO after the timeout.
        got, positions = read(bootstrap, topic, {0: 3}, "read_committed", settle_s=1.5)
        assert [v for _, _, v in got] == [b"before-0", b"before-1", b"before-2"], read.__name__
        assert positions == {0: 3}, read.__name__
        got, _ = read(bootstrap, topic, {0: 8}, "read_uncommitted")
        assert len(got) == 8, read.__name__

    # A hanging transaction is visible through DescribeProducers (KIP-664).
    rows = [r for r in _describe_producers(bootstrap, topic) if r.current_txn_start_offset >= 0]
    assert [r.current_txn_start_offset for r in rows] == [3], rows
    txn_pid = rows[0].producer_id

    # -- after the end ---------------------------------------------------------------------
    if end == "commit":
        producer.commit_transaction(TIMEOUT_S)
    else:
        producer.abort_transaction(TIMEOUT_S)
    # EndTxn is answered once PREPARE_* is durable; the marker follows right after.
    deadline = time.monotonic() + TIMEOUT_S
    while partition.last_stable_offset != partition.high_watermark and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (partition.high_watermark, partition.last_stable_offset) == (9, 9)  # marker at 8
    assert _fetch_lso(bootstrap, topic) == (9, 9)
    assert set(_latest_everywhere(bootstrap, topic).values()) == {9}
    expected = [b"before-0", b"before-1", b"before-2"]
    expected += [b"txn-0", b"txn-1"] if end == "commit" else []
    expected += [b"after-0", b"after-1", b"after-2"]
    for read in (read_confluent, read_kafka_python):
        got, positions = read(bootstrap, topic, {0: 9}, "read_committed")
        assert [v for _, _, v in got] == expected, read.__name__
        assert positions == {0: 9}, read.__name__
    rows = [r for r in _describe_producers(bootstrap, topic) if r.producer_id == txn_pid]
    assert [r.current_txn_start_offset for r in rows] == [-1], rows


def test_a_timestamp_lookup_answers_only_offsets_the_isolation_level_can_fetch(
    broker: EmbeddedBroker, topic: str
) -> None:
    """Kafka's ListOffsets by timestamp (and max timestamp) answers no match for an offset
    at or past the LSO under read_committed (the high watermark otherwise): Spark's
    endingOffsetsByTimestamp then ends at the latest offset, which it can read."""
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic, 1)

    def now_ms() -> int:
        time.sleep(0.005)  # CreateTime is in ms: the records before and after differ
        return int(time.time() * 1000)

    plain_produce(bootstrap, topic, [(0, b"before-%d" % i) for i in range(3)])  # offsets 0..2
    in_transaction = now_ms()
    producer = txn_producer(bootstrap, f"{topic}-txn")
    producer.begin_transaction()
    assert produce_flushed(producer, topic, [(0, b"txn-0"), (0, b"txn-1")]) == [None] * 2  # 3..4
    after = now_ms()
    plain_produce(bootstrap, topic, [(0, b"after-%d" % i) for i in range(3)])  # 5..7

    def lookups(isolation: int) -> list[int]:
        return [_raw_offset(bootstrap, topic, isolation, ts) for ts in (0, in_transaction, after)]

    assert lookups(READ_UNCOMMITTED) == [0, 3, 5]
    assert lookups(READ_COMMITTED) == [0, -1, -1]  # 3 and 5 are at or past the LSO (3)
    assert _raw_offset(bootstrap, topic, READ_UNCOMMITTED, -3) in (5, 6, 7)  # max timestamp
    assert _raw_offset(bootstrap, topic, READ_COMMITTED, -3) == -1
    producer.commit_transaction(TIMEOUT_S)
    assert broker.broker is not None
    partition = broker.broker.topics.partition(topic, 0)
    deadline = time.monotonic() + TIMEOUT_S
    while partition.last_stable_offset != 9 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lookups(READ_COMMITTED) == [0, 3, 5]


def test_under_read_uncommitted_a_timestamp_lookup_stops_at_the_high_watermark(
    broker: EmbeddedBroker, topic: str
) -> None:
    """The read_uncommitted half: in a cluster the high watermark can lag the log end (not
    every in-sync replica has the records yet). One node's is the log end, so the test sets
    the replicated high watermark the replica manager would set: a record found at or past
    it is no match, below it is answered, as Kafka answers."""
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic, 1)
    base = int(time.time() * 1000) - 60_000
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(6):  # offsets 0..5, CreateTime base + i
        producer.produce(topic, value=b"r-%d" % i, partition=0, timestamp=base + i)
    assert producer.flush(TIMEOUT_S) == 0
    assert broker.broker is not None
    partition = broker.broker.topics.partition(topic, 0)
    partition.replicated_high_watermark = 3
    try:
        assert resolve(partition, base + 2, committed=False) == (base + 2, 2)
        assert resolve(partition, base + 3, committed=False) == (-1, -1)  # at the HW
        assert resolve(partition, base + 5, committed=False) == (-1, -1)
        assert resolve(partition, MAX_TIMESTAMP, committed=False) == (-1, -1)
        assert resolve(partition, LATEST, committed=False) == (-1, 3)
    finally:
        partition.replicated_high_watermark = None
    assert resolve(partition, base + 3, committed=False) == (base + 3, 3)
    assert resolve(partition, MAX_TIMESTAMP, committed=False) == (base + 5, 5)
