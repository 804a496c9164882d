"""Offsets for a partition that does not exist are not stored: OffsetCommit and
TxnOffsetCommit answer it UNKNOWN_TOPIC_OR_PARTITION (its topic unknown, or past its
partition count) and commit the others, as Kafka's KafkaApis sorts the request before the
group coordinator sees it (handleOffsetCommitRequest, handleTxnOffsetCommitRequest)."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.broker.handlers.groups import _split_committable
from oncelog.client.connection import KafkaConnection
from oncelog.protocol.errors import ErrorCode
from oncelog.testing import EmbeddedBroker

from ..cluster.coordination import (
    TopicPartition,
    add_offsets,
    end_txn,
    init_producer_id,
    offset_commit,
    stable_offset,
    txn_offset_commit,
    until,
)

GROUP = "g"
OFFSETS: dict[TopicPartition, int] = {("t", 0): 5, ("t", 1): 6, ("missing", 0): 7}
ANSWERS = {
    ("t", 0): ErrorCode.none,
    ("t", 1): ErrorCode.unknown_topic_or_partition,  # t has one partition
    ("missing", 0): ErrorCode.unknown_topic_or_partition,
}


@pytest.fixture
def conn() -> Iterator[KafkaConnection]:
    settings = {"transaction.state.log.num.partitions": "1", "offsets.topic.num.partitions": "1"}
    with EmbeddedBroker(settings) as embedded:
        admin = AdminClient({"bootstrap.servers": embedded.bootstrap_servers})
        admin.create_topics([NewTopic("t", 1)])["t"].result(20)
        with KafkaConnection(embedded.bootstrap_servers) as connection:
            yield connection


def stored(conn: KafkaConnection) -> dict[TopicPartition, int]:
    return {tp: stable_offset(conn, GROUP, *tp)[1] for tp in OFFSETS}


def test_offset_commit_stores_only_partitions_that_exist(conn: KafkaConnection) -> None:
    assert offset_commit(conn, GROUP, OFFSETS) == ANSWERS
    assert stored(conn) == {("t", 0): 5, ("t", 1): -1, ("missing", 0): -1}


def test_txn_offset_commit_stores_only_partitions_that_exist(conn: KafkaConnection) -> None:
    code, pid, epoch = init_producer_id(conn, "x")
    assert code == ErrorCode.none
    assert add_offsets(conn, "x", pid, epoch, GROUP) == ErrorCode.none
    assert txn_offset_commit(conn, "x", pid, epoch, GROUP, OFFSETS) == ANSWERS
    assert end_txn(conn, "x", pid, epoch, commit=True) == ErrorCode.none
    assert until(lambda: stored(conn) == {("t", 0): 5, ("t", 1): -1, ("missing", 0): -1})


class Uncomparable:
    """A request's partition entry that fails the test if it is ever compared with another:
    sorting a topic's entries into known and missing ones must take one pass (list
    membership compared each entry with every known one: quadratic in the request, on the
    event loop; 2,000 entries held it ~0.3 s)."""

    def __init__(self, partition_index: int) -> None:
        self.partition_index = partition_index

    def __eq__(self, other: object) -> bool:
        raise AssertionError("partition entries compared")

    __hash__ = None  # type: ignore[assignment]


def test_sorting_a_topics_partitions_compares_no_entries() -> None:
    one_partition = SimpleNamespace(
        authorizer=None, knows_partition=lambda topic, index: index == 0
    )
    entries = [Uncomparable(i % 2) for i in range(6)]
    topics = [SimpleNamespace(name="t", partitions=entries)]
    committable, answers = _split_committable(one_partition, SimpleNamespace(), topics)  # type: ignore[arg-type]
    assert [p.partition_index for p in committable[0].partitions] == [0, 0, 0]
    assert [p["partition_index"] for p in answers[0]["partitions"]] == [1, 1, 1]
