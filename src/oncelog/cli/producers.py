"""`oncelog producers describe`: the producer state each partition holds (DescribeProducers).

What an operator needs to see when a producer is refused or a transaction hangs: per
producer id its epoch, last sequence and last timestamp on the partition, the epoch of the
coordinator that wrote its last marker, and where its open transaction starts.
"""

from __future__ import annotations

import click

from oncelog.cli.output import (
    bootstrap_option,
    iso_utc,
    json_option,
    print_json,
    print_table,
    reports_errors,
)
from oncelog.client.admin import Admin
from oncelog.client.connection import Bootstrap

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
def describe(bootstrap: Bootstrap, topic: str, partitions: tuple[int, ...], as_json: bool) -> None:
    """Producer id, epoch, last sequence and timestamp of each producer, per partition.

    The broker answers from its producer state (DescribeProducers, KIP-664): every
    producer that appended to the partition and has not expired
    (producer.id.expiration.ms). '-' (null in JSON) means no coordinator epoch or no open
    transaction.
    """
    with Admin.connect(bootstrap) as admin:
        indexes = list(partitions) or admin.topic_partitions([topic])[topic]
        found = admin.describe_producers({topic: indexes})
    states = [s for key in sorted(found) for s in found[key]]
    if as_json:
        print_json(
            [
                {
                    "partition": s.partition,
                    "producer_id": s.producer_id,
                    "producer_epoch": s.producer_epoch,
                    "last_sequence": s.last_sequence,
                    "last_timestamp": s.last_timestamp,
                    "last_timestamp_iso": iso_utc(s.last_timestamp),
                    "coordinator_epoch": s.coordinator_epoch,
                    "current_txn_start_offset": s.current_txn_start_offset,
                }
                for s in states
            ]
        )
        return
    if not states:
        click.echo(
            f"No active producers on {topic}"
            + (f" partition {', '.join(map(str, partitions))}." if partitions else ".")
        )
        return
    print_table(
        COLUMNS,
        [
            (
                s.partition,
                s.producer_id,
                s.producer_epoch,
                s.last_sequence,
                s.last_timestamp,
                iso_utc(s.last_timestamp),
                s.coordinator_epoch,
                s.current_txn_start_offset,
            )
            for s in states
        ],
        right=NUMBER_COLUMNS,
    )
