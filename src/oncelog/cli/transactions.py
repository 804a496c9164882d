"""`oncelog transactions list|describe|find-hanging|abort` (KIP-664, like kafka-transactions.sh).

list and describe ask the transaction coordinator (ListTransactions, DescribeTransactions).
find-hanging asks the partitions (DescribeProducers) which transactions they hold open and
the coordinator which of those it still knows. abort writes an ABORT marker to one
partition (WriteTxnMarkers), which is how Kafka's admin client ends a hanging transaction.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import click

from oncelog.cli.groups import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    check,
    latest_offsets,
    topic_partitions,
)
from oncelog.cli.output import (
    CliError,
    bootstrap_option,
    json_option,
    print_json,
    print_table,
    reports_errors,
)
from oncelog.cli.producers import iso_utc
from oncelog.client.connection import KafkaConnection, ProtocolClientError
from oncelog.protocol import codec
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode

OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort")
# DescribeTransactions lists the partitions of these states that still wait for a marker.
WAITING_FOR_MARKERS = frozenset(OPEN_STATES)
HANGING = "hanging"
ONGOING = "ongoing"


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Transaction:
    transactional_id: str
    producer_id: int
    producer_epoch: int | None
    state: str
    timeout_ms: int | None
    start_time_ms: int | None  # None: no transaction started yet
    start_time: str | None
    duration_ms: int | None  # only while the transaction is open
    partitions: list[str]


# -- DescribeTransactions, decoded here ------------------------------------------------------
# Kafka sends transaction_start_time -1 while no transaction has started (state Empty, and
# every error entry), but kio 0.6.5 refuses a negative non-nullable datetime_i64 ("Cannot
# parse negative timestamp"), so the generic codec cannot read such a response. v0 is small
# and flexible: read it with struct until the codec adapter handles this.

DESCRIBE_TRANSACTIONS_VERSION = 0


@dataclass(frozen=True)
class _DescribedTopic:
    topic: str
    partitions: list[int]


@dataclass(frozen=True)
class _DescribedState:
    error_code: int
    transactional_id: str
    transaction_state: str
    transaction_timeout: int
    transaction_start_time: int
    producer_id: int
    producer_epoch: int
    topics: list[_DescribedTopic]


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def fixed(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def string(self) -> str:
        size = self.uvarint() - 1
        text = self.data[self.pos : self.pos + max(size, 0)].decode("utf-8")
        self.pos += max(size, 0)
        return text

    def count(self) -> int:
        return max(self.uvarint() - 1, 0)

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()


def _describe_request(conn: KafkaConnection, ids: list[str]) -> list[_DescribedState]:
    conn.version_for(ApiKey.DESCRIBE_TRANSACTIONS)  # the broker must have the API
    api = codec.api_codec(ApiKey.DESCRIBE_TRANSACTIONS, DESCRIBE_TRANSACTIONS_VERSION)
    correlation_id = 0x7E57
    try:
        conn.send_raw(
            codec.encode_request(api, correlation_id, conn.client_id, {"transactional_ids": ids})
        )
        frame = conn.receive_frame()
    except OSError as exc:
        raise ProtocolClientError(f"DESCRIBE_TRANSACTIONS request failed: {exc}") from exc
    try:
        r = _Reader(frame)
        if r.fixed(">i") != correlation_id:
            raise ProtocolClientError("DescribeTransactions answered another request")
        r.skip_tags()  # response header v1
        r.fixed(">i")  # throttle time
        states = []
        for _ in range(r.count()):
            error_code, tid, state = r.fixed(">h"), r.string(), r.string()
            timeout, start = r.fixed(">i"), r.fixed(">q")
            pid, epoch = r.fixed(">q"), r.fixed(">h")
            topics = []
            for _ in range(r.count()):
                name = r.string()
                topics.append(_DescribedTopic(name, [r.fixed(">i") for _ in range(r.count())]))
                r.skip_tags()
            r.skip_tags()
            states.append(
                _DescribedState(error_code, tid, state, timeout, start, pid, epoch, topics)
            )
        return states
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise ProtocolClientError(f"unreadable DescribeTransactions response: {exc}") from exc


def list_transactions(
    conn: KafkaConnection,
    states: Sequence[str] = (),
    producer_ids: Sequence[int] = (),
    duration_filter_ms: int = -1,
) -> list[tuple[str, int, str]]:
    body: dict[str, Any] = {
        "state_filters": list(states),
        "producer_id_filters": list(producer_ids),
        "duration_filter": duration_filter_ms,
    }
    if duration_filter_ms >= 0 and conn.version_for(ApiKey.LIST_TRANSACTIONS) < 1:
        raise CliError("the broker does not support --duration-filter (ListTransactions v1)")
    response = conn.request(ApiKey.LIST_TRANSACTIONS, body)
    check(response.error_code, None, "list transactions")
    if response.unknown_state_filters:
        raise CliError(
            f"unknown transaction states: {', '.join(response.unknown_state_filters)}"
            f" (known: Empty, {', '.join(OPEN_STATES)}, CompleteCommit, CompleteAbort,"
            " PrepareEpochFence, Dead)"
        )
    return sorted(
        (t.transactional_id, t.producer_id, t.transaction_state)
        for t in response.transaction_states
    )


def describe_transactions(conn: KafkaConnection, ids: list[str]) -> dict[str, Transaction | None]:
    """Each id's description; None for TRANSACTIONAL_ID_NOT_FOUND."""
    if not ids:
        return {}
    response = _describe_request(conn, list(ids))
    now = now_ms()
    found: dict[str, Transaction | None] = {}
    for t in response:
        if t.error_code == ErrorCode.transactional_id_not_found:
            found[t.transactional_id] = None
            continue
        check(t.error_code, None, f"transactional id {t.transactional_id!r}")
        start = None if t.transaction_start_time < 0 else t.transaction_start_time
        found[t.transactional_id] = Transaction(
            transactional_id=t.transactional_id,
            producer_id=t.producer_id,
            producer_epoch=t.producer_epoch,
            state=t.transaction_state,
            timeout_ms=t.transaction_timeout,
            start_time_ms=start,
            start_time=None if start is None else iso_utc(start),
            duration_ms=(now - start)
            if start is not None and t.transaction_state in OPEN_STATES
            else None,
            partitions=[f"{d.topic}-{p}" for d in t.topics for p in sorted(d.partitions)],
        )
    return found


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
    bootstrap: str,
    states: tuple[str, ...],
    producer_ids: tuple[int, ...],
    duration_filter: int | None,
    as_json: bool,
) -> None:
    """Every transactional id the coordinator holds: producer id and epoch, state, and for
    an open transaction (Ongoing, PrepareCommit, PrepareAbort) how long it has run."""
    with KafkaConnection(bootstrap) as conn:
        listed = list_transactions(
            conn,
            list(states),
            list(producer_ids),
            -1 if duration_filter is None else duration_filter,
        )
        described = describe_transactions(conn, [tid for tid, _, _ in listed])
    rows = []
    for tid, pid, state in listed:
        d = described.get(tid)
        rows.append(
            d if d is not None else Transaction(tid, pid, None, state, None, None, None, None, [])
        )
    if as_json:
        print_json([asdict(r) for r in rows])
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
                r.transactional_id,
                r.producer_id,
                r.producer_epoch,
                r.state,
                r.timeout_ms,
                r.duration_ms,
                len(r.partitions) if r.state in OPEN_STATES else None,
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
def describe(bootstrap: str, transactional_id: str, as_json: bool) -> None:
    """State, producer id and epoch, timeout, start time and the partitions of the current
    transaction (while it is open: those still waiting for their marker)."""
    with KafkaConnection(bootstrap) as conn:
        found = describe_transactions(conn, [transactional_id]).get(transactional_id)
    if found is None:
        raise CliError(f"transactional id {transactional_id!r}: TRANSACTIONAL_ID_NOT_FOUND")
    if as_json:
        print_json(asdict(found))
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
                found.transactional_id,
                found.producer_id,
                found.producer_epoch,
                found.state,
                found.timeout_ms,
                found.start_time,
                found.duration_ms,
                ", ".join(found.partitions) or None,
            )
        ],
        right=["Producer id", "Epoch", "Timeout ms", "Duration ms"],
    )


