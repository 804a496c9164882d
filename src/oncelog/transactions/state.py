"""Transaction metadata of one transactional id, and its checked state transitions.

Pure and immutable (no I/O, no clock). Following Kafka's ``TransactionMetadata``
(``core/.../coordinator/transaction/TransactionMetadata.scala``, now
``transaction-coordinator/.../TransactionMetadata.java``), a change is *prepared* as a new
``TransactionMetadata`` wrapped in a ``TxnTransition``; the coordinator writes it to
``__transaction_state`` and only the replay of that record makes it current.

Transitions (the table below lists, for each state, the states it may be entered from):

- EMPTY            <- EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT   InitProducerId (epoch bump or new id)
- ONGOING          <- ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT   AddPartitions/AddOffsets
- PREPARE_COMMIT   <- ONGOING                                  EndTxn(commit)
- PREPARE_ABORT    <- ONGOING, PREPARE_EPOCH_FENCE             EndTxn(abort), fencing abort
- COMPLETE_COMMIT  <- PREPARE_COMMIT                           all commit markers written
- COMPLETE_ABORT   <- PREPARE_ABORT                            all abort markers written
- DEAD             <- EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT   transactional.id.expiration.ms
- PREPARE_EPOCH_FENCE <- ONGOING                               never persisted: see below

PREPARE_EPOCH_FENCE is Kafka's in-memory step "bump the epoch, then abort": it is never
written. ``prepare_fence_and_abort`` goes ONGOING -> PREPARE_EPOCH_FENCE -> PREPARE_ABORT
in one prepared transition (both steps checked against the table) and the record written
is the PREPARE_ABORT with the bumped epoch. Likewise DEAD is never written as a value: it
is the tombstone that removes the id.

An invalid transition is *our* bug, never the client's: handlers check state first and
answer with a Kafka error code. :class:`~oncelog.state_machines.IllegalTransition` names
the id, the state and the target.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from operator import attrgetter
from types import MappingProxyType
from typing import Any

from oncelog.state_machines import IllegalTransition

__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "SHORT_MAX",
    "VALID_PREVIOUS_STATES",
    "TopicPartition",
    "TransactionMetadata",
    "TxnState",
    "TxnTransition",
    "is_epoch_exhausted",
    "is_partial_expected_producer",
]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SHORT_MAX = 32767

TopicPartition = tuple[str, int]


def is_partial_expected_producer(expected_producer_id: int, expected_epoch: int) -> bool:
    """Exactly one of InitProducerId's expected producer id and epoch given (v3+; -1 when
    absent): INVALID_REQUEST, with or without a transactional id, before the coordinator
    decides anything (Kafka's KafkaApis.handleInitProducerIdRequest)."""
    return (expected_producer_id == NO_PRODUCER_ID) != (expected_epoch == NO_PRODUCER_EPOCH)


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka's ``isEpochExhausted``: ``epoch >= Short.MAX_VALUE - 1``.

    Clients never get 32767: that value is kept so the coordinator can always fence the
    holder of 32766 (a fencing abort bumps the epoch once more).
    """
    return epoch >= SHORT_MAX - 1


class TxnState(enum.Enum):
    """Transaction states; ``id`` is the ``TransactionStatus`` byte in the log, ``kafka_name``
    is what DescribeTransactions/ListTransactions show."""

    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    def __init__(self, state_id: int, kafka_name: str) -> None:
        self.id = state_id
        self.kafka_name = kafka_name

    # Members are singletons compared by identity, so the identity hash is Enum's in all
    # but speed: Enum's own is a Python call, and every transition hashes two states.
    __hash__ = object.__hash__

    @classmethod
    def from_id(cls, state_id: int) -> TxnState:
        for state in cls:
            if state.id == state_id:
                return state
        raise ValueError(f"unknown transaction status {state_id}")

    @classmethod
    def from_kafka_name(cls, name: str) -> TxnState | None:
        for state in cls:
            if state.kafka_name == name:
                return state
        return None

    @property
    def is_expiration_allowed(self) -> bool:
        """Idle ids in these states may be expired (Kafka's ``isExpirationAllowed``)."""
        return self in _EXPIRABLE

    @property
    def is_prepared(self) -> bool:
        """A decision is persisted and markers are (being) written."""
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


_EXPIRABLE = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})

