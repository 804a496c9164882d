"""`oncelog producers describe`: what DescribeProducers reports, as JSON rows and a table."""

from __future__ import annotations

import datetime
import itertools
import json
import time

from confluent_kafka import Producer

from oncelog.client.connection import KafkaConnection
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import Record, build_batch
from oncelog.testing import EmbeddedBroker

_names = itertools.count()


def _json(result) -> list[dict[str, object]]:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _topic(cli, broker: EmbeddedBroker, partitions: int) -> str:
    name = f"producers-{next(_names)}"
    created = cli(
        "topics",
        "create",
        "--bootstrap-server",
        broker.bootstrap_servers,
        "--topic",
        name,
        "--partitions",
        str(partitions),
    )
    assert created.exit_code == 0, created.output
    return name


def _describe(cli, broker: EmbeddedBroker, topic: str, *args: str):
    return cli(
        "producers",
        "describe",
        "--bootstrap-server",
        broker.bootstrap_servers,
        "--topic",
        topic,
        *args,
    )


def test_idempotent_confluent_producer_is_listed(broker: EmbeddedBroker, cli) -> None:
    topic = _topic(cli, broker, 1)
    assert _json(_describe(cli, broker, topic, "--json")) == []
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "enable.idempotence": True, "linger.ms": 5}
    )
    records = 250
    for i in range(records):
        producer.produce(topic, b"v%d" % i, key=b"k")
        if i % 50 == 49:
            producer.poll(0)
    assert producer.flush(10) == 0

    (row,) = _json(_describe(cli, broker, topic, "--json"))
    assert row["partition"] == 0 and row["producer_id"] >= 0
    assert row["producer_epoch"] == 0
    assert row["last_sequence"] == records - 1  # sequences 0..249 in however many batches
    assert row["last_timestamp"] > 0 and row["last_timestamp_iso"].endswith("Z")
    assert row["coordinator_epoch"] is None and row["current_txn_start_offset"] is None


def test_rows_match_what_the_raw_producer_sent(broker: EmbeddedBroker, cli) -> None:
    """Exact values: the producer id InitProducerId gave, the epoch and sequences set by
    hand, the batch's max timestamp, on the partitions written to and no other."""
    topic = _topic(cli, broker, 3)
    with KafkaConnection(broker.bootstrap_servers) as conn:
        pids = []
        for _ in range(2):
            answer = conn.request(
                ApiKey.INIT_PRODUCER_ID,
                {
                    "transactional_id": None,
                    "transaction_timeout": 60_000,
                    "producer_id": -1,
                    "producer_epoch": -1,
                },
            )
            pids.append(answer.producer_id)
        ts = int(time.time() * 1000)  # recent: an old timestamp could expire the producer
        sends = [(pids[0], 0, 0, 0, 5), (pids[1], 3, 2, 114, 3), (pids[0], 0, 2, 6, 2)]
        for pid, epoch, partition, first, count in sends:
            batch = build_batch(
                [Record(None, b"x")] * count,
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=first,
                timestamp_ms=ts,
            )
            response = conn.request(
                ApiKey.PRODUCE,
                {
                    "transactional_id": None,
                    "acks": -1,
                    "timeout": 10_000,
                    "topic_data": [
                        {"name": topic, "partition_data": [{"index": partition, "records": batch}]}
                    ],
                },
            )
            assert response.responses[0].partition_responses[0].error_code == ErrorCode.none

    iso = datetime.datetime.fromtimestamp(ts // 1000, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    iso += f".{ts % 1000:03d}Z"
    common = {
        "last_timestamp": ts,
        "last_timestamp_iso": iso,
        "coordinator_epoch": None,
        "current_txn_start_offset": None,
    }
    row = lambda partition, pid, epoch, last: {  # noqa: E731
        "partition": partition,
        "producer_id": pid,
        "producer_epoch": epoch,
        "last_sequence": last,
        **common,
    }
    assert _json(_describe(cli, broker, topic, "--json")) == [
        row(0, pids[0], 0, 4),
        row(2, pids[0], 0, 7),
        row(2, pids[1], 3, 116),
    ]
    assert _json(_describe(cli, broker, topic, "--partition", "2", "--json")) == [
        row(2, pids[0], 0, 7),
        row(2, pids[1], 3, 116),
    ]
    assert _json(_describe(cli, broker, topic, "--partition", "1", "--json")) == []

    table = _describe(cli, broker, topic)
    assert table.exit_code == 0, table.output
    for heading in (
        "Partition",
        "Producer id",
        "Epoch",
        "Last sequence",
        "Last timestamp",
        "Coordinator epoch",
        "Txn start offset",
    ):
        assert heading in table.stdout
    assert str(pids[1]) in table.stdout and iso in table.stdout
    empty = _describe(cli, broker, topic, "--partition", "1")
    assert empty.exit_code == 0 and "No active producers" in empty.stdout


def test_errors_are_one_line(broker: EmbeddedBroker, cli) -> None:
    missing = _describe(cli, broker, "never-created")
    assert missing.exit_code == 1
    assert missing.stderr.startswith("Error: ") and "UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr
    topic = _topic(cli, broker, 1)
    beyond = _describe(cli, broker, topic, "--partition", "7")
    assert beyond.exit_code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in beyond.stderr
    negative = _describe(cli, broker, topic, "--partition", "-1")
    assert negative.exit_code == 2
    nobody = cli("producers", "describe", "--bootstrap-server", "127.0.0.1:1", "--topic", topic)
    assert nobody.exit_code == 1 and nobody.stderr.startswith("Error: ")


def test_help(cli) -> None:
    assert "  producers " in cli("--help").stdout
    text = " ".join(cli("producers", "describe", "--help").stdout.split())
    assert "--topic" in text and "--partition" in text and "--json" in text