# -- find-hanging -------------------------------------------------------------------------


@dataclass(frozen=True)
class OpenTransaction:
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int  # -1: no marker seen from any coordinator yet
    start_offset: int
    last_timestamp: int
    duration_minutes: int
    transactional_id: str | None
    coordinator_state: str | None  # what the coordinator says of this transactional id
    status: str  # HANGING or ONGOING
    reason: str


def find_open_transactions(
    conn: KafkaConnection, topic: str | None, partition: int | None, max_timeout_ms: int
) -> list[OpenTransaction]:
    """Kafka's find-hanging, with the coordinator's view kept for every candidate."""
    if topic is None:
        where = topic_partitions(conn, None)
    elif partition is None:
        where = topic_partitions(conn, [topic])
    else:
        where = {topic: [partition]}
    where = {t: ps for t, ps in where.items() if ps}
    if not where:
        return []
    response = conn.request(
        ApiKey.DESCRIBE_PRODUCERS,
        {"topics": [{"name": t, "partition_indexes": ps} for t, ps in sorted(where.items())]},
    )
    now = now_ms()
    candidates = []
    for t in response.topics:
        for p in t.partitions:
            check(p.error_code, p.error_message, f"producers of {t.name}-{p.partition_index}")
            for s in p.active_producers:
                if s.current_txn_start_offset >= 0 and now - s.last_timestamp > max_timeout_ms:
                    candidates.append((t.name, p.partition_index, s))
    if not candidates:
        return []
    pids = sorted({s.producer_id for _, _, s in candidates})
    owners = {pid: tid for tid, pid, _ in list_transactions(conn, producer_ids=pids)}
    described = describe_transactions(conn, sorted(set(owners.values())))
    found = []
    for name, index, s in sorted(candidates, key=lambda c: (c[0], c[1], c[2].producer_id)):
        tid = owners.get(s.producer_id)
        d = described.get(tid) if tid is not None else None
        if tid is None:
            status, reason = (
                HANGING,
                "the coordinator has no transactional id with this producer id",
            )
        elif d is None:
            status, reason = HANGING, f"the coordinator does not know {tid!r}"
        elif d.state in WAITING_FOR_MARKERS and f"{name}-{index}" in d.partitions:
            status, reason = (
                ONGOING,
                (f"{d.state} at the coordinator, which will end it (timeout {d.timeout_ms} ms)"),
            )
        else:
            status, reason = HANGING, f"{d.state} at the coordinator, without this partition"
        found.append(
            OpenTransaction(
                topic=name,
                partition=index,
                producer_id=s.producer_id,
                producer_epoch=s.producer_epoch,
                coordinator_epoch=s.coordinator_epoch,
                start_offset=s.current_txn_start_offset,
                last_timestamp=s.last_timestamp,
                duration_minutes=(now - s.last_timestamp) // 60_000,
                transactional_id=tid,
                coordinator_state=None if d is None else d.state,
                status=status,
                reason=reason,
            )
        )
    return found


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
    bootstrap: str,
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
    with KafkaConnection(bootstrap) as conn:
        found = find_open_transactions(conn, topic, partition, max_transaction_timeout * 60_000)
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


