"""Helpers for the transaction and group admin tests: a CliRunner wrapper that parses
--json, client helpers, and a protocol-level transactional producer that leaves a
transaction open exactly where a test wants it."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from click.testing import CliRunner, Result
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.cli.main import main
from oncelog.client.connection import KafkaConnection
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import Record, build_batch

BROKER_CONFIG = {
    "transaction.state.log.num.partitions": "4",
    "offsets.topic.num.partitions": "4",
    "group.initial.rebalance.delay.ms": "0",
}
TIMEOUT_S = 20.0


def run_cli(bootstrap: str, *args: str, expect_exit: int = 0) -> Result:
    result = CliRunner().invoke(
        main, [*args, "--bootstrap-server", bootstrap], catch_exceptions=False
    )
    assert result.exit_code == expect_exit, result.output
    return result


def run_json(bootstrap: str, *args: str) -> Any:
    return json.loads(run_cli(bootstrap, *args, "--json").output)


def create_topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions)])[name].result(TIMEOUT_S)
    return name


def plain_produce(bootstrap: str, topic: str, count: int, partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    for i in range(count):
        producer.produce(topic, b"plain-%d" % i, partition=partition)
    assert producer.flush(TIMEOUT_S) == 0


def read_committed_values(bootstrap: str, topic: str, expect: int) -> list[bytes]:
    """Values a read_committed consumer gets from offset 0 (stops after `expect`, or after
    the timeout, then polls briefly for anything extra)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline and len(got) < expect:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                got.append(message.value())
        settle = time.monotonic() + 0.5
        while time.monotonic() < settle:
            message = consumer.poll(0.1)
            if message is not None and not message.error():
                got.append(message.value())
    finally:
        consumer.close()
    return got


class RawTxnProducer:
    """A transactional producer on the bare protocol: InitProducerId, AddPartitionsToTxn,
    Produce. It never ends its transaction unless told, and never retries anything."""

    def __init__(self, bootstrap: str, transactional_id: str, timeout_ms: int = 600_000) -> None:
        self.conn = KafkaConnection(bootstrap)
        self.transactional_id = transactional_id
        answer = self._until_done(
            lambda: self.conn.request(
                ApiKey.INIT_PRODUCER_ID,
                {
                    "transactional_id": transactional_id,
                    "transaction_timeout": timeout_ms,
                    "producer_id": -1,
                    "producer_epoch": -1,
                },
            )
        )
        self.producer_id, self.epoch = answer.producer_id, answer.producer_epoch
        self.sequences: dict[tuple[str, int], int] = {}

    @staticmethod
    def _until_done(send: Callable[[], Any]) -> Any:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            answer = send()
            if (
                answer.error_code
                not in (ErrorCode.coordinator_load_in_progress, ErrorCode.concurrent_transactions)
                or time.monotonic() > deadline
            ):
                assert answer.error_code == ErrorCode.none, answer
                return answer
            time.sleep(0.05)

    def add_partition(self, topic: str, partition: int) -> None:
        response = self.conn.request(
            ApiKey.ADD_PARTITIONS_TO_TXN,
            {
                "v3_and_below_transactional_id": self.transactional_id,
                "v3_and_below_producer_id": self.producer_id,
                "v3_and_below_producer_epoch": self.epoch,
                "v3_and_below_topics": [{"name": topic, "partitions": [partition]}],
            },
            version=3,
        )
        codes = [
            p.partition_error_code
            for t in response.results_by_topic_v3_and_below
            for p in t.results_by_partition
        ]
        assert codes == [ErrorCode.none], response

    def produce(self, topic: str, partition: int, count: int) -> int:
        """Append `count` transactional records; the batch's base offset."""
        sequence = self.sequences.get((topic, partition), 0)
        records = [Record(b"k", b"txn-%d" % (sequence + i)) for i in range(count)]
        batch = build_batch(
            records,
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            base_sequence=sequence,
            transactional=True,
            timestamp_ms=int(time.time() * 1000),
        )
        response = self.conn.request(
            ApiKey.PRODUCE,
            {
                "transactional_id": self.transactional_id,
                "acks": -1,
                "timeout": 10_000,
                "topic_data": [
                    {"name": topic, "partition_data": [{"index": partition, "records": batch}]}
                ],
            },
        )
        (answer,) = response.responses[0].partition_responses
        assert answer.error_code == ErrorCode.none, answer
        self.sequences[(topic, partition)] = sequence + count
        return answer.base_offset

    def close(self) -> None:
        self.conn.close()
