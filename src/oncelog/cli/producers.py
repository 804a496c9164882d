"""`oncelog producers describe`: the producer state each partition holds (DescribeProducers).

What an operator needs to see when a producer is refused or a transaction hangs: per
producer id its epoch, last sequence and last timestamp on the partition, the epoch of the
coordinator that wrote its last marker, and where its open transaction starts.
"""

from __future__ import annotations

import datetime
from dataclasses import asdict, dataclass
from typing import Any

import click

from oncelog.cli.output import (
    CliError,
    bootstrap_option,
    json_option,
    print_json,
    print_table,
    reports_errors,
)
from oncelog.client.connection import KafkaConnection
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode

COLUMNS = [
    "Partition",
    "Producer id",
    "Epoch",
    "Last sequence",
    "Last timestamp",
    "Last timestamp (UTC)",
    "Coordinator epoch",
    "Txn start offset",
]
NUMBER_COLUMNS = [c for c in COLUMNS if c != "Last timestamp (UTC)"]


@dataclass(frozen=True)
class ProducerRow:
    partition: int
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    last_timestamp_iso: str | None
    coordinator_epoch: int | None  # None: no transaction marker seen yet (Kafka sends -1)
    current_txn_start_offset: int | None  # None: no open transaction (Kafka sends -1)


def iso_utc(timestamp_ms: int) -> str | None:
    """Milliseconds since the epoch as ISO 8601 UTC with milliseconds; None below 0."""
    if timestamp_ms < 0:
        return None
    moment = datetime.datetime.fromtimestamp(timestamp_ms / 1000, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _check(code: int, message: str | None, what: str) -> None:
    if code != ErrorCode.none:
        name = ErrorCode(code).name.upper()
        raise CliError(f"{what}: {name}" + (f": {message}" if message else ""))


def _partitions(conn: KafkaConnection, topic: str) -> list[int]:
    response = conn.request(
        ApiKey.METADATA,
        {
            "topics": [{"name": topic, "topic_id": None}],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
    )
    (found,) = response.topics
    _check(found.error_code, None, f"topic {topic!r}")
    return sorted(p.partition_index for p in found.partitions)


def describe_producers(
    conn: KafkaConnection, topic: str, partitions: list[int] | None = None
) -> list[ProducerRow]:
    """Rows for every producer of the given partitions (all of the topic's by default),
    ordered by partition and producer id."""
    indexes = _partitions(conn, topic) if partitions is None else sorted(set(partitions))
    response = conn.request(
        ApiKey.DESCRIBE_PRODUCERS, {"topics": [{"name": topic, "partition_indexes": indexes}]}
    )
    rows: list[ProducerRow] = []
    for answer in response.topics:
        for partition in sorted(answer.partitions, key=lambda p: p.partition_index):
            _check(
                partition.error_code,
                partition.error_message,
                f"producers of {topic}-{partition.partition_index}",
            )
            rows += [
                _row(partition.partition_index, p)
                for p in sorted(partition.active_producers, key=lambda p: p.producer_id)
            ]
    return rows


def _row(partition: int, state: Any) -> ProducerRow:
    return ProducerRow(
        partition=partition,
        producer_id=state.producer_id,
        producer_epoch=state.producer_epoch,
        last_sequence=state.last_sequence,
        last_timestamp=state.last_timestamp,
        last_timestamp_iso=iso_utc(state.last_timestamp),
        coordinator_epoch=None if state.coordinator_epoch < 0 else state.coordinator_epoch,
        current_txn_start_offset=(
            None if state.current_txn_start_offset < 0 else state.current_txn_start_offset
        ),
    )


@click.group()
def producers() -> None:
    """Inspect the producer state the broker keeps per partition."""


@producers.command()
@bootstrap_option
@click.option("--topic", required=True, help="Topic whose producers to show.")
@click.option(
    "--partition",
    "partitions",
    type=click.IntRange(min=0),
    multiple=True,
    help="Only this partition (repeatable) [default: every partition].",
)
@json_option
@reports_errors
def describe(bootstrap: str, topic: str, partitions: tuple[int, ...], as_json: bool) -> None:
    """Producer id, epoch, last sequence and timestamp of each producer, per partition.

    The broker answers from its producer state (DescribeProducers, KIP-664): every
    producer that appended to the partition and has not expired
    (producer.id.expiration.ms). '-' (null in JSON) means no coordinator epoch or no open
    transaction.
    """
    with KafkaConnection(bootstrap) as conn:
        rows = describe_producers(conn, topic, list(partitions) or None)
    if as_json:
        print_json([asdict(row) for row in rows])
        return
    if not rows:
        click.echo(
            f"No active producers on {topic}"
            + (f" partition {', '.join(map(str, partitions))}." if partitions else ".")
        )
        return
    print_table(
        COLUMNS,
        [
            (
                r.partition,
                r.producer_id,
                r.producer_epoch,
                r.last_sequence,
                r.last_timestamp,
                r.last_timestamp_iso,
                r.coordinator_epoch,
                r.current_txn_start_offset,
            )
            for r in rows
        ],
        right=NUMBER_COLUMNS,
    )
