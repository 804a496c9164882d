"""The transaction coordinator of one ``__transaction_state`` partition, as a pure shard.

Modelled on Kafka's newer coordinators (``CoordinatorShard``/``CoordinatorResult``) with the
rules of ``TransactionCoordinator.scala`` (transactions v1: the explicit AddPartitionsToTxn
path, InitProducerId v0-4, AddPartitionsToTxn/AddOffsetsToTxn/EndTxn v0-3). No I/O, no clock:
``now_ms`` and the producer id allocator are arguments.

The protocol with the coordinator runtime (``oncelog.broker.coordinator_runtime``):

1. A handler returns a ``CoordinatorResult``: ``records`` to append to this partition of
   ``__transaction_state``, the ``response`` to send *once they are written*, and
   ``markers`` to write *once they are written*. A handler changes nothing but a
   "write in flight" note for the ids it touched (Kafka's ``pendingState``): further
   requests for those ids get CONCURRENT_TRANSACTIONS until step 2 or 3 (except on top of
   a completion, see ``_view``). So requests for other ids may be decided while a write
   waits for its fsync.
2. After the append is durable, the runtime calls ``replay(offset, producer_id, key,
   value)`` for every record, the same method that loads the partition: state only ever
   changes by replaying records, so load and live cannot disagree.
3. If the append failed, the runtime calls ``write_failed(result)`` and the client gets the
   runtime's error instead of the prepared response.
4. When every marker of a MarkerRequest is written, ``complete(...)`` gives the
   COMPLETE_COMMIT/COMPLETE_ABORT record (steps 2-3 again).

Loading: a shard built with ``loading=True`` answers COORDINATOR_LOAD_IN_PROGRESS until
``finish_loading()``, which returns the markers of every PREPARE_COMMIT/PREPARE_ABORT the log
holds (they must be re-sent, then completed).

Deliberate differences from Kafka, all consequences of "state changes only by replay":
- Kafka's fencing abort raises the in-memory epoch before the PREPARE_ABORT is written and
  remembers a failed write (``hasFailedEpochFence``) so it does not bump twice. Here the
  epoch only moves when the record is replayed, so a failed fence simply leaves the old
  epoch and the next attempt bumps it once.
- A new transactional id is not put in the cache before its first record is written; a
  failed first write leaves nothing behind (Kafka keeps an epoch -1 entry and reuses its
  producer id; here the retry allocates a fresh one).
- ``last_producer_epoch`` is persisted (see ``log_records``), so a KIP-360 retry also works
  across a reload.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from oncelog.protocol.errors import ErrorCode
from oncelog.state_machines import IllegalTransition
from oncelog.transactions.log_records import (
    VALUE_VERSION,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from oncelog.transactions.state import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
    TransactionMetadata,
    TxnState,
    TxnTransition,
    is_epoch_exhausted,
)

__all__ = [
    "API_ADD_OFFSETS_TO_TXN",
    "API_ADD_PARTITIONS_TO_TXN",
    "API_END_TXN",
    "API_INIT_PRODUCER_ID",
    "CoordinatorResult",
    "MarkerRequest",
    "TransactionCoordinatorShard",
    "TxnDescription",
    "TxnListing",
    "TxnResponse",
    "client_error",
]

API_INIT_PRODUCER_ID = 22
API_ADD_PARTITIONS_TO_TXN = 24
API_ADD_OFFSETS_TO_TXN = 25
API_END_TXN = 26

# First version of each API whose clients understand PRODUCER_FENCED (KIP-588); older
# versions get INVALID_PRODUCER_EPOCH instead (KafkaApis handle*Request).
_PRODUCER_FENCED_SINCE = {
    API_INIT_PRODUCER_ID: 4,
    API_ADD_PARTITIONS_TO_TXN: 2,
    API_ADD_OFFSETS_TO_TXN: 2,
    API_END_TXN: 2,
}


def client_error(api_key: int, version: int, error: ErrorCode) -> ErrorCode:
    """The code to put on the wire: PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH for
    request versions older than KIP-588's (InitProducerId < 4, AddPartitionsToTxn < 2,
    AddOffsetsToTxn < 2, EndTxn < 2)."""
    since = _PRODUCER_FENCED_SINCE.get(api_key)
    if error == ErrorCode.producer_fenced and since is not None and version < since:
        return ErrorCode.invalid_producer_epoch
    return error


@dataclass(frozen=True, slots=True)
class MarkerRequest:
    """Write a COMMIT or ABORT marker for this producer to every partition listed
    (WriteTxnMarkers semantics), then call ``complete``."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    partitions: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class TxnResponse:
    """What the client is told. ``producer_id``/``producer_epoch`` are set for a successful
    InitProducerId and EndTxn; -1 otherwise."""

    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class CoordinatorResult:
    """Records to append, then the response to send and the markers to write."""

    records: tuple[tuple[bytes, bytes | None], ...] = ()
    response: TxnResponse | None = None
    markers: tuple[MarkerRequest, ...] = ()
    transitions: tuple[TxnTransition, ...] = ()

    # What the coordinator runtime reads: the records are already encoded, always replayed,
    # and written by no producer (``__transaction_state`` is not transactional).
    replay_records = True
    producer_id = NO_PRODUCER_ID
    producer_epoch = NO_PRODUCER_EPOCH

    @property
    def log_records(self) -> tuple[tuple[bytes, bytes | None], ...]:
        return self.records