_S = TxnState
VALID_PREVIOUS_STATES: Mapping[TxnState, frozenset[TxnState]] = MappingProxyType({
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
})  # fmt: skip
del _S


@dataclass(frozen=True, slots=True)
class TransactionMetadata:
    """Everything the coordinator knows about one transactional id.

    ``previous_producer_id`` is the producer id before the last transition (Kafka sets it on
    every transition, so it differs from ``producer_id`` only right after a rotation).
    ``next_producer_id`` is Kafka's transactions-v2 field; v1 never sets it (kept so records
    written by Kafka 4 load). ``last_producer_epoch`` lets a KIP-360 InitProducerId retry get
    its answer again; -1 when a new instance fenced the old one.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TxnState
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: frozenset[TopicPartition] = frozenset()
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    client_transaction_version: int = 0

    def __post_init__(self) -> None:
        if self.state is TxnState.EMPTY and self.partitions:
            raise IllegalTransition(
                f"transactional id {self.transactional_id!r}: state Empty cannot hold "
                f"partitions {sorted(self.partitions)}"
            )

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    def sorted_partitions(self) -> list[TopicPartition]:
        return sorted(self.partitions)

    # --- prepared transitions: each returns a TxnTransition, nothing changes here ---

    def prepare_increment_epoch(
        self, txn_timeout_ms: int, epoch: int, last_epoch: int, now_ms: int
    ) -> TxnTransition:
        """InitProducerId on an idle id: the epoch the caller chose, partitions cleared.

        The caller (the coordinator) decides ``epoch``/``last_epoch`` from Kafka's KIP-360
        rules; this checks the table and that the epoch moves by at most one.
        """
        if epoch not in (self.producer_epoch, self.producer_epoch + 1) or epoch > SHORT_MAX:
            raise IllegalTransition(
                f"transactional id {self.transactional_id!r}: epoch {self.producer_epoch} "
                f"cannot move to {epoch}"
            )
        return self._to(
            TxnState.EMPTY,
            producer_epoch=epoch,
            last_producer_epoch=last_epoch,
            txn_timeout_ms=txn_timeout_ms,
            partitions=frozenset(),
            txn_start_timestamp=-1,
            txn_last_update_timestamp=now_ms,
        )

    def prepare_producer_id_rotation(
        self, new_producer_id: int, txn_timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TxnTransition:
        """Epoch exhausted: a new producer id at epoch 0 (Kafka's ``prepareProducerIdRotation``)."""
        if new_producer_id < 0 or new_producer_id == self.producer_id:
            raise IllegalTransition(
                f"transactional id {self.transactional_id!r}: cannot rotate producer id "
                f"{self.producer_id} to {new_producer_id}"
            )
        return self._to(
            TxnState.EMPTY,
            producer_id=new_producer_id,
            producer_epoch=0,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            txn_timeout_ms=txn_timeout_ms,
            partitions=frozenset(),
            txn_start_timestamp=-1,
            txn_last_update_timestamp=now_ms,
        )

    def prepare_add_partitions(self, added: Iterable[TopicPartition], now_ms: int) -> TxnTransition:
        """AddPartitions/AddOffsets: ONGOING with the union; a new transaction starts now."""
        start = now_ms if self.state in _EXPIRABLE else self.txn_start_timestamp
        return self._to(
            TxnState.ONGOING,
            partitions=self.partitions | frozenset(added),
            txn_start_timestamp=start,
            txn_last_update_timestamp=now_ms,
        )

    def prepare_end(self, commit: bool, now_ms: int) -> TxnTransition:
        """EndTxn from the client: PREPARE_COMMIT or PREPARE_ABORT, same epoch (v1)."""
        return self._to(
            TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
            txn_last_update_timestamp=now_ms,
        )

    def prepare_fence_and_abort(self, now_ms: int) -> TxnTransition:
        """The coordinator aborts an ONGOING transaction itself (InitProducerId from a new
        instance, or the transaction timed out): bump the epoch so the old producer is
        fenced, and go to PREPARE_ABORT. The last epoch is forgotten (-1), so the fenced
        instance cannot pass a KIP-360 check with its old epoch.

        Kafka does not bump past Short.MAX_VALUE; neither do we (the holder of 32766 is
        fenced by 32767, which no client is ever given).
        """
        fence = self._to(TxnState.PREPARE_EPOCH_FENCE)  # checks ONGOING
        bumped = min(self.producer_epoch + 1, SHORT_MAX)
        fenced = fence.target
        return fenced._to(
            TxnState.PREPARE_ABORT,
            producer_epoch=bumped,
            last_producer_epoch=NO_PRODUCER_EPOCH,
            txn_last_update_timestamp=now_ms,
        ).with_source(self)

    def prepare_complete(self, now_ms: int) -> TxnTransition:
        """All markers written: COMPLETE_COMMIT/COMPLETE_ABORT, partitions cleared; the
        start timestamp and the last epoch stay (as in Kafka's v1 path)."""
        if self.state is TxnState.PREPARE_COMMIT:
            target = TxnState.COMPLETE_COMMIT
        elif self.state is TxnState.PREPARE_ABORT:
            target = TxnState.COMPLETE_ABORT
        else:
            raise IllegalTransition(
                f"transactional id {self.transactional_id!r}: illegal transition from "
                f"{self.state.kafka_name} to CompleteCommit/CompleteAbort (allowed from "
                "PrepareCommit/PrepareAbort)"
            )
        return self._to(
            target,
            partitions=frozenset(),
            txn_last_update_timestamp=now_ms,
        )

    def prepare_dead(self) -> TxnTransition:
        """Expiration: DEAD, written as a tombstone."""
        return self._to(TxnState.DEAD, partitions=frozenset())

    def _to(self, state: TxnState, **changes: Any) -> TxnTransition:
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalTransition(
                f"transactional id {self.transactional_id!r}: illegal transition from "
                f"{self.state.kafka_name} to {state.kafka_name} (allowed from "
                f"{sorted(s.kafka_name for s in VALID_PREVIOUS_STATES[state])})"
            )
        changes.setdefault("previous_producer_id", self.producer_id)
        # dataclasses.replace, without its getattr per field (issue 12: every
        # transaction makes three of these on the event loop).
        values = dict(zip(_METADATA_FIELDS, _metadata_values(self), strict=True))
        values.update(changes, state=state)
        target = TransactionMetadata(**values)
        if state is not TxnState.DEAD and target.producer_epoch < 0:
            raise IllegalTransition(
                f"transactional id {self.transactional_id!r}: epoch {target.producer_epoch} "
                f"is not valid in state {state.kafka_name}"
            )
        return TxnTransition(self, target)


# What dataclasses.replace copies: the fields __init__ takes (an init=False field would
# come from its default or __post_init__, as with replace).
_METADATA_FIELDS = tuple(f.name for f in fields(TransactionMetadata) if f.init)
_metadata_values = attrgetter(*_METADATA_FIELDS)


@dataclass(frozen=True, slots=True)
class TxnTransition:
    """A checked, not yet applied change: ``source`` (None for an id not known yet) ->
    ``target``. A DEAD target is written as a tombstone."""

    source: TransactionMetadata | None
    target: TransactionMetadata

    @property
    def transactional_id(self) -> str:
        return self.target.transactional_id

    @property
    def is_tombstone(self) -> bool:
        return self.target.state is TxnState.DEAD

    def with_source(self, source: TransactionMetadata | None) -> TxnTransition:
        return TxnTransition(source, self.target)

    @staticmethod
    def create(
        transactional_id: str, producer_id: int, txn_timeout_ms: int, now_ms: int
    ) -> TxnTransition:
        """A new transactional id: Kafka builds an EMPTY entry at epoch -1 and bumps it to
        0 in the same step; only the epoch-0 EMPTY is ever written."""
        if producer_id < 0:
            raise IllegalTransition(f"illegal new producer id {producer_id}")
        blank = TransactionMetadata(
            transactional_id=transactional_id,
            producer_id=producer_id,
            producer_epoch=NO_PRODUCER_EPOCH,
            txn_timeout_ms=txn_timeout_ms,
            state=TxnState.EMPTY,
            txn_last_update_timestamp=now_ms,
        )
        # As in Kafka, the first record already names its own id as the previous one.
        first = blank.prepare_increment_epoch(txn_timeout_ms, 0, NO_PRODUCER_EPOCH, now_ms)
        return first.with_source(None)