@dataclass(frozen=True)
class AbortResult:
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    last_stable_offset_before: int
    last_stable_offset_after: int
    high_watermark: int


def _producer_at(conn: KafkaConnection, topic: str, partition: int, start_offset: int) -> Any:
    response = conn.request(
        ApiKey.DESCRIBE_PRODUCERS, {"topics": [{"name": topic, "partition_indexes": [partition]}]}
    )
    (t,) = response.topics
    (p,) = t.partitions
    check(p.error_code, p.error_message, f"producers of {topic}-{partition}")
    for state in p.active_producers:
        if state.current_txn_start_offset == start_offset:
            return state
    raise CliError(f"no open transaction starts at offset {start_offset} on {topic}-{partition}")


def _still_tracked(
    conn: KafkaConnection, topic: str, partition: int, producer_id: int
) -> str | None:
    """Why the coordinator would still end this transaction itself, or None."""
    owners = list_transactions(conn, producer_ids=[producer_id])
    for tid, _, _ in owners:
        d = describe_transactions(conn, [tid]).get(tid)
        if (
            d is not None
            and d.state in WAITING_FOR_MARKERS
            and f"{topic}-{partition}" in d.partitions
        ):
            return (
                f"transactional id {tid!r} is {d.state} at the coordinator with {topic}-"
                f"{partition} (timeout {d.timeout_ms} ms): it will end this transaction itself"
            )
    return None


