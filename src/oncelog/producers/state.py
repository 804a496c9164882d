"""Producer state of one partition: who wrote what, so retries are answered, not re-appended.

A pure state machine (no I/O, no clock): the broker passes each batch header in and gets a
decision back. Following Kafka's ``ProducerStateManager``/``ProducerAppendInfo``, a batch is
validated against an immutable entry, and the new entry is built and stored only by
``commit``, after the log has appended the batch and assigned its offsets. A refused or
failed append therefore leaves no trace.

Rules (Kafka 4.x ``ProducerAppendInfo.checkProducerEpoch``/``checkSequence`` and
``UnifiedLog.analyzeAndValidateProducerState``), in the order Kafka applies them:

1. Duplicate: same epoch and the same first and last sequence as one of the 5 cached
   batches. Answered with that batch's own offsets and timestamp; nothing is appended.
2. Epoch below the current one: INVALID_PRODUCER_EPOCH, for every Produce version (Kafka
   maps PRODUCER_FENCED to INVALID_PRODUCER_EPOCH for old InitProducerId/EndTxn/AddPartitions
   versions only; the produce path has thrown InvalidProducerEpochException, code 47, since
   KIP-588, and code 47 was already the wire code before). No produce version is needed.
3. Epoch above the current one: the batch must start at sequence 0, else
   OUT_OF_ORDER_SEQUENCE_NUMBER. The epoch is learnt from the batch itself: the coordinator
   bumps it (InitProducerId, KIP-360) and partitions only see the next batch.
4. Same epoch: the first sequence must be last + 1 (2**31-1 wraps to 0), else
   OUT_OF_ORDER_SEQUENCE_NUMBER. That covers gaps and retries older than the 5-batch window.
5. Unknown producer (no entry, e.g. expired): any sequence is accepted. Before KIP-360
   (Kafka 2.5, KAFKA-8710) this was UNKNOWN_PRODUCER_ID; it was dropped because the state of
   a producer whose batches retention deleted is not an error the producer can fix.
6. A non-transactional batch while the producer's transaction is open: INVALID_TXN_STATE.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Set
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple, Protocol

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import BatchHeader

__all__ = [
    "BATCHES_TO_RETAIN",
    "NO_PRODUCER_EPOCH",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "Append",
    "BatchMetadata",
    "CompletedTxn",
    "Decision",
    "Duplicate",
    "Pending",
    "PendingBatch",
    "PendingMarker",
    "ProducerStateEntry",
    "ProducerStateManager",
    "Refuse",
    "SnapshotEntries",
    "StalePending",
    "TxnMarker",
    "in_sequence",
]

BATCHES_TO_RETAIN = 5  # Kafka's hard-coded window: clients keep at most 5 requests in flight
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = (1 << 63) - 1  # "no entry": later than any timestamp
_INT32_MAX = (1 << 31) - 1


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """Whether ``next_seq`` directly follows ``last_seq`` (2**31-1 is followed by 0)."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


class BatchMetadata(NamedTuple):
    """What a retry needs back: the sequences it carried and the offsets the log gave it.

    Named tuples, this and the entry: replaying a log tail builds one of each per batch,
    and a frozen dataclass costs several times a tuple to build (see ``BatchHeader``)."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class ProducerStateEntry(NamedTuple):
    """One producer's state on one partition; immutable, so validation cannot change it."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: tuple[BatchMetadata, ...] = ()  # oldest first, at most BATCHES_TO_RETAIN
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The cached batch with exactly this sequence range, if any (the caller checks the
        epoch: batches of an older epoch are never cached)."""
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def with_batch(
        self, producer_epoch: int, batch: BatchMetadata, transactional: bool
    ) -> ProducerStateEntry:
        """The entry after appending ``batch``; a new epoch starts a fresh window."""
        kept = self.batches if producer_epoch == self.producer_epoch else ()
        txn_first = self.current_txn_first_offset
        if txn_first is None and transactional:
            txn_first = batch.first_offset
        return ProducerStateEntry(
            self.producer_id,
            producer_epoch,
            (*kept, batch)[-BATCHES_TO_RETAIN:],
            self.coordinator_epoch,
            batch.timestamp,
            txn_first,
        )

    def with_marker(
        self, producer_epoch: int, coordinator_epoch: int, timestamp: int
    ) -> ProducerStateEntry:
        """The entry after a transaction marker: the transaction is closed, the batches stay
        unless the marker carries a new epoch."""
        kept = self.batches if producer_epoch == self.producer_epoch else ()
        return ProducerStateEntry(
            self.producer_id, producer_epoch, kept, coordinator_epoch, timestamp, None
        )


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """The content of a transaction marker's control record."""

    committed: bool
    coordinator_epoch: int


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker closed: what the aborted-transaction index needs."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


