"""Transactional batches outside a transaction are refused, as Kafka refuses them."""

from __future__ import annotations

import time

import pytest

from oncelog.client.connection import KafkaConnection
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import Record, build_batch
from oncelog.testing import EmbeddedBroker


@pytest.mark.parametrize(
    ("transactional_id", "expected"),
    [
        (None, ErrorCode.transactional_id_authorization_failed),
        # KIP-890 part 1: the partition is not in an ongoing transaction of this producer
        ("never-registered", ErrorCode.invalid_txn_state),
    ],
)
def test_transactional_batch_is_refused_and_appends_nothing(
    transactional_id: str | None, expected: ErrorCode
) -> None:
    with EmbeddedBroker() as embedded, KafkaConnection(embedded.bootstrap_servers) as conn:
        pid = conn.request(
            ApiKey.INIT_PRODUCER_ID,
            {
                "transactional_id": None,
                "transaction_timeout": 60_000,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        ).producer_id
        records = build_batch(
            [Record(b"k", b"v")],
            producer_id=pid,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
            timestamp_ms=int(time.time() * 1000),
        )
        conn.request(
            ApiKey.METADATA,
            {
                "topics": [{"name": "t", "topic_id": None}],
                "allow_auto_topic_creation": True,
                "include_topic_authorized_operations": False,
            },
        )
        answer = conn.request(
            ApiKey.PRODUCE,
            {
                "transactional_id": transactional_id,
                "acks": -1,
                "timeout": 10_000,
                "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}],
            },
        )
        (partition,) = answer.responses[0].partition_responses
        assert partition.error_code == expected
        assert embedded.broker is not None
        assert embedded.broker.topics.partition("t", 0).log.log_end_offset == 0
