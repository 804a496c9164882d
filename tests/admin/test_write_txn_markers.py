"""WriteTxnMarkers (27), ListTransactions (66) and DescribeTransactions (65) on the wire."""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from oncelog.client.connection import KafkaConnection
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.testing import EmbeddedBroker

from .admin_helpers import TIMEOUT_S, RawTxnProducer, create_topic, plain_produce


def write_markers(
    conn: KafkaConnection, *markers: dict[str, Any]
) -> list[tuple[int, str, int, int]]:
    """(producer id, topic, partition, error code) for every partition answered, in order."""
    response = conn.request(ApiKey.WRITE_TXN_MARKERS, {"markers": list(markers)})
    return [
        (m.producer_id, t.name, p.partition_index, p.error_code)
        for m in response.markers
        for t in m.topics
        for p in t.partitions
    ]


def marker(
    pid: int,
    epoch: int,
    topics: dict[str, list[int]],
    *,
    commit: bool = False,
    coordinator_epoch: int = 0,
) -> dict[str, Any]:
    return {
        "producer_id": pid,
        "producer_epoch": epoch,
        "transaction_result": commit,
        "coordinator_epoch": coordinator_epoch,
        "topics": [{"name": n, "partition_indexes": ps} for n, ps in topics.items()],
    }


def lso(conn: KafkaConnection, topic: str, partition: int = 0) -> int:
    response = conn.request(
        ApiKey.LIST_OFFSETS,
        {
            "replica_id": -1,
            "isolation_level": 1,
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
    return response.topics[0].partitions[0].offset


def test_versions_are_advertised(broker: EmbeddedBroker) -> None:
    with KafkaConnection(broker.bootstrap_servers) as conn:
        assert conn.version_for(ApiKey.WRITE_TXN_MARKERS) == 1
        assert conn.version_for(ApiKey.DESCRIBE_TRANSACTIONS) == 0
        assert conn.version_for(ApiKey.LIST_TRANSACTIONS) == 1


def test_per_partition_errors_and_fencing(broker: EmbeddedBroker) -> None:
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, partitions=2)
    raw = RawTxnProducer(bootstrap, f"{topic}-m")
    raw.add_partition(topic, 0)
    raw.produce(topic, 0, 2)
    pid, epoch = raw.producer_id, raw.epoch
    with KafkaConnection(bootstrap) as conn:
        assert lso(conn, topic) == 0
        # Unknown partition, unknown topic and a good one in one request: each its own answer.
        answers = write_markers(
            conn, marker(pid, epoch, {topic: [0, 7], "no-such-topic": [0]}, coordinator_epoch=3)
        )
        assert answers == [
            (pid, topic, 0, ErrorCode.none),
            (pid, topic, 7, ErrorCode.unknown_topic_or_partition),
            (pid, "no-such-topic", 0, ErrorCode.unknown_topic_or_partition),
        ]
        assert lso(conn, topic) == 3  # two records and the marker
        # A marker from an older coordinator epoch than the last one seen is a zombie.
        assert write_markers(conn, marker(pid, epoch, {topic: [0]}, coordinator_epoch=2)) == [
            (pid, topic, 0, ErrorCode.transaction_coordinator_fenced)
        ]
        # A producer epoch below the partition's is refused.
        raw.add_partition(topic, 1)
        raw.produce(topic, 1, 1)
        assert write_markers(conn, marker(pid, epoch - 1, {topic: [1]}, coordinator_epoch=3)) == [
            (pid, topic, 1, ErrorCode.invalid_producer_epoch)
        ]
        assert lso(conn, topic, 1) == 0
        # Two markers in one request are answered in order.
        other = RawTxnProducer(bootstrap, f"{topic}-m2")
        other.add_partition(topic, 1)
        assert write_markers(
            conn,
            marker(other.producer_id, other.epoch, {topic: [1]}),
            marker(pid, epoch, {topic: [1]}, coordinator_epoch=3),
        ) == [(other.producer_id, topic, 1, ErrorCode.none), (pid, topic, 1, ErrorCode.none)]
        assert lso(conn, topic, 1) == 3
        assert write_markers(conn) == []
    raw.close()
    other.close()


def test_commit_marker_on_consumer_offsets_settles_transactional_offsets(
    broker: EmbeddedBroker,
) -> None:
    """A marker sent to __consumer_offsets reaches the group coordinator as the in-process
    coordinator's own markers do: the transaction's pending offsets become committed."""
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap)
    plain_produce(bootstrap, topic, 5)
    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"{group}-txn",
            "transaction.timeout.ms": 600_000,
        }
    )
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.send_offsets_to_transaction(
        [TopicPartition(topic, 0, 5)], consumer.consumer_group_metadata(), TIMEOUT_S
    )

    with KafkaConnection(bootstrap) as conn:

        def committed(require_stable: bool = False) -> tuple[int, int]:
            response = conn.request(
                ApiKey.OFFSET_FETCH,
                {
                    "group_id": group,
                    "require_stable": require_stable,
                    "topics": [{"name": topic, "partition_indexes": [0]}],
                },
                version=7,
            )
            (p,) = response.topics[0].partitions
            return p.committed_offset, p.error_code

        # Pending in the open transaction: invisible, and unstable for require_stable.
        assert committed() == (-1, ErrorCode.none)
        assert committed(True)[1] == ErrorCode.unstable_offset_commit

        pid = next(
            t.producer_id
            for t in conn.request(
                ApiKey.LIST_TRANSACTIONS,
                {"state_filters": ["Ongoing"], "producer_id_filters": [], "duration_filter": -1},
            ).transaction_states
            if t.transactional_id == f"{group}-txn"
        )
        index = broker.broker.groups.partition_of(group)
        assert write_markers(
            conn, marker(pid, 0, {"__consumer_offsets": [index]}, commit=True)
        ) == [(pid, "__consumer_offsets", index, ErrorCode.none)]
        assert committed() == committed(True) == (5, ErrorCode.none)
    producer.abort_transaction(TIMEOUT_S)
    consumer.close()