@dataclass(frozen=True, slots=True)
class PendingBatch:
    """A validated data batch waiting for its offsets. ``base`` is the entry it was
    validated against, so a commit on changed state is caught instead of applied."""

    producer_id: int
    base: ProducerStateEntry | None
    producer_epoch: int
    first_seq: int
    last_seq: int
    offset_delta: int
    timestamp: int
    transactional: bool


@dataclass(frozen=True, slots=True)
class PendingMarker:
    """A validated transaction marker waiting for its offset."""

    producer_id: int
    base: ProducerStateEntry | None
    producer_epoch: int
    marker: TxnMarker
    timestamp: int


Pending = PendingBatch | PendingMarker


@dataclass(frozen=True, slots=True)
class Append:
    """Append the batch, then ``commit(pending, first_offset, last_offset)``."""

    pending: Pending


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A retry of a cached batch: answer success with the original offsets, append nothing."""

    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class Refuse:
    """Answer the partition with this error; append nothing."""

    error_code: ErrorCode
    message: str


Decision = Append | Duplicate | Refuse


class StalePending(RuntimeError):
    """The broker committed a pending update after the producer's state changed: a wiring
    bug on our side (validate, append and commit must run as one step), never the client's."""


class SnapshotEntries(Protocol):
    """Producer entries loaded from a snapshot and decoded only when asked for."""

    count: int
    oldest_idle_timestamp: int  # no entry without an open transaction is older
    open_transactions: Mapping[int, int]  # producer id -> first offset of its open txn

    def get(self, producer_id: int) -> ProducerStateEntry | None: ...

    def producer_ids(self) -> Iterator[int]: ...

    def idle_candidates(self) -> Iterator[tuple[int, int]]:
        """(producer id, last timestamp) of the entries without an open transaction."""