@dataclass(frozen=True, slots=True)
class TxnDescription:
    """One entry of a DescribeTransactions (65) response."""

    transactional_id: str
    error: ErrorCode
    state: str = ""
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    timeout_ms: int = 0
    start_time_ms: int = -1
    topics: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TxnListing:
    """A ListTransactions (66) response: (transactional id, producer id, state name)."""

    error: ErrorCode
    transactions: tuple[tuple[str, int, str], ...] = ()


def _error(code: ErrorCode) -> CoordinatorResult:
    return CoordinatorResult(response=TxnResponse(code))


@dataclass(frozen=True, slots=True)
class _Writing:
    """A transition whose record is being written, and the value bytes encoded for it
    (None for a tombstone): replaying that very object needs no decoding."""

    transition: TxnTransition
    value: bytes | None


class TransactionCoordinatorShard:
    """Transaction metadata of one ``__transaction_state`` partition."""

    def __init__(
        self,
        partition: int = 0,
        coordinator_epoch: int = 0,
        *,
        loading: bool = False,
        value_version: int = VALUE_VERSION,
    ) -> None:
        self.partition = partition
        self.coordinator_epoch = coordinator_epoch
        self.value_version = value_version
        self._loading = loading
        self._txns: dict[str, TransactionMetadata] = {}
        # Transitions whose records are being written, per id, in log order.
        self._pending: dict[str, list[_Writing]] = {}

    # --- state ---

    @property
    def metadata(self) -> Mapping[str, TransactionMetadata]:
        return MappingProxyType(self._txns)

    @property
    def loading(self) -> bool:
        return self._loading

    def get(self, transactional_id: str) -> TransactionMetadata | None:
        return self._txns.get(transactional_id)

    def pending(self, transactional_id: str) -> TxnTransition | None:
        """The last transition whose record is being written for this id, if any."""
        chain = self._pending.get(transactional_id)
        return chain[-1].transition if chain else None

    # --- applying records: the one path for load and live ---

    def replay(self, offset: int, producer_id: int, key: bytes, value: bytes | None) -> None:
        """Apply one stored record (its offset and producer do not matter here). Unknown key
        versions are skipped (as Kafka does).

        A live write replays the very value object this shard encoded for its transition
        (records are replayed in the order their transitions were decided): its metadata is
        the transition's target, which the current value version encodes losslessly
        (tests/transactions/test_txn_log_records.py), so it is not decoded again. Anything
        else (a load, an older value version) is decoded."""
        tid = decode_key(key)
        if tid is None:
            return
        chain = self._pending.get(tid)
        head = None
        if chain:
            head = chain.pop(0)
            if not chain:
                del self._pending[tid]
        if head is not None and value is head.value and self.value_version == VALUE_VERSION:
            metadata: TransactionMetadata | None = head.transition.target
        else:
            metadata = decode_value(tid, value)
        if metadata is None or metadata.state is TxnState.DEAD:
            self._txns.pop(tid, None)
        else:
            self._txns[tid] = metadata

    def replay_end_transaction_marker(self, producer_id: int, committed: bool) -> None:
        """``__transaction_state`` holds no transaction markers: nothing to do."""

    def apply(self, result: CoordinatorResult) -> None:
        """Replay every record of ``result`` as if its append had just succeeded (for
        harnesses that keep the log in memory)."""
        for key, value in result.records:
            self.replay(-1, NO_PRODUCER_ID, key, value)

    def write_failed(self, result: CoordinatorResult) -> None:
        """The append of ``result`` failed: forget its in-flight transitions (the client
        gets the runtime's error instead of ``result.response``)."""
        for transition in result.transitions:
            chain = self._pending.get(transition.transactional_id, [])
            if any(w.transition is transition for w in chain):
                chain[:] = [w for w in chain if w.transition is not transition]
                if not chain:
                    del self._pending[transition.transactional_id]

    def finish_loading(self) -> list[MarkerRequest]:
        """The partition is loaded: start answering, and return the markers of every
        prepared transaction (to re-send, then ``complete``)."""
        self._loading = False
        return self.pending_markers()

    def pending_markers(self) -> list[MarkerRequest]:
        """Markers of every PREPARE_COMMIT/PREPARE_ABORT whose completion is not in flight."""
        return [
            self._marker(md)
            for tid, md in sorted(self._txns.items())
            if md.state.is_prepared and tid not in self._pending
        ]

    # --- handlers ---

    def init_producer_id(
        self,
        transactional_id: str,
        txn_timeout_ms: int,
        expected_producer_id: int = NO_PRODUCER_ID,
        expected_epoch: int = NO_PRODUCER_EPOCH,
        *,
        now_ms: int,
        allocate_producer_id: Callable[[], int],
        max_timeout_ms: int,
    ) -> CoordinatorResult:
        """InitProducerId (22) with a transactional id. ``expected_*`` are the v3+ fields
        (-1 when absent), both or neither given: the handler checks that, and answers a
        request without a transactional id itself, as KafkaApis does
        (``is_partial_expected_producer``).

        Kafka's rules (TransactionCoordinator.handleInitProducerId and
        prepareInitProducerIdTransit):
        - empty id -> INVALID_REQUEST; timeout <= 0 or > max -> INVALID_TRANSACTION_TIMEOUT;
        - a write in flight -> CONCURRENT_TRANSACTIONS;
        - expected producer id neither the current one, nor the previous one with an
          exhausted expected epoch (a retried rotation) -> PRODUCER_FENCED;
        - PREPARE_COMMIT/PREPARE_ABORT -> CONCURRENT_TRANSACTIONS (markers pending);
        - ONGOING -> fence: epoch + 1, PREPARE_ABORT written, abort markers, and the client
          gets CONCURRENT_TRANSACTIONS; its retry then bumps the epoch again;
        - EMPTY/COMPLETE_*: epoch exhausted (>= 32766) and the expected epoch (if given) is
          the current one -> new producer id at epoch 0; otherwise bump (see
          ``_bumped_epochs``).
        """
        if not transactional_id:
            return _error(ErrorCode.invalid_request)
        if txn_timeout_ms <= 0 or txn_timeout_ms > max_timeout_ms:
            return _error(ErrorCode.invalid_transaction_timeout)
        if self._loading:
            return _error(ErrorCode.coordinator_load_in_progress)
        expected = None if expected_producer_id == NO_PRODUCER_ID else expected_epoch
        current, busy = self._view(transactional_id)
        if busy:
            return _error(ErrorCode.concurrent_transactions)
        if current is None:
            transition = TxnTransition.create(
                transactional_id, allocate_producer_id(), txn_timeout_ms, now_ms
            )
            return self._write(transition, self._ok(transition.target))
        if expected is not None and not (
            current.producer_id == expected_producer_id
            or (
                current.previous_producer_id == expected_producer_id
                and is_epoch_exhausted(expected)
            )
        ):
            return _error(ErrorCode.producer_fenced)
        state = current.state
        if state.is_prepared:
            return _error(ErrorCode.concurrent_transactions)
        if state is TxnState.ONGOING:
            transition = current.prepare_fence_and_abort(now_ms)
            return self._write(
                transition,
                TxnResponse(ErrorCode.concurrent_transactions),
                markers=(self._marker(transition.target),),
            )
        if state.is_expiration_allowed:  # EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT
            if current.is_producer_epoch_exhausted and expected in (None, current.producer_epoch):
                transition = current.prepare_producer_id_rotation(
                    allocate_producer_id(), txn_timeout_ms, now_ms, expected is not None
                )
            else:
                epochs = _bumped_epochs(current, expected)
                if epochs is None:
                    return _error(ErrorCode.producer_fenced)
                transition = current.prepare_increment_epoch(txn_timeout_ms, *epochs, now_ms)
            return self._write(transition, self._ok(transition.target))
        raise IllegalTransition(
            f"transactional id {transactional_id!r} found in state {state.kafka_name}, "
            "which is never stored"
        )

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
    ) -> CoordinatorResult:
        """AddPartitionsToTxn (24), v0-3 (one transaction per request).

        Kafka's order: unknown id or other producer id -> INVALID_PRODUCER_ID_MAPPING;
        epoch != current -> PRODUCER_FENCED; write in flight or PREPARE_* ->
        CONCURRENT_TRANSACTIONS; ONGOING and already included -> NONE with nothing written;
        else -> ONGOING (a new transaction's start time is now). No INVALID_TXN_STATE here:
        every stored state may add partitions.
        """
        if not transactional_id:
            return _error(ErrorCode.invalid_request)
        if self._loading:
            return _error(ErrorCode.coordinator_load_in_progress)
        added = frozenset(partitions)
        current, busy = self._view(transactional_id)
        if current is None or current.producer_id != producer_id:
            return _error(ErrorCode.invalid_producer_id_mapping)
        if current.producer_epoch != producer_epoch:
            return _error(ErrorCode.producer_fenced)
        if busy or current.state.is_prepared:
            return _error(ErrorCode.concurrent_transactions)
        if current.state is TxnState.ONGOING and added <= current.partitions:
            return _error(ErrorCode.none)
        transition = current.prepare_add_partitions(added, now_ms)
        return self._write(transition, TxnResponse(ErrorCode.none))

    def add_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        offsets_partition: TopicPartition,
        now_ms: int,
    ) -> CoordinatorResult:
        """AddOffsetsToTxn (25): add the group's ``__consumer_offsets`` partition (the
        caller computes it from ``group_id``), with AddPartitions' rules."""
        del group_id  # only names the partition, which the caller computed
        return self.add_partitions(
            transactional_id, producer_id, producer_epoch, (offsets_partition,), now_ms
        )

    def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        now_ms: int,
    ) -> CoordinatorResult:
        """EndTxn (26), transactions v1 (client versions 0-4).

        Kafka's order: unknown id or other producer id -> INVALID_PRODUCER_ID_MAPPING;
        epoch != current (strict, from a client) -> PRODUCER_FENCED; write in flight ->
        CONCURRENT_TRANSACTIONS; then by state:
        ONGOING -> PREPARE_COMMIT/PREPARE_ABORT written, then markers; the client is
        answered NONE once the PREPARE record is written (it does not wait for markers).
        COMPLETE_COMMIT + commit, COMPLETE_ABORT + abort -> NONE (a retry);
        PREPARE_COMMIT + commit, PREPARE_ABORT + abort -> CONCURRENT_TRANSACTIONS;
        any other pairing, and EMPTY (commit or abort) -> INVALID_TXN_STATE.
        """
        if not transactional_id:
            return _error(ErrorCode.invalid_request)
        if self._loading:
            return _error(ErrorCode.coordinator_load_in_progress)
        current, busy = self._view(transactional_id)
        if current is None or current.producer_id != producer_id:
            return _error(ErrorCode.invalid_producer_id_mapping)
        if current.producer_epoch != producer_epoch:
            return _error(ErrorCode.producer_fenced)
        if busy:
            return _error(ErrorCode.concurrent_transactions)
        state = current.state
        if state is TxnState.ONGOING:
            transition = current.prepare_end(commit, now_ms)
            return self._write(
                transition, self._ok(transition.target), markers=(self._marker(transition.target),)
            )
        same = commit == (state in (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT))
        if state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT) and same:
            return CoordinatorResult(response=self._ok(current))
        if state.is_prepared and same:
            return _error(ErrorCode.concurrent_transactions)
        if state in (
            TxnState.EMPTY,
            TxnState.PREPARE_COMMIT,
            TxnState.PREPARE_ABORT,
            TxnState.COMPLETE_COMMIT,
            TxnState.COMPLETE_ABORT,
        ):
            return _error(ErrorCode.invalid_txn_state)
        raise IllegalTransition(
            f"transactional id {transactional_id!r} found in state {state.kafka_name}, "
            "which is never stored"
        )

    def complete(
        self, transactional_id: str, now_ms: int, marker: MarkerRequest | None = None
    ) -> CoordinatorResult:
        """Every marker is written: the COMPLETE_COMMIT/COMPLETE_ABORT record.

        With ``marker``, a stale one (the transaction it was for is no longer the prepared
        one, or its completion is already in flight) yields an empty result. Without it,
        the id must be in PREPARE_COMMIT/PREPARE_ABORT (else IllegalTransition).
        """
        current = self._txns.get(transactional_id)
        if marker is not None and (
            current is None
            or transactional_id in self._pending
            or self._marker(current) != marker
            or not current.state.is_prepared
        ):
            return CoordinatorResult()
        if current is None:
            raise IllegalTransition(f"transactional id {transactional_id!r} is not known")
        if transactional_id in self._pending:
            return CoordinatorResult()
        return self._write(current.prepare_complete(now_ms), None)

    def abort_timed_out(self, now_ms: int) -> list[CoordinatorResult]:
        """Abort every ONGOING transaction older than its timeout
        (``txn_start_timestamp + txn_timeout_ms < now``), fencing the producer: epoch + 1,
        PREPARE_ABORT, markers (Kafka's PrepareEpochFence path). No client response.
        Nothing while loading."""
        if self._loading:
            return []
        results = []
        for tid, md in sorted(self._txns.items()):
            if (
                md.state is TxnState.ONGOING
                and tid not in self._pending
                and md.txn_start_timestamp + md.txn_timeout_ms < now_ms
            ):
                transition = md.prepare_fence_and_abort(now_ms)
                results.append(
                    self._write(transition, None, markers=(self._marker(transition.target),))
                )
        return results

    def expire_transactional_ids(self, now_ms: int, expiration_ms: int) -> CoordinatorResult:
        """Tombstones for idle ids: EMPTY/COMPLETE_* whose last update is at least
        ``expiration_ms`` (``transactional.id.expiration.ms``) old. One result for all.
        Nothing while loading."""
        if self._loading:
            return CoordinatorResult()
        transitions = [
            md.prepare_dead()
            for tid, md in sorted(self._txns.items())
            if md.state.is_expiration_allowed
            and tid not in self._pending
            and md.txn_last_update_timestamp <= now_ms - expiration_ms
        ]
        return CoordinatorResult(
            records=tuple(self._start_writing(t) for t in transitions),
            transitions=tuple(transitions),
        )

    # --- admin (KIP-664) ---

    def describe(self, transactional_ids: Iterable[str]) -> list[TxnDescription]:
        """DescribeTransactions (65) entries, in request order."""
        out = []
        for tid in transactional_ids:
            if not tid:
                out.append(TxnDescription(tid, ErrorCode.invalid_request))
                continue
            if self._loading:
                out.append(TxnDescription(tid, ErrorCode.coordinator_load_in_progress))
                continue
            md = self._txns.get(tid)
            if md is None:
                out.append(TxnDescription(tid, ErrorCode.transactional_id_not_found))
                continue
            topics: dict[str, list[int]] = {}
            for topic, part in md.sorted_partitions():
                topics.setdefault(topic, []).append(part)
            out.append(
                TxnDescription(
                    transactional_id=tid,
                    error=ErrorCode.none,
                    state=md.state.kafka_name,
                    producer_id=md.producer_id,
                    producer_epoch=md.producer_epoch,
                    timeout_ms=md.txn_timeout_ms,
                    start_time_ms=md.txn_start_timestamp,
                    topics={t: tuple(p) for t, p in topics.items()},
                )
            )
        return out

    def list_transactions(
        self,
        states: Collection[str] = (),
        producer_ids: Collection[int] = (),
        duration_filter_ms: int = -1,
        *,
        now_ms: int,
    ) -> TxnListing:
        """ListTransactions (66): filters by state names (an unknown name matches none; the
        handler names them back, from the request alone), producer ids, and (v1+)
        transactions running longer than ``duration_filter_ms`` (``now - start >
        duration``; -1: no filter)."""
        if self._loading:
            return TxnListing(ErrorCode.coordinator_load_in_progress)
        wanted = {TxnState.from_kafka_name(name) for name in states}
        pids = set(producer_ids)
        rows = []
        for tid, md in sorted(self._txns.items()):
            if pids and md.producer_id not in pids:
                continue
            if states and md.state not in wanted:
                continue
            if duration_filter_ms >= 0 and now_ms - md.txn_start_timestamp <= duration_filter_ms:
                continue
            rows.append((tid, md.producer_id, md.state.kafka_name))
        return TxnListing(ErrorCode.none, tuple(rows))

    # --- helpers ---

    def _view(self, transactional_id: str) -> tuple[TransactionMetadata | None, bool]:
        """The metadata a request for the id is decided on, and whether it must wait
        (CONCURRENT_TRANSACTIONS) because a write for the id is in flight.

        One write in flight does not make requests wait: a completion. It is written only
        once every marker is durable, so the transaction's outcome is final; a request
        may be decided on the COMPLETE_* state being written (Kafka decides on state not
        yet committed too). Its record follows the completion's in the same partition,
        so it can never be durable, or replayed, without it."""
        chain = self._pending.get(transactional_id)
        if not chain:
            return self._txns.get(transactional_id), False
        writing = chain[-1].transition.target
        if writing.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            return writing, False
        return self._txns.get(transactional_id), True

    def _write(
        self,
        transition: TxnTransition,
        response: TxnResponse | None,
        markers: tuple[MarkerRequest, ...] = (),
    ) -> CoordinatorResult:
        return CoordinatorResult(
            records=(self._start_writing(transition),),
            response=response,
            markers=markers,
            transitions=(transition,),
        )

    def _start_writing(self, transition: TxnTransition) -> tuple[bytes, bytes | None]:
        """The record of ``transition``, noted as being written for its id."""
        key = encode_key(transition.transactional_id)
        value = (
            None if transition.is_tombstone else encode_value(transition.target, self.value_version)
        )
        self._pending.setdefault(transition.transactional_id, []).append(
            _Writing(transition, value)
        )
        return key, value

    def _marker(self, md: TransactionMetadata) -> MarkerRequest:
        return MarkerRequest(
            transactional_id=md.transactional_id,
            producer_id=md.producer_id,
            producer_epoch=md.producer_epoch,
            committed=md.state is TxnState.PREPARE_COMMIT,
            coordinator_epoch=self.coordinator_epoch,
            partitions=md.partitions,
        )

    @staticmethod
    def _ok(md: TransactionMetadata) -> TxnResponse:
        return TxnResponse(ErrorCode.none, md.producer_id, md.producer_epoch)


def _bumped_epochs(current: TransactionMetadata, expected: int | None) -> tuple[int, int] | None:
    """(new epoch, new last epoch) for InitProducerId on an idle id (Kafka's
    ``prepareIncrementProducerEpoch``), or None for PRODUCER_FENCED:
    - no expected epoch (a new instance): bump, forget the last epoch (-1);
    - expected == current (KIP-360 recovery): bump, remember the current as last;
    - expected == last (a retry of that bump whose answer was lost): same epochs again;
    - otherwise the caller is an older, fenced instance.
    """
    epoch = current.producer_epoch
    if expected is None:
        return epoch + 1, NO_PRODUCER_EPOCH
    if expected == epoch:
        return epoch + 1, epoch
    if expected == current.last_producer_epoch:
        return epoch, current.last_producer_epoch
    return None