def test_list_transactions_filters_on_the_wire(broker: EmbeddedBroker) -> None:
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap)
    raw = RawTxnProducer(bootstrap, f"{topic}-l")
    raw.add_partition(topic, 0)
    time.sleep(0.02)
    with KafkaConnection(bootstrap) as conn:

        def listed(**body: Any) -> tuple[Any, list[str]]:
            request = {
                "state_filters": [],
                "producer_id_filters": [],
                "duration_filter": -1,
                **body,
            }
            response = conn.request(ApiKey.LIST_TRANSACTIONS, request)
            assert response.error_code == ErrorCode.none
            return response.unknown_state_filters, [
                t.transactional_id for t in response.transaction_states
            ]

        assert listed(producer_id_filters=[raw.producer_id]) == ((), [f"{topic}-l"])
        assert listed(producer_id_filters=[raw.producer_id], duration_filter=0)[1] == [f"{topic}-l"]
        assert listed(producer_id_filters=[raw.producer_id], duration_filter=3_600_000)[1] == []
        assert (
            listed(producer_id_filters=[raw.producer_id], state_filters=["CompleteAbort"])[1] == []
        )
        assert listed(state_filters=["Ongoing", "Bogus"])[0] == ("Bogus",)
        # v0 has no duration filter and still works.
        response = conn.request(
            ApiKey.LIST_TRANSACTIONS,
            {"state_filters": [], "producer_id_filters": [raw.producer_id]},
            version=0,
        )
        assert [t.transaction_state for t in response.transaction_states] == ["Ongoing"]
        response = conn.request(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [f"{topic}-l"]})
        (state,) = response.transaction_states
        assert (state.error_code, state.transaction_state, state.producer_id) == (
            ErrorCode.none,
            "Ongoing",
            raw.producer_id,
        )
        assert [(t.topic, list(t.partitions)) for t in state.topics] == [(topic, [0])]
    raw.close()
