"""Internal topics belong to their coordinators.

`__consumer_offsets` and `__transaction_state` are created only when their coordinator is
first looked up, with their own partition counts; a Metadata request naming one does not
create it, CreateTopics and DeleteTopics refuse them, and a client's Produce to one is
refused with INVALID_TOPIC_EXCEPTION (Kafka's "Cannot append to internal topic").

Before this was so, a Metadata request naming `__consumer_offsets` on a fresh broker
created it with `num.partitions` (1) partitions and the group coordinator then failed with
`KeyError` on every group hashed to another partition; and one garbage batch produced to it
stopped the broker from starting. The tests below fail on that code.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from oncelog.broker.internal_topics import CONSUMER_OFFSETS, TRANSACTION_STATE
from oncelog.client.connection import KafkaConnection
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import Record, build_batch
from oncelog.testing import EmbeddedBroker

from .group_clients import TIMEOUT_S, committed, consume_as_group, produce_values
from .raw_requests import create_topics, delete_topic, metadata, produce

INTERNAL = (CONSUMER_OFFSETS, TRANSACTION_STATE)
CONFIG = {"group.initial.rebalance.delay.ms": "0"}


@pytest.fixture
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(CONFIG) as embedded:
        yield embedded


@pytest.fixture
def conn(broker: EmbeddedBroker) -> Iterator[KafkaConnection]:
    with KafkaConnection(broker.bootstrap_servers, timeout_s=TIMEOUT_S) as connection:
        yield connection


def consume_and_commit(bootstrap: str, group: str, topic: str, count: int) -> int:
    """Join `group`, read and commit `count` records of `topic`; the committed offset."""
    assert consume_as_group(bootstrap, group, topic, count, commit=True) == count
    return committed(bootstrap, group, topic)


@pytest.mark.parametrize("name", INTERNAL)
def test_metadata_naming_an_internal_topic_does_not_create_it(
    broker: EmbeddedBroker, conn: KafkaConnection, name: str
) -> None:
    answer = metadata(conn, name)
    assert answer.error_code == ErrorCode.unknown_topic_or_partition
    assert broker.broker is not None and broker.broker.topics.get(name) is None


def test_groups_work_after_a_metadata_request_for_consumer_offsets(
    broker: EmbeddedBroker, conn: KafkaConnection
) -> None:
    metadata(conn, CONSUMER_OFFSETS)
    produce_values(broker.bootstrap_servers, "events", 5)
    # Many groups, so that they hash to many partitions of __consumer_offsets.
    for group in ("g-a", "g-b", "g-c", "g-d"):
        assert consume_and_commit(broker.bootstrap_servers, group, "events", 5) == 5
    answer = metadata(conn, CONSUMER_OFFSETS)
    assert answer.error_code == ErrorCode.none and answer.is_internal
    assert len(answer.partitions) == 50  # offsets.topic.num.partitions


@pytest.mark.parametrize("name", INTERNAL)
def test_create_topics_refuses_an_internal_name(
    broker: EmbeddedBroker, conn: KafkaConnection, name: str
) -> None:
    result = create_topics(conn, {name: 1})[name]
    assert result.error_code == ErrorCode.invalid_request
    assert "internal topic" in result.error_message
    assert broker.broker is not None and broker.broker.topics.get(name) is None


def test_delete_topics_refuses_an_internal_topic(
    broker: EmbeddedBroker, conn: KafkaConnection
) -> None:
    produce_values(broker.bootstrap_servers, "events", 1)
    assert consume_and_commit(broker.bootstrap_servers, "keeper", "events", 1) == 1
    result = delete_topic(conn, CONSUMER_OFFSETS)
    assert result.error_code == ErrorCode.invalid_request
    assert committed(broker.bootstrap_servers, "keeper", "events") == 1


@pytest.mark.parametrize("name", INTERNAL)
def test_client_produce_to_an_internal_topic_is_refused(
    broker: EmbeddedBroker, conn: KafkaConnection, name: str
) -> None:
    assert broker.broker is not None
    garbage = build_batch([Record(b"\x00\x09garbage", b"\xff" * 8)], timestamp_ms=1)
    before_it_exists = produce(conn, name, 0, garbage)
    assert before_it_exists.error_code == ErrorCode.invalid_topic_exception
    assert "Cannot append to internal topic" in before_it_exists.error_message

    # Once the coordinator created it: still refused, nothing appended.
    coordinator = broker.broker.groups if name == CONSUMER_OFFSETS else broker.broker.transactions
    find_coordinator(conn, name)
    topic = broker.broker.topics.get(name)
    assert topic is not None
    ends = [p.log.log_end_offset for p in topic.partitions]
    answer = produce(conn, name, 0, garbage)
    assert answer.error_code == ErrorCode.invalid_topic_exception
    assert [p.log.log_end_offset for p in topic.partitions] == ends
    assert coordinator.num_partitions == 50


def find_coordinator(conn: KafkaConnection, internal_topic: str) -> None:
    key_type = 0 if internal_topic == CONSUMER_OFFSETS else 1
    response = conn.request(
        ApiKey.FIND_COORDINATOR,
        {"key": "someone", "key_type": key_type, "coordinator_keys": ["someone"]},
    )
    errors = [c.error_code for c in getattr(response, "coordinators", [response])]
    assert errors == [ErrorCode.none]
