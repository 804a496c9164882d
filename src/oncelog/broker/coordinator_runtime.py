"""One runtime for the transaction and group coordinators (Kafka's ``CoordinatorRuntime``).

A coordinator is a pure shard per partition of its internal topic (``__transaction_state``,
``__consumer_offsets``). The runtime is everything around the shards that both coordinators
need, written once:

- **Load and unload per partition.** ``load(partition, epoch)`` builds a shard, replays the
  partition into it through the loader and makes it active; ``unload(partition, epoch)``
  drops it. A broker calls them when it becomes, or stops being, the partition's leader
  (one node: every partition at epoch 0 when the topic exists). The epoch is the
  coordinator epoch the shard stamps on what it sends (transaction markers): later the
  partition's leader epoch. As in Kafka, a load with an epoch no newer than the current one
  and an unload with an epoch no newer than the loaded one are ignored, so a late
  notification of an old leadership change cannot undo a newer one.
- **Write, then replay.** ``write(partition, operation)`` runs ``operation(shard, now_ms)``,
  which returns a result (records to write and whatever the caller answers); the records
  are appended to the partition as one batch through the writer and, once durable,
  replayed into the shard with the same ``replay`` the loader calls. Only then does the
  caller get the result. Writes of one partition are replayed in log order even when many
  share one fsync.
- **One way to report failure.** A partition this broker does not coordinate answers
  NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS while it loads); a write that could not be
  appended or made durable tells the shard (``write_failed``) and raises the Kafka code a
  client must get for it (Kafka's ``CoordinatorOperationExceptionHelper``). Every one of
  these is a ``CoordinatorError``.
- **A storage failure takes the partition out until the broker restarts.** An ``OSError``
  from the append (a segment write or roll: ENOSPC, EIO, EMFILE) or KAFKA_STORAGE_ERROR
  (from the append of a log already offline, or from the wait for its fsync) leaves the
  records neither surely in the log nor surely out of it, and after a failed fsync not
  even the page cache can be trusted. Telling the shard "not written" could then claim
  the opposite of what a reload will find, and leaving it "being written" would refuse
  the id for ever. Kafka takes the log directory offline: the partition's coordinator
  resigns, KAFKA_STORAGE_ERROR reaches the client as NOT_COORDINATOR, and whoever loads
  the partition next replays its log (re-sending the markers of any PREPARE_* there). Here
  the partition is FAILED: its shard is dropped (``on_unloaded``: marker tasks stop,
  parked requests are answered), every request for it gets NOT_COORDINATOR, and the
  restart, whose recovery trusts only what was fsynced, loads it from the log.

The runtime depends on three narrow things, never on the broker: a ``PartitionWriter``, a
``CoordinatorLoader`` and a clock.

Two write disciplines, chosen per coordinator: *pipelined* (transactions: a shard marks what
it is writing, so it can decide the next request while earlier writes wait for their fsync,
and many transactional ids share one fsync), or *serial* (groups: each operation sees every
earlier write of its partition replayed, as the classic group core assumes).
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from oncelog.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

NO_PRODUCER = -1


class CoordinatorError(KafkaError):
    """What a coordinator request gets instead of its answer: ``code`` is the Kafka error
    the client must see (already translated from the storage error, if any)."""


# Storage errors as a coordinator's client must see them (Kafka's
# CoordinatorOperationExceptionHelper, and TransactionStateManager's append callback);
# any other code passes through.
_WRITE_ERRORS = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.message_too_large: ErrorCode.unknown_server_error,
    ErrorCode.record_list_too_large: ErrorCode.unknown_server_error,
    ErrorCode.invalid_fetch_size: ErrorCode.unknown_server_error,
}


def write_error(storage_error: ErrorCode) -> ErrorCode:
    """The code a coordinator answers when its records could not be written."""
    return _WRITE_ERRORS.get(storage_error, storage_error)


# -- what the runtime needs of the cores ----------------------------------------------------


class ShardResult(Protocol):
    """What the runtime reads of a handler's result (Kafka's ``CoordinatorResult``)."""

    @property
    def log_records(self) -> Sequence[tuple[bytes, bytes | None]]:
        """The records to append, as (key, value), in one batch; empty: nothing to write."""

    @property
    def replay_records(self) -> bool:
        """False when the shard already holds what the records say (Kafka's replayRecords)."""

    @property
    def producer_id(self) -> int:
        """The producer of a transactional batch (TxnOffsetCommit), else -1."""

    @property
    def producer_epoch(self) -> int: ...


class CoordinatorShard(Protocol):
    """What the runtime needs of a pure coordinator core (Kafka's ``CoordinatorShard``)."""

    def replay(self, offset: int, producer_id: int, key: bytes, value: bytes | None) -> None:
        """Apply one stored record: at load, and after a live write is durable."""

    def replay_end_transaction_marker(self, producer_id: int, committed: bool) -> None:
        """Apply a transaction marker found in (or written to) the partition."""

    def write_failed(self, result: Any) -> None:
        """The records of ``result`` were not written: forget what it had in flight."""


S = TypeVar("S", bound=CoordinatorShard)
R = TypeVar("R", bound=ShardResult)


# -- what the runtime needs of the broker ----------------------------------------------------


class PartitionWriter(Protocol):
    """Appends to the partitions of one internal topic (the local log on one node; the
    partition this broker leads in a cluster). Raises ``KafkaError`` with a storage code."""

    def append(
        self,
        partition: int,
        records: Sequence[tuple[bytes, bytes | None]],
        now_ms: int,
        *,
        producer_id: int = NO_PRODUCER,
        producer_epoch: int = -1,
    ) -> int:
        """Append ``records`` as one batch (transactional when ``producer_id`` is set);
        the offset of the last record. Nothing awaits between validation and append."""

    def append_marker(
        self,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        coordinator_epoch: int,
        now_ms: int,
    ) -> int:
        """Append a COMMIT or ABORT marker for ``producer_id``; its offset."""

    def wait_durable(self, partition: int, end_offset: int) -> Awaitable[None]:
        """Resolves once every offset below ``end_offset`` is durable (fsynced on one
        node); fails with ``KafkaError`` if it cannot be."""


@dataclass(frozen=True, slots=True)
class LoadReport:
    """What replaying one partition found: records applied, records skipped as unreadable."""

    replayed: int
    skipped: int


class CoordinatorLoader(Protocol):
    """Replays a partition of the internal topic into a shard (Kafka's
    ``CoordinatorLoader``), records and transaction markers in log order."""

    async def load(self, partition: int, shard: CoordinatorShard) -> LoadReport: ...


Clock = Callable[[], int]


# -- the runtime ---------------------------------------------------------------------------


class _State(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"  # the load, or a write's storage, failed: not coordinating until loaded again
    CLOSED = "closed"  # unloaded: in-flight writes must not touch the shard any more


@dataclass(eq=False, slots=True)
class _Pending:
    """An appended write: replay it once every offset below ``end_offset`` is durable."""

    end_offset: int
    replay: Callable[[], None]


@dataclass(eq=False)
class _Context(Generic[S]):
    """One coordinator partition held by this broker."""

    partition: int
    epoch: int
    shard: S
    state: _State = _State.LOADING
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Appended writes waiting to be replayed, in log order.
    unreplayed: deque[_Pending] = field(default_factory=deque)


class CoordinatorRuntime(Generic[S]):
    """Loads, unloads and runs the shards of one coordinator (see the module docstring).

    ``build(partition, epoch)`` makes an empty shard; ``on_loaded(partition, shard)`` runs
    once its partition is replayed (before any request reaches it), ``on_unloaded`` once it
    is dropped.
    """

    def __init__(
        self,
        name: str,
        writer: PartitionWriter,
        loader: CoordinatorLoader,
        clock: Clock,
        build: Callable[[int, int], S],
        *,
        pipelined: bool,
        on_loaded: Callable[[int, S], None] | None = None,
        on_unloaded: Callable[[int, S], None] | None = None,
    ) -> None:
        self.name = name
        self._writer = writer
        self._loader = loader
        self._clock = clock
        self._build = build
        self._pipelined = pipelined
        self._on_loaded = on_loaded
        self._on_unloaded = on_unloaded
        self._contexts: dict[int, _Context[S]] = {}
        self.skipped_records = 0  # records the loader could not read, over every load
        self.load_seconds: dict[int, float] = {}  # partition -> duration of its last load

    # -- leadership ------------------------------------------------------------------------

    async def load(self, partition: int, epoch: int) -> None:
        """Become the coordinator of ``partition`` at ``epoch``: replay it into a new shard.
        Requests for it get COORDINATOR_LOAD_IN_PROGRESS until the replay is done.

        Ignored if the partition is already held at this epoch or a newer one. A held
        partition with an older epoch is unloaded first (its shard stamps the old epoch)."""
        current = self._contexts.get(partition)
        if current is not None and current.epoch >= epoch:
            log.info(
                "%s-%d: already held at epoch %d (asked %d)",
                self.name,
                partition,
                current.epoch,
                epoch,
            )
            return
        if current is not None:
            self._close(current)
        context = _Context(partition, epoch, self._build(partition, epoch))
        self._contexts[partition] = context
        started = time.monotonic()
        try:
            report = await self._loader.load(partition, context.shard)
        except Exception:
            log.exception("%s-%d: load failed", self.name, partition)
            context.state = _State.FAILED
            return
        self.skipped_records += report.skipped
        if self._contexts.get(partition) is not context:
            return  # unloaded, or loaded at a newer epoch, while this load ran
        if self._on_loaded is not None:
            self._on_loaded(partition, context.shard)
        context.state = _State.ACTIVE
        self.load_seconds[partition] = time.monotonic() - started
        log.info(
            "%s-%d: loaded %d records at epoch %d in %.3f s",
            self.name,
            partition,
            report.replayed,
            epoch,
            self.load_seconds[partition],
        )

    def unload(self, partition: int, epoch: int | None) -> None:
        """Stop coordinating ``partition`` because another broker leads it at ``epoch``
        (None: the topic is gone). Ignored if the held epoch is not older."""
        context = self._contexts.get(partition)
        if context is None:
            return
        if epoch is not None and context.epoch >= epoch:
            log.info(
                "%s-%d: unload at epoch %d ignored (held at %d)",
                self.name,
                partition,
                epoch,
                context.epoch,
            )
            return
        self._close(context)

    def unload_all(self) -> None:
        for context in list(self._contexts.values()):
            self._close(context)

    def _close(self, context: _Context[S]) -> None:
        was_active = context.state is _State.ACTIVE
        context.state = _State.CLOSED
        context.unreplayed.clear()
        if self._contexts.get(context.partition) is context:
            del self._contexts[context.partition]
        if was_active and self._on_unloaded is not None:
            self._on_unloaded(context.partition, context.shard)
        log.info("%s-%d: unloaded (epoch %d)", self.name, context.partition, context.epoch)

    # -- reading -----------------------------------------------------------------------------

    def shard(self, partition: int) -> S:
        """The active shard of ``partition`` (CoordinatorError if this broker does not
        coordinate it now). Reads see only durable, replayed state."""
        return self._active(partition).shard

    @property
    def shards(self) -> Mapping[int, S]:
        """Every active shard, by partition."""
        return {
            index: context.shard
            for index, context in sorted(self._contexts.items())
            if context.state is _State.ACTIVE
        }

    def epoch(self, partition: int) -> int:
        return self._active(partition).epoch

    @property
    def loading(self) -> bool:
        return any(c.state is _State.LOADING for c in self._contexts.values())

    def failed(self, partition: int) -> bool:
        """Whether ``partition`` is out after a storage failure (or a failed load) until the
        broker restarts: held here, coordinated by nobody."""
        context = self._contexts.get(partition)
        return context is not None and context.state is _State.FAILED

    def _active(self, partition: int) -> _Context[S]:
        context = self._contexts.get(partition)
        if context is None or context.state in (_State.CLOSED, _State.FAILED):
            raise CoordinatorError(
                ErrorCode.not_coordinator,
                f"this broker does not coordinate {self.name}-{partition}",
            )
        if context.state is _State.LOADING:
            raise CoordinatorError(
                ErrorCode.coordinator_load_in_progress, f"{self.name}-{partition} is loading"
            )
        return context

    # -- writing -----------------------------------------------------------------------------

    async def write(self, partition: int, operation: Callable[[S, int], R]) -> R:
        """Run ``operation(shard, now_ms)``; write its records; replay them once durable;
        the result. CoordinatorError if the partition is not held or the write failed."""
        if self._pipelined:
            return await self.begin_write(partition, operation).settled()
        context = self._active(partition)
        async with context.lock:
            return await self._begin(self._active(partition), operation).settled()

    def begin_write(self, partition: int, operation: Callable[[S, int], R]) -> InFlightWrite[R]:
        """Pipelined runtimes only: run the operation and append its records now, without
        an await in between or before; ``await .settled()`` for the replayed result. Writes
        begun one after another in the same step share the next fsync."""
        assert self._pipelined, "a serial runtime writes one operation at a time"
        return self._begin(self._active(partition), operation)

    def _begin(self, context: _Context[S], operation: Callable[[S, int], R]) -> InFlightWrite[R]:
        now = self._clock()
        result = operation(context.shard, now)
        pending = self._append_or_raise(context, result, now)
        if pending is None:
            return InFlightWrite(result, None)
        return InFlightWrite(result, functools.partial(self._settle, context, [(result, pending)]))

    async def write_each(
        self, partition: int, operation: Callable[[S, int], Sequence[R]]
    ) -> list[R]:
        """``write`` for an operation that decides several results at once (a timer that
        aborts many transactions): each result is its own batch and all share one wait for
        durability. The results whose records were written; one that could not be appended
        is logged and left out (its shard forgot it, so the next timer tries again)."""
        context = self._active(partition)
        async with self._exclusive(context):
            context = self._active(partition)
            now = self._clock()
            written: list[tuple[R, _Pending | None]] = []
            for result in operation(context.shard, now):
                try:
                    written.append((result, self._append_or_raise(context, result, now)))
                except CoordinatorError as exc:
                    if context.state is _State.FAILED:
                        raise
                    log.warning("%s-%d: write failed: %s", self.name, partition, exc)
            await self._settle(context, written)
            return [result for result, _ in written]

    async def complete_transaction(
        self,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        coordinator_epoch: int,
    ) -> None:
        """Write a transaction marker to ``partition`` and, once durable, replay it into
        the shard (Kafka 4's ``scheduleTransactionCompletion``: transactional offset
        commits end this way). When the partition is free the marker is appended before
        the first await, so markers keep the order they were requested in."""
        context = self._active(partition)
        async with self._exclusive(context):
            context = self._active(partition)
            try:
                offset = self._writer.append_marker(
                    partition,
                    producer_id,
                    producer_epoch,
                    committed,
                    coordinator_epoch,
                    self._clock(),
                )
            except (OSError, KafkaError) as exc:
                raise self._write_error(context, exc) from exc
            shard = context.shard
            pending = _Pending(
                offset + 1, lambda: shard.replay_end_transaction_marker(producer_id, committed)
            )
            context.unreplayed.append(pending)
            await self._wait_then_replay(context, [pending])

    def _exclusive(self, context: _Context[S]) -> AbstractAsyncContextManager[Any]:
        return nullcontext() if self._pipelined else context.lock

    def _append_or_raise(
        self, context: _Context[S], result: ShardResult, now_ms: int
    ) -> _Pending | None:
        """``_append``, its failure as CoordinatorError: a refusal tells the shard, a
        storage failure fails the partition (then the shard is gone)."""
        try:
            return self._append(context, result, now_ms)
        except (OSError, KafkaError) as exc:
            error = self._write_error(context, exc)
            if context.state is not _State.FAILED:
                context.shard.write_failed(result)
            raise error from exc

    def _write_error(self, context: _Context[S], exc: OSError | KafkaError) -> CoordinatorError:
        """What a client gets for a write that failed with ``exc``; a storage failure
        first fails the partition (see the module docstring)."""
        if isinstance(exc, KafkaError) and exc.code != ErrorCode.kafka_storage_error:
            return CoordinatorError(write_error(exc.code), exc.message)
        self._fail(context, str(exc))
        return CoordinatorError(
            ErrorCode.not_coordinator,
            f"{self.name}-{context.partition} is offline after a storage failure: {exc}",
        )

    def _fail(self, context: _Context[S], cause: str) -> None:
        """Take the partition out until the broker restarts: drop its shard, answer
        NOT_COORDINATOR. Once: the other writes that meet the failure find it FAILED."""
        current = self._contexts.get(context.partition) is context
        if not current or context.state is not _State.ACTIVE:
            return
        log.error(
            "%s-%d: storage failure (%s): not coordinating this partition until the broker "
            "restarts, which recovers it from its log",
            self.name,
            context.partition,
            cause,
        )
        context.state = _State.FAILED
        context.unreplayed.clear()
        if self._on_unloaded is not None:
            self._on_unloaded(context.partition, context.shard)

    def _append(self, context: _Context[S], result: ShardResult, now_ms: int) -> _Pending | None:
        """Append ``result``'s records (no await) and queue their replay; None if it has
        none. Raises the writer's KafkaError."""
        records = result.log_records
        if not records:
            return None
        last = self._writer.append(
            context.partition,
            records,
            now_ms,
            producer_id=result.producer_id,
            producer_epoch=result.producer_epoch,
        )
        pending = _Pending(last + 1, _replayer(context.shard, result, last - len(records) + 1))
        context.unreplayed.append(pending)
        return pending

    async def _settle(
        self, context: _Context[S], written: Sequence[tuple[ShardResult, _Pending | None]]
    ) -> None:
        """Wait for ``written`` to be durable and replayed; if that fails, tell the shard."""
        pending = [p for _, p in written if p is not None]
        if not pending:
            return
        try:
            await self._wait_then_replay(context, pending)
        except CoordinatorError:
            if context.state is not _State.FAILED:
                for result, _ in written:
                    context.shard.write_failed(result)
            raise

    async def _wait_then_replay(self, context: _Context[S], pending: Sequence[_Pending]) -> None:
        """Wait until ``pending`` (appended in this order) is durable, then replay every
        write of the partition up to it, in log order: some belong to callers whose own
        wait has not resumed yet."""
        try:
            await self._writer.wait_durable(context.partition, pending[-1].end_offset)
        except KafkaError as exc:
            for entry in pending:
                if entry in context.unreplayed:
                    context.unreplayed.remove(entry)
            raise self._write_error(context, exc) from exc
        if context.state in (_State.CLOSED, _State.FAILED):
            raise CoordinatorError(
                ErrorCode.not_coordinator,
                f"{self.name}-{context.partition} was unloaded, or failed, while writing",
            )
        while context.unreplayed and context.unreplayed[0].end_offset <= pending[-1].end_offset:
            context.unreplayed.popleft().replay()

    def partitions(self) -> Iterator[int]:
        """The partitions held now, active or loading."""
        return iter(sorted(self._contexts))


class InFlightWrite(Generic[R]):
    """A handler's result whose records are appended: ``result`` is what it decided,
    ``settled()`` returns it once the records are durable and replayed."""

    def __init__(self, result: R, settle: Callable[[], Awaitable[None]] | None) -> None:
        self.result = result
        self._settle = settle

    async def settled(self) -> R:
        if self._settle is not None:
            await self._settle()
        return self.result


def _replayer(shard: CoordinatorShard, result: ShardResult, base_offset: int) -> Callable[[], None]:
    def replay() -> None:
        if not result.replay_records:
            return
        for i, (key, value) in enumerate(result.log_records):
            shard.replay(base_offset + i, result.producer_id, key, value)

    return replay