def write_abort_marker(
    conn: KafkaConnection,
    topic: str,
    partition: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
) -> None:
    response = conn.request(
        ApiKey.WRITE_TXN_MARKERS,
        {
            "markers": [
                {
                    "producer_id": producer_id,
                    "producer_epoch": producer_epoch,
                    "transaction_result": False,
                    "coordinator_epoch": coordinator_epoch,
                    "topics": [{"name": topic, "partition_indexes": [partition]}],
                }
            ]
        },
    )
    results = [
        (m.producer_id, t.name, p.partition_index, p.error_code)
        for m in response.markers
        for t in m.topics
        for p in t.partitions
    ]
    if [r[:3] for r in results] != [(producer_id, topic, partition)]:
        raise CliError(f"WriteTxnMarkers answered for other partitions: {results}")
    check(results[0][3], None, f"abort marker for producer {producer_id} on {topic}-{partition}")


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
    bootstrap: str,
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
    with KafkaConnection(bootstrap) as conn:
        if start_offset is not None:
            state = _producer_at(conn, topic, partition, start_offset)
            producer_id, producer_epoch = state.producer_id, state.producer_epoch
            coordinator_epoch = state.coordinator_epoch
        elif producer_epoch is None or coordinator_epoch is None:
            raise click.UsageError("--producer-id needs --producer-epoch and --coordinator-epoch")
        assert (
            producer_id is not None and producer_epoch is not None and coordinator_epoch is not None
        )
        # A transaction started by a new producer id that never saw a marker reports
        # coordinator epoch -1; 0 is no newer than any coordinator's epoch (as Kafka's tool).
        coordinator_epoch = max(coordinator_epoch, 0)
        if not force:
            tracked = _still_tracked(conn, topic, partition, producer_id)
            if tracked:
                raise CliError(f"not aborting: {tracked} (--force overrides)")
        where = {topic: [partition]}
        before = latest_offsets(conn, where, READ_COMMITTED)[(topic, partition)]
        write_abort_marker(conn, topic, partition, producer_id, producer_epoch, coordinator_epoch)
        after = latest_offsets(conn, where, READ_COMMITTED)[(topic, partition)]
        high = latest_offsets(conn, where, READ_UNCOMMITTED)[(topic, partition)]
    result = AbortResult(
        topic, partition, producer_id, producer_epoch, coordinator_epoch, before, after, high
    )
    if as_json:
        print_json(asdict(result))
        return
    click.echo(
        f"Aborted the transaction of producer {producer_id} (epoch {producer_epoch}) on "
        f"{topic}-{partition}: last stable offset {before} -> {after} "
        f"(high watermark {high})."
    )
