"""Open and hanging transactions (KIP-664's find-hanging and abort), built on :class:`Admin`.

An open transaction holds its partition's last stable offset: read_committed consumers stop
there until a marker ends it. The coordinator writes that marker itself, unless it has lost
track of the transaction (a coordinator bug, a lost __transaction_state, a producer id
reused): such a transaction *hangs* for ever, and only a manual abort marker releases the
partition. As Kafka's ``kafka-transactions.sh``:

1. DescribeProducers on every partition searched: an open transaction is a producer with a
   current transaction start offset that has been silent on the partition for longer than
   the largest transaction timeout in use (its last append or marker).
2. ListTransactions by producer id, then DescribeTransactions: it hangs if no transactional
   id has that producer id, if the coordinator no longer knows the id, or if the id's
   current transaction (Ongoing, PrepareCommit, PrepareAbort) does not include the
   partition. Otherwise the coordinator still tracks it and will end it itself: aborting it
   by hand would break its atomicity (the producer could still add records to the same
   transaction and commit only those).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from oncelog.client.admin import (
    Admin,
    AdminError,
    Isolation,
    OffsetSpec,
    ProducerState,
    Transaction,
)
from oncelog.transactions.state import TxnState

__all__ = [
    "HANGING",
    "ONGOING",
    "AbortResult",
    "OpenTransaction",
    "abort_transaction",
    "classify",
    "find_open_transactions",
    "producer_at",
    "still_tracked",
]

HANGING = "hanging"
ONGOING = "ongoing"
# DescribeTransactions lists, in these states, the partitions still waiting for a marker.
WAITING_FOR_MARKERS = frozenset(
    s.kafka_name for s in (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
)


@dataclass(frozen=True)
class OpenTransaction:
    """One producer's open transaction on one partition, and what the coordinator says."""

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


@dataclass(frozen=True)
class AbortResult:
    """What an abort marker changed: the partition's last stable offset before and after."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    last_stable_offset_before: int
    last_stable_offset_after: int
    high_watermark: int


def classify(
    partition: str, transactional_id: str | None, described: Transaction | None
) -> tuple[str, str]:
    """(HANGING or ONGOING, why) for an open transaction on ``partition`` ("topic-N") whose
    producer id the coordinator maps to ``transactional_id``, described as ``described``."""
    if transactional_id is None:
        return HANGING, "the coordinator has no transactional id with this producer id"
    if described is None:
        return HANGING, f"the coordinator does not know {transactional_id!r}"
    if described.state in WAITING_FOR_MARKERS and partition in described.partitions:
        return (
            ONGOING,
            f"{described.state} at the coordinator, which will end it "
            f"(timeout {described.timeout_ms} ms)",
        )
    return HANGING, f"{described.state} at the coordinator, without this partition"


def find_open_transactions(
    admin: Admin,
    topic: str | None,
    partition: int | None,
    max_timeout_ms: int,
    now_ms: int,
) -> list[OpenTransaction]:
    """Every open transaction silent for longer than ``max_timeout_ms`` on the partitions
    searched (one partition, one topic, or every topic), classified by :func:`classify`."""
    if topic is None:
        where = admin.topic_partitions(None)
    elif partition is None:
        where = admin.topic_partitions([topic])
    else:
        where = {topic: [partition]}
    candidates = [
        s
        for states in admin.describe_producers(where).values()
        for s in states
        if s.current_txn_start_offset is not None and now_ms - s.last_timestamp > max_timeout_ms
    ]
    if not candidates:
        return []
    listed = admin.list_transactions(producer_ids=sorted({s.producer_id for s in candidates}))
    owners = {t.producer_id: t.transactional_id for t in listed}
    described = admin.describe_transactions(sorted(set(owners.values())))
    found = []
    for s in sorted(candidates, key=lambda s: (s.topic, s.partition, s.producer_id)):
        tid = owners.get(s.producer_id)
        d = described.get(tid) if tid is not None else None
        status, reason = classify(f"{s.topic}-{s.partition}", tid, d)
        found.append(_open(s, now_ms, tid, d, status, reason))
    return found


def _open(
    s: ProducerState,
    now_ms: int,
    tid: str | None,
    d: Transaction | None,
    status: str,
    reason: str,
) -> OpenTransaction:
    assert s.current_txn_start_offset is not None
    return OpenTransaction(
        topic=s.topic,
        partition=s.partition,
        producer_id=s.producer_id,
        producer_epoch=s.producer_epoch,
        coordinator_epoch=-1 if s.coordinator_epoch is None else s.coordinator_epoch,
        start_offset=s.current_txn_start_offset,
        last_timestamp=s.last_timestamp,
        duration_minutes=(now_ms - s.last_timestamp) // 60_000,
        transactional_id=tid,
        coordinator_state=None if d is None else d.state,
        status=status,
        reason=reason,
    )


def producer_at(admin: Admin, topic: str, partition: int, start_offset: int) -> ProducerState:
    """The producer whose open transaction on the partition starts at ``start_offset``."""
    states = admin.describe_producers({topic: [partition]}).get((topic, partition), [])
    for state in states:
        if state.current_txn_start_offset == start_offset:
            return state
    raise AdminError(f"no open transaction starts at offset {start_offset} on {topic}-{partition}")


def still_tracked(admin: Admin, topic: str, partition: int, producer_id: int) -> str | None:
    """Why the coordinator would still end this producer's transaction on the partition
    itself, or None if no coordinator tracks it there."""
    for listing in admin.list_transactions(producer_ids=[producer_id]):
        tid = listing.transactional_id
        d = admin.describe_transactions([tid]).get(tid)
        if classify(f"{topic}-{partition}", tid, d)[0] == ONGOING:
            assert d is not None
            return (
                f"transactional id {tid!r} is {d.state} at the coordinator with {topic}-"
                f"{partition} (timeout {d.timeout_ms} ms): it will end this transaction itself"
            )
    return None


def abort_transaction(
    admin: Admin,
    topic: str,
    partition: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
) -> AbortResult:
    """Write an ABORT marker for the producer's open transaction on the partition, and
    report the last stable offset before and after. The caller has checked
    :func:`still_tracked` (or was told to force)."""
    # A transaction started by a new producer id that never saw a marker reports
    # coordinator epoch -1; 0 is no newer than any coordinator's epoch (as Kafka's tool).
    coordinator_epoch = max(coordinator_epoch, 0)
    where: Mapping[str, list[int]] = {topic: [partition]}
    key = (topic, partition)
    before = admin.list_offsets(where, OffsetSpec.LATEST, Isolation.READ_COMMITTED)[key]
    admin.write_abort_marker(topic, partition, producer_id, producer_epoch, coordinator_epoch)
    after = admin.list_offsets(where, OffsetSpec.LATEST, Isolation.READ_COMMITTED)[key]
    high = admin.list_offsets(where, OffsetSpec.LATEST)[key]
    return AbortResult(
        topic, partition, producer_id, producer_epoch, coordinator_epoch, before, after, high
    )