class ProducerStateManager:
    """Producer entries of one partition; each partition validates on its own.

    Entries loaded from a snapshot stay there, undecoded, until their producer writes (or
    a replayed batch names it): then the entry is decoded once and kept with the others.
    ``shadowed`` lists the snapshot's producers so taken over, or expired. Reading an
    entry (``entries``) decodes it without keeping it, so describing or scanning a
    partition with a million idle producers does not bring them all into memory."""

    def __init__(
        self, entries: Iterable[ProducerStateEntry] = (), snapshot: SnapshotEntries | None = None
    ) -> None:
        self._entries: dict[int, ProducerStateEntry] = {}
        self._ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.snapshot = snapshot
        self._shadowed: set[int] = set()
        # No snapshot-held entry without an open transaction is idle since before this.
        self.snapshot_oldest_idle = NO_TIMESTAMP
        for entry in entries:
            self._put(entry)
        if snapshot is not None:
            if self._entries:  # a snapshot entry taken over must be shadowed: see _take
                raise ValueError("a manager starts from entries or from a snapshot, not both")
            self._ongoing.update(snapshot.open_transactions)
            self.snapshot_oldest_idle = snapshot.oldest_idle_timestamp

    @property
    def entries(self) -> Mapping[int, ProducerStateEntry]:
        """Every producer's entry (those still in the snapshot decoded on access, not kept)."""
        return _Entries(self)

    @property
    def shadowed(self) -> Set[int]:
        return self._shadowed

    @property
    def open_transactions(self) -> Mapping[int, int]:
        """Producer id -> first offset of its open transaction, for every producer."""
        return MappingProxyType(self._ongoing)

    def decoded_entries(self) -> list[ProducerStateEntry]:
        """The entries not (or no longer) held by the snapshot alone."""
        return list(self._entries.values())

    def _peek(self, producer_id: int) -> ProducerStateEntry | None:
        """The producer's entry, decoded from the snapshot if it is still there (not kept)."""
        entry = self._entries.get(producer_id)
        if entry is not None or self.snapshot is None or producer_id in self._shadowed:
            return entry
        return self.snapshot.get(producer_id)

    def _take(self, producer_id: int) -> ProducerStateEntry | None:
        """The producer's entry, taken over from the snapshot if it is still there: the
        validate -> commit steps compare entries by identity, so it must be kept."""
        entry = self._entries.get(producer_id)
        if entry is not None or self.snapshot is None or producer_id in self._shadowed:
            return entry
        entry = self.snapshot.get(producer_id)
        if entry is not None:
            self._entries[producer_id] = entry
            self._shadowed.add(producer_id)
        return entry

    def held(self, producer_id: int) -> ProducerStateEntry | None:
        """The producer's entry, kept from now on (taken over from the snapshot): for a
        caller that compares it by identity with a later look, as a transactional write's
        admission does to see that no marker came in between. ``entries`` decodes a
        snapshot-held entry anew on each access: never the same object twice."""
        return self._take(producer_id)

    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction (the LSO cannot pass it)."""
        return min(self._ongoing.values(), default=None)

    # --- live path: validate, then commit after the log append ---

    def validate(self, header: BatchHeader, *, from_client: bool = True) -> Decision:
        """Decide on a data batch without changing anything.

        ``from_client=False`` is Kafka's coordinator origin (e.g. transactional offset
        commits): epoch and transaction checks only, no sequences, no duplicate lookup.
        """
        if not header.has_producer_id:
            raise ValueError("batches without a producer id carry no producer state")
        if header.is_control:
            raise ValueError("control batches go through validate_marker")
        pid, epoch = header.producer_id, header.producer_epoch
        first_seq, last_seq = header.base_sequence, header.last_sequence
        base = self._take(pid)
        entry = _or_empty(base, pid)
        if from_client and epoch == entry.producer_epoch:
            cached = entry.find_duplicate(first_seq, last_seq)
            if cached is not None:
                return Duplicate(cached.first_offset, cached.last_offset, cached.timestamp)
        refusal = _check_epoch(entry, epoch)
        if refusal is None and from_client:
            refusal = _check_sequence(entry, epoch, first_seq)
        if refusal is not None:
            return refusal
        if entry.current_txn_first_offset is not None and not header.is_transactional:
            return Refuse(
                ErrorCode.invalid_txn_state,
                f"producer {pid} sent a non-transactional batch while its transaction started "
                f"at offset {entry.current_txn_first_offset} is open",
            )
        return Append(
            PendingBatch(
                pid,
                base,
                epoch,
                first_seq,
                last_seq,
                header.last_offset_delta,
                header.max_timestamp,
                header.is_transactional,
            )
        )

    def validate_marker(
        self, producer_id: int, producer_epoch: int, marker: TxnMarker, timestamp: int
    ) -> Decision:
        """Decide on a transaction marker (WriteTxnMarkers) without changing anything.

        Kafka's transactions v0/v1 rules: a marker may carry the current or a newer epoch,
        and a coordinator epoch older than the last one seen is a zombie coordinator.
        """
        base = self._take(producer_id)
        entry = _or_empty(base, producer_id)
        refusal = _check_epoch(entry, producer_epoch)
        if refusal is not None:
            return refusal
        if marker.coordinator_epoch < entry.coordinator_epoch:
            return Refuse(
                ErrorCode.transaction_coordinator_fenced,
                f"marker for producer {producer_id} from coordinator epoch "
                f"{marker.coordinator_epoch}, but epoch {entry.coordinator_epoch} already "
                "wrote one",
            )
        return Append(PendingMarker(producer_id, base, producer_epoch, marker, timestamp))

    def commit(
        self, pending: Pending, first_offset: int, last_offset: int, *, timestamp: int | None = None
    ) -> CompletedTxn | None:
        """Apply a validated batch or marker at the offsets the log gave it.

        ``timestamp`` replaces the batch's max timestamp on LogAppendTime topics (a later
        duplicate is answered with it, as Kafka does). Returns the transaction a marker closed.
        """
        current = self._take(pending.producer_id)
        if current is not pending.base:
            raise StalePending(
                f"producer {pending.producer_id} changed between validate and commit"
            )
        entry = _or_empty(current, pending.producer_id)
        ts = pending.timestamp if timestamp is None else timestamp
        if isinstance(pending, PendingBatch):
            if last_offset - first_offset != pending.offset_delta:
                raise ValueError(
                    f"offsets {first_offset}..{last_offset} do not span the batch's "
                    f"last offset delta {pending.offset_delta}"
                )
            batch = BatchMetadata(
                pending.first_seq, pending.last_seq, first_offset, last_offset, ts
            )
            self._put(entry.with_batch(pending.producer_epoch, batch, pending.transactional))
            return None
        return self._close_txn(entry, pending.producer_epoch, pending.marker, first_offset, ts)

    # --- recovery: apply what the log holds ---

    def replay(
        self, header: BatchHeader, *, marker: TxnMarker | None = None
    ) -> CompletedTxn | None:
        """Apply a stored batch (offsets from its header) without validating it.

        Kafka's replication origin: the log is the truth, including epoch changes in either
        direction. A control batch needs its decoded ``marker``; one without (a marker the
        cleaner emptied) changes nothing, as in Kafka.
        """
        if not header.has_producer_id:
            return None
        if header.is_control:
            if marker is None:
                return None
            entry = _or_empty(self._take(header.producer_id), header.producer_id)
            return self._close_txn(
                entry, header.producer_epoch, marker, header.base_offset, header.max_timestamp
            )
        self.replay_data(
            header.producer_id,
            header.producer_epoch,
            BatchMetadata(
                header.base_sequence,
                header.last_sequence,
                header.base_offset,
                header.last_offset,
                header.max_timestamp,
            ),
            header.is_transactional,
        )
        return None

    def replay_data(
        self, producer_id: int, producer_epoch: int, batch: BatchMetadata, transactional: bool
    ) -> None:
        """``replay`` of a stored data batch, given the fields it reads (Kafka's
        ``appendDataBatch``): a log tail's replay reads them straight from the bytes."""
        entry = self._take(producer_id)
        if entry is None:  # what _or_empty(...).with_batch(...) gives, built once
            txn_first = batch.first_offset if transactional else None
            entry = ProducerStateEntry(
                producer_id, producer_epoch, (batch,), -1, batch.timestamp, txn_first
            )
        else:
            entry = entry.with_batch(producer_epoch, batch, transactional)
        self._put(entry)

    # --- housekeeping ---

    def remove_expired(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Drop producers idle for ``expiration_ms`` or more (``producer.id.expiration.ms``);
        never one with an open transaction. Returns the ids dropped.

        Idle is measured from the last batch's max timestamp, as Kafka does.
        """
        expired = [
            pid
            for pid, entry in self._entries.items()
            if entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp >= expiration_ms
        ]
        for pid in expired:
            del self._entries[pid]
        if self.snapshot is not None and now_ms - self.snapshot_oldest_idle >= expiration_ms:
            expired += self._expire_from_snapshot(self.snapshot, now_ms, expiration_ms)
        return expired

    def _expire_from_snapshot(
        self, snapshot: SnapshotEntries, now_ms: int, expiration_ms: int
    ) -> list[int]:
        """Expire snapshot-held producers without decoding them; remember the oldest one
        left, so the next call skips the snapshot until someone there can be idle."""
        expired = []
        oldest = NO_TIMESTAMP
        for pid, last_timestamp in snapshot.idle_candidates():
            if pid in self._shadowed:
                continue
            if now_ms - last_timestamp >= expiration_ms:
                self._shadowed.add(pid)
                expired.append(pid)
            else:
                oldest = min(oldest, last_timestamp)
        self.snapshot_oldest_idle = oldest
        return expired

    def _put(self, entry: ProducerStateEntry) -> None:
        self._entries[entry.producer_id] = entry
        if entry.current_txn_first_offset is None:
            self._ongoing.pop(entry.producer_id, None)
        else:
            self._ongoing[entry.producer_id] = entry.current_txn_first_offset

    def _close_txn(
        self, entry: ProducerStateEntry, epoch: int, marker: TxnMarker, offset: int, timestamp: int
    ) -> CompletedTxn | None:
        first = entry.current_txn_first_offset
        self._put(entry.with_marker(epoch, marker.coordinator_epoch, timestamp))
        # A marker for a producer with nothing open on this partition closes nothing.
        if first is None:
            return None
        return CompletedTxn(entry.producer_id, first, offset, aborted=not marker.committed)


class _Entries(Mapping[int, ProducerStateEntry]):
    """A read-only view of every entry, decoded and snapshot-held alike."""

    def __init__(self, manager: ProducerStateManager) -> None:
        self._manager = manager

    def __getitem__(self, producer_id: int) -> ProducerStateEntry:
        entry = self._manager._peek(producer_id)
        if entry is None:
            raise KeyError(producer_id)
        return entry

    def __iter__(self) -> Iterator[int]:
        manager = self._manager
        yield from list(manager._entries)
        if manager.snapshot is not None:
            for pid in manager.snapshot.producer_ids():
                if pid not in manager._shadowed:
                    yield pid

    def __len__(self) -> int:
        manager = self._manager
        in_snapshot = 0 if manager.snapshot is None else manager.snapshot.count
        return len(manager._entries) + in_snapshot - len(manager._shadowed)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return dict(self.items()) == dict(other.items())


def _or_empty(entry: ProducerStateEntry | None, producer_id: int) -> ProducerStateEntry:
    """Kafka validates an unknown producer against an empty entry (no epoch, no batches)."""
    return entry if entry is not None else ProducerStateEntry(producer_id)


def _check_epoch(entry: ProducerStateEntry, epoch: int) -> Refuse | None:
    if epoch < entry.producer_epoch:
        return Refuse(
            ErrorCode.invalid_producer_epoch,
            f"producer {entry.producer_id} sent epoch {epoch}, below its current epoch "
            f"{entry.producer_epoch}",
        )
    return None


def _check_sequence(entry: ProducerStateEntry, epoch: int, first_seq: int) -> Refuse | None:
    if entry.producer_epoch == NO_PRODUCER_EPOCH:
        return None  # unknown producer: accept any sequence (KIP-360)
    if epoch != entry.producer_epoch:
        if first_seq != 0:
            return Refuse(
                ErrorCode.out_of_order_sequence_number,
                f"producer {entry.producer_id} started epoch {epoch} at sequence {first_seq}; "
                "a new epoch must start at 0",
            )
        return None
    if not in_sequence(entry.last_seq, first_seq):
        expected = 0 if entry.last_seq in (NO_SEQUENCE, _INT32_MAX) else entry.last_seq + 1
        return Refuse(
            ErrorCode.out_of_order_sequence_number,
            f"producer {entry.producer_id} epoch {epoch} sent sequence {first_seq}, expected "
            f"{expected} (a gap, or a retry older than the last {BATCHES_TO_RETAIN} batches)",
        )
    return None
