"""`oncelog transactions list|describe|find-hanging|abort` (KIP-664, like kafka-transactions.sh).

list and describe ask the transaction coordinator (ListTransactions, DescribeTransactions).
find-hanging asks the partitions (DescribeProducers) which transactions they hold open and
the coordinator which of those it still knows (:mod:`oncelog.client.hanging`). abort writes
an ABORT marker to one partition (WriteTxnMarkers), which is how Kafka's admin client ends
a hanging transaction.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import click

from oncelog.cli.output import (
    bootstrap_option,
    iso_utc,
    json_option,
    print_json,
    print_table,
    reports_errors,
)
from oncelog.client.admin import Admin, AdminError, Transaction, TransactionListing
from oncelog.client.connection import Bootstrap
from oncelog.client.hanging import (
    HANGING,
    WAITING_FOR_MARKERS,
    abort_transaction,
    find_open_transactions,
    producer_at,
    still_tracked,
)
from oncelog.clock import wall_clock_ms


def _as_row(listed: TransactionListing, found: Transaction | None, now_ms: int) -> dict[str, Any]:
    """What list and describe show of one transactional id (the --json keys)."""
    start = None if found is None else found.start_time_ms
    state = listed.state if found is None else found.state
    return {
        "transactional_id": listed.transactional_id,
        "producer_id": listed.producer_id if found is None else found.producer_id,
        "producer_epoch": None if found is None else found.producer_epoch,
        "state": state,
        "timeout_ms": None if found is None else found.timeout_ms,
        "start_time_ms": start,
        "start_time": iso_utc(start),
        # only while the transaction is open
        "duration_ms": now_ms - start
        if start is not None and state in WAITING_FOR_MARKERS
        else None,
        "partitions": [] if found is None else found.partitions,
    }


@click.group()
def transactions() -> None:
    """Inspect transactions and end hanging ones (KIP-664)."""


# -- list -----------------------------------------------------------------------------------


@transactions.command("list")
@bootstrap_option
@click.option(
    "--state",
    "states",
    multiple=True,
    metavar="STATE",
    help="Only transactions in this state (repeatable): Empty, Ongoing, PrepareCommit, "
    "PrepareAbort, CompleteCommit, CompleteAbort, PrepareEpochFence.",
)
@click.option(
    "--producer-id",
    "producer_ids",
    type=int,
    multiple=True,
    help="Only this producer id (repeatable).",
)
@click.option(
    "--duration-filter",
    type=click.IntRange(min=0),
    metavar="MS",
    help="Only transactions started more than MS milliseconds ago.",
)
@json_option
@reports_errors
def list_command(
    bootstrap: Bootstrap,
    states: tuple[str, ...],
    producer_ids: tuple[int, ...],
    duration_filter: int | None,
    as_json: bool,
) -> None:
    """Every transactional id the coordinator holds: producer id and epoch, state, and for
    an open transaction (Ongoing, PrepareCommit, PrepareAbort) how long it has run."""
    with Admin.connect(bootstrap) as admin:
        listed = admin.list_transactions(
            states, producer_ids, -1 if duration_filter is None else duration_filter
        )
        described = admin.describe_transactions([t.transactional_id for t in listed])
    now_ms = wall_clock_ms()
    rows = [_as_row(t, described.get(t.transactional_id), now_ms) for t in listed]
    if as_json:
        print_json(rows)
        return
    if not rows:
        click.echo("No transactions.")
        return
    print_table(
        [
            "Transactional id",
            "Producer id",
            "Epoch",
            "State",
            "Timeout ms",
            "Duration ms",
            "Partitions",
        ],
        [
            (
                r["transactional_id"],
                r["producer_id"],
                r["producer_epoch"],
                r["state"],
                r["timeout_ms"],
                r["duration_ms"],
                len(r["partitions"]) if r["state"] in WAITING_FOR_MARKERS else None,
            )
            for r in rows
        ],
        right=["Producer id", "Epoch", "Timeout ms", "Duration ms", "Partitions"],
    )


# -- describe -------------------------------------------------------------------------------


@transactions.command()
@bootstrap_option
@click.option("--transactional-id", required=True, help="Transactional id to describe.")
@json_option
@reports_errors
def describe(bootstrap: Bootstrap, transactional_id: str, as_json: bool) -> None:
    """State, producer id and epoch, timeout, start time and the partitions of the current
    transaction (while it is open: those still waiting for their marker)."""
    with Admin.connect(bootstrap) as admin:
        found = admin.describe_transactions([transactional_id]).get(transactional_id)
    if found is None:
        raise AdminError(f"transactional id {transactional_id!r}: TRANSACTIONAL_ID_NOT_FOUND")
    row = _as_row(
        TransactionListing(transactional_id, found.producer_id, found.state),
        found,
        wall_clock_ms(),
    )
    if as_json:
        print_json(row)
        return
    print_table(
        [
            "Transactional id",
            "Producer id",
            "Epoch",
            "State",
            "Timeout ms",
            "Start time (UTC)",
            "Duration ms",
            "Partitions",
        ],
        [
            (
                row["transactional_id"],
                row["producer_id"],
                row["producer_epoch"],
                row["state"],
                row["timeout_ms"],
                row["start_time"],
                row["duration_ms"],
                ", ".join(row["partitions"]) or None,
            )
        ],
        right=["Producer id", "Epoch", "Timeout ms", "Duration ms"],
    )


# -- find-hanging -------------------------------------------------------------------------


@transactions.command("find-hanging")
@bootstrap_option
@click.option(
    "--max-transaction-timeout",
    default=15,
    show_default=True,
    type=click.IntRange(min=0),
    metavar="MINUTES",
    help="Only transactions whose producer has been silent on the "
    "partition for longer than this (the largest transaction timeout in use).",
)
@click.option("--topic", help="Only this topic [default: every topic, internal ones included].")
@click.option(
    "--partition", type=click.IntRange(min=0), help="Only this partition (needs --topic)."
)
@click.option(
    "--include-ongoing",
    is_flag=True,
    help="Also show open transactions the coordinator still tracks (status 'ongoing').",
)
@json_option
@reports_errors
def find_hanging(
    bootstrap: Bootstrap,
    max_transaction_timeout: int,
    topic: str | None,
    partition: int | None,
    include_ongoing: bool,
    as_json: bool,
) -> None:
    """Open transactions no coordinator will ever end: they hold the partition's last
    stable offset (LSO), so read_committed consumers stop there for good.

    \b
    As Kafka's kafka-transactions.sh find-hanging:
    1. DescribeProducers on every partition searched: an open transaction is a producer
       with a current transaction start offset, silent on the partition for longer than
       --max-transaction-timeout (its last append or marker).
    2. ListTransactions by producer id, then DescribeTransactions: the transaction is
       HANGING if no transactional id has that producer id, if the coordinator no longer
       knows the id, or if the id's current transaction (Ongoing, PrepareCommit,
       PrepareAbort) does not include the partition.
    Otherwise the coordinator still tracks it and ends it itself (commit, abort, or
    abort at its transaction.timeout.ms): --include-ongoing shows those with status
    'ongoing'. Do not abort them by hand: the producer could add more records to the
    same transaction and commit only those.

    Release a hanging one with
    `oncelog transactions abort --topic T --partition P --start-offset O`.
    """
    if partition is not None and topic is None:
        raise click.UsageError("--partition needs --topic")
    with Admin.connect(bootstrap) as admin:
        found = find_open_transactions(
            admin, topic, partition, max_transaction_timeout * 60_000, wall_clock_ms()
        )
    shown = [f for f in found if include_ongoing or f.status == HANGING]
    if as_json:
        print_json([asdict(f) for f in shown])
        return
    if not shown:
        click.echo(
            "No hanging transactions."
            + (
                f" ({len(found)} open one(s) still tracked by the coordinator: "
                "--include-ongoing shows them.)"
                if found
                else ""
            )
        )
        return
    print_table(
        [
            "Topic",
            "Partition",
            "Producer id",
            "Epoch",
            "Coordinator epoch",
            "Start offset",
            "Last timestamp",
            "Duration (min)",
            "Transactional id",
            "Status",
            "Reason",
        ],
        [
            (
                f.topic,
                f.partition,
                f.producer_id,
                f.producer_epoch,
                f.coordinator_epoch,
                f.start_offset,
                f.last_timestamp,
                f.duration_minutes,
                f.transactional_id,
                f.status,
                f.reason,
            )
            for f in shown
        ],
        right=[
            "Partition",
            "Producer id",
            "Epoch",
            "Coordinator epoch",
            "Start offset",
            "Last timestamp",
            "Duration (min)",
        ],
    )


# -- abort ------------------------------------------------------------------------------------


@transactions.command()
@bootstrap_option
@click.option("--topic", required=True, help="Topic of the hanging transaction.")
@click.option("--partition", required=True, type=click.IntRange(min=0), help="Its partition.")
@click.option(
    "--start-offset",
    type=click.IntRange(min=0),
    help="First offset of the open transaction (find-hanging's 'Start offset'): the "
    "producer, its epoch and coordinator epoch are looked up (DescribeProducers).",
)
@click.option("--producer-id", type=int, help="Or give the producer id ...")
@click.option("--producer-epoch", type=int, help="... its epoch ...")
@click.option("--coordinator-epoch", type=int, help="... and the coordinator epoch (-1 means 0).")
@click.option(
    "--force", is_flag=True, help="Abort even though the coordinator still tracks the transaction."
)
@json_option
@reports_errors
def abort(
    bootstrap: Bootstrap,
    topic: str,
    partition: int,
    start_offset: int | None,
    producer_id: int | None,
    producer_epoch: int | None,
    coordinator_epoch: int | None,
    force: bool,
    as_json: bool,
) -> None:
    """Write an ABORT marker for one producer's open transaction on one partition
    (WriteTxnMarkers, as Kafka's admin abortTransaction): its records become aborted and the
    partition's last stable offset moves on.

    Refused when the coordinator still tracks the transaction on this partition (it would
    end it itself; a manual abort there breaks the transaction's atomicity) unless --force.
    """
    if start_offset is None and producer_id is None:
        raise click.UsageError(
            "give --start-offset, or --producer-id with --producer-epoch and --coordinator-epoch"
        )
    with Admin.connect(bootstrap) as admin:
        if start_offset is not None:
            state = producer_at(admin, topic, partition, start_offset)
            producer_id, producer_epoch = state.producer_id, state.producer_epoch
            coordinator_epoch = -1 if state.coordinator_epoch is None else state.coordinator_epoch
        elif producer_epoch is None or coordinator_epoch is None:
            raise click.UsageError("--producer-id needs --producer-epoch and --coordinator-epoch")
        assert (
            producer_id is not None and producer_epoch is not None and coordinator_epoch is not None
        )
        if not force:
            tracked = still_tracked(admin, topic, partition, producer_id)
            if tracked:
                raise AdminError(f"not aborting: {tracked} (--force overrides)")
        result = abort_transaction(
            admin, topic, partition, producer_id, producer_epoch, coordinator_epoch
        )
    if as_json:
        print_json(asdict(result))
        return
    click.echo(
        f"Aborted the transaction of producer {producer_id} (epoch {producer_epoch}) on "
        f"{topic}-{partition}: last stable offset {result.last_stable_offset_before} -> "
        f"{result.last_stable_offset_after} (high watermark {result.high_watermark})."
    )
