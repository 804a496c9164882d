"""The transaction coordinator: the pure shards of `oncelog.transactions` on the coordinator
runtime, with the markers they ask for and the timers they need.

Every request runs the same way: the runtime runs the shard's handler, writes its records
to the shard's `__transaction_state` partition and replays them once durable; only then is
the client answered. Markers are written after the client is answered (Kafka's order:
``responseCallback``, then ``addTxnMarkersToSend``; WriteTxnMarkers semantics, in process on
one node); once every participating partition holds its marker durably, the COMPLETE
record is written (in a cluster, a marker refused as stale leaves that to the newer
coordinator: ``_completes_despite``). Writes for different transactional ids overlap and
share fsyncs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from oncelog.broker.coordinator_runtime import (
    CoordinatorError,
    CoordinatorLoader,
    CoordinatorRuntime,
    InFlightWrite,
    PartitionWriter,
)
from oncelog.broker.internal_topics import CONSUMER_OFFSETS
from oncelog.broker.leadership import InternalTopic, LedCoordinator
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.transactions.coordinator import (
    CoordinatorResult,
    MarkerRequest,
    TransactionCoordinatorShard,
    TxnResponse,
)
from oncelog.transactions.state import TopicPartition, TxnState

log = logging.getLogger(__name__)

MARKER_RETRY_S = 0.5
# How long a COMPLETE record, appended once its markers are durable, waits before its
# marker task asks for its fsync (see _write_markers). One producer committing back to back
# (librdkafka) sends its next AddPartitionsToTxn 1.3-2 ms after EndTxn's answer
# (README, issue 12): well within it, and the fsync that request waits for covers the
# COMPLETE record too. A producer that pauses longer between transactions gets the
# COMPLETE fsynced on its own after this delay, as before it was at once.
COMPLETION_FSYNC_DELAY_S = 0.01
# How long a request refused only because the id's previous write or completion is in
# flight waits for it before the client is told CONCURRENT_TRANSACTIONS (see _run).
CONCURRENT_WAIT_S = 1.0
# Marker refusals that mean a newer producer epoch or coordinator has written to the
# partition since this transaction was prepared (see _fenced_marker).
_FENCED_MARKER_ERRORS = frozenset(
    {ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced}
)
# What a request gets while this broker does not coordinate its id's partition.
_NOT_COORDINATING = frozenset(
    {
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
    }
)


class MarkerWriter(Protocol):
    """Writes one transaction's marker to its partitions (WriteTxnMarkers semantics)."""

    def write(
        self,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        coordinator_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> Awaitable[dict[TopicPartition, ErrorCode]]: ...


@dataclass(frozen=True, slots=True)
class TxnSettings:
    """The broker configuration the transaction coordinator acts on (Kafka's keys)."""

    max_timeout_ms: int  # transaction.max.timeout.ms
    abort_timed_out_interval_ms: int  # transaction.abort.timed.out.transaction.cleanup.interval.ms
    remove_expired_interval_ms: int  # transaction.remove.expired.transaction.cleanup.interval.ms
    id_expiration_ms: int  # transactional.id.expiration.ms


# A parked request: its coordinator partition, its handler, and the future ``_wake`` sets
# to the retry's write (or the CoordinatorError that retry met).
_Parked = tuple[int, Any, asyncio.Future[Any]]


class TransactionCoordinator(LedCoordinator[TransactionCoordinatorShard]):
    """Transactional ids of every `__transaction_state` partition this broker leads."""

    def __init__(
        self,
        writer: PartitionWriter,
        loader: CoordinatorLoader,
        topic: InternalTopic,
        clock: Callable[[], int],
        settings: TxnSettings,
        allocate_producer_id: Callable[[], int],
        markers: MarkerWriter,
        offsets_partition: Callable[[str], Awaitable[int]],
    ) -> None:
        """``offsets_partition(group_id)`` is the group's `__consumer_offsets` partition,
        once that topic exists."""
        super().__init__(
            CoordinatorRuntime(
                topic.name,
                writer,
                loader,
                clock,
                lambda index, epoch: TransactionCoordinatorShard(index, epoch, loading=True),
                pipelined=True,
                on_loaded=self._on_loaded,
                on_unloaded=self._on_unloaded,
            ),
            topic,
        )
        self._clock = clock
        self._settings = settings
        self._allocate_producer_id = allocate_producer_id
        self._markers = markers
        self._offsets_partition = offsets_partition
        self._tasks: dict[int, set[asyncio.Task[None]]] = {}  # marker tasks by partition
        # Requests waiting for their id's write or markers (see _run): id -> entries of
        # (partition, handler, the retry's write once begun).
        self._parked: dict[str, list[_Parked]] = {}
        self._timer: asyncio.Task[None] | None = None

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """At broker start: the timers, and the partitions this broker leads."""
        self._timer = asyncio.ensure_future(self._run_timeouts())
        await self._start_leading()

    async def stop(self) -> None:
        """Stop the timers and the marker tasks, and wait until they have ended. The tasks
        are collected before ``unload_all``, whose ``_on_unloaded`` cancels and forgets
        them: most of them sleep before their COMPLETE record's fsync (_write_markers)."""
        if self._timer is not None:
            self._timer.cancel()
        tasks = [t for group in self._tasks.values() for t in group]
        self._runtime.unload_all()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, *filter(None, [self._timer]), return_exceptions=True)

    def _on_loaded(self, partition: int, shard: TransactionCoordinatorShard) -> None:
        for marker in shard.finish_loading():
            log.info(
                "resuming %s of transactional id %r after restart",
                "commit" if marker.committed else "abort",
                marker.transactional_id,
            )
            self._spawn(partition, self._write_markers(partition, marker))

    def _on_unloaded(self, partition: int, shard: TransactionCoordinatorShard) -> None:
        """The new coordinator completes what this one was writing markers for; parked
        requests of the partition are answered NOT_COORDINATOR (by their retry)."""
        for task in self._tasks.pop(partition, set()):
            task.cancel()
        for tid in [t for t, entries in self._parked.items() if entries[0][0] == partition]:
            self._wake(tid)

    def _spawn(self, partition: int, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coroutine)
        tasks = self._tasks.setdefault(partition, set())
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    # -- requests ------------------------------------------------------------------------

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> TxnResponse:
        return await self._run(
            transactional_id,
            lambda shard, now: shard.init_producer_id(
                transactional_id,
                timeout_ms,
                producer_id,
                producer_epoch,
                now_ms=now,
                allocate_producer_id=self._allocate_producer_id,
                max_timeout_ms=self._settings.max_timeout_ms,
            ),
        )

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> TxnResponse:
        return await self._run(
            transactional_id,
            lambda shard, now: shard.add_partitions(
                transactional_id, producer_id, producer_epoch, partitions, now
            ),
        )

    async def add_offsets(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> TxnResponse:
        offsets_partition = (CONSUMER_OFFSETS, await self._offsets_partition(group_id))
        return await self._run(
            transactional_id,
            lambda shard, now: shard.add_offsets(
                transactional_id, producer_id, producer_epoch, group_id, offsets_partition, now
            ),
        )

    async def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> TxnResponse:
        return await self._run(
            transactional_id,
            lambda shard, now: shard.end_txn(
                transactional_id, producer_id, producer_epoch, commit, now
            ),
        )

    def check_write(
        self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str, index: int
    ) -> None:
        """KIP-890 part 1: a transactional batch must belong to the producer's ongoing
        transaction and to a partition added to it.

        While the id's partition loads (at start) or is out (after a storage failure)
        nothing can be verified: NOT_ENOUGH_REPLICAS, which every client retries and which
        is true (nothing was appended), as Kafka's produce path maps a coordinator that is
        loading or moving (and as cluster/txn_verification.py does). INVALID_TXN_STATE
        would make the producer abort a transaction that may be fine. Without a
        ``__transaction_state`` topic no transaction can exist: INVALID_TXN_STATE."""
        try:
            shard = self._runtime.shard(self.partition_of(transactional_id))
        except CoordinatorError as exc:
            if not self._topic.exists():
                raise KafkaError(
                    ErrorCode.invalid_txn_state,
                    f"transactional id {transactional_id!r} has no transaction",
                ) from None
            raise KafkaError(
                ErrorCode.not_enough_replicas,
                f"transactional id {transactional_id!r} cannot be verified now: {exc.message}",
            ) from None
        metadata = shard.get(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            raise KafkaError(
                ErrorCode.invalid_producer_id_mapping,
                f"producer {producer_id} is not {transactional_id!r}'s",
            )
        if producer_epoch != metadata.producer_epoch:
            # an older epoch is fenced; a newer one was never handed out (only
            # InitProducerId raises it), and its batch would open a transaction whose
            # markers, at the coordinator's epoch, the partition then refuses: Kafka's
            # PRODUCER_FENCED, which a produce answers as INVALID_PRODUCER_EPOCH
            raise KafkaError(
                ErrorCode.invalid_producer_epoch,
                f"epoch {producer_epoch} is not the current epoch "
                f"{metadata.producer_epoch} of {transactional_id!r}",
            )
        if metadata.state.is_prepared:
            # the transaction is ending and the producer's next one may already be on its
            # way: retriable, as Kafka's handleVerifyPartitionsInTransaction answers
            raise KafkaError(
                ErrorCode.concurrent_transactions,
                f"{transactional_id!r}'s transaction is completing",
            )
        if metadata.state is not TxnState.ONGOING or (topic, index) not in metadata.partitions:
            raise KafkaError(
                ErrorCode.invalid_txn_state,
                f"{topic}-{index} was not added to {transactional_id!r}'s transaction",
            )

    async def _run(
        self,
        transactional_id: str,
        handler: Callable[[TransactionCoordinatorShard, int], CoordinatorResult],
    ) -> TxnResponse:
        """Run ``handler`` on the id's shard through the runtime; send its markers.

        A request refused with CONCURRENT_TRANSACTIONS only because the id's previous
        write or its transaction's markers are in flight (the next transaction's
        AddPartitionsToTxn arriving while the last one's markers are written) is parked
        for up to ``CONCURRENT_WAIT_S`` and run again when that settles: the answer the
        client's retry would get, without the client's backoff (20 ms in librdkafka).
        When it waited for markers it runs in the same step as the COMPLETE record is
        appended, so both records share one fsync."""
        await self.ready()
        partition = self.partition_of(transactional_id)
        give_up = asyncio.get_running_loop().time() + CONCURRENT_WAIT_S
        try:
            write = self._runtime.begin_write(partition, handler)
            while True:
                result = await self._settled(partition, transactional_id, write)
                response = result.response or TxnResponse(ErrorCode.none)
                if response.error != ErrorCode.concurrent_transactions or not self._in_flight(
                    partition, transactional_id
                ):
                    return response
                retry = await self._park(partition, transactional_id, handler, give_up)
                if retry is None:
                    return response
                write = retry
        except CoordinatorError as exc:
            # A partition that is not ours, loading, or out after a storage failure refuses
            # every client retry alike until that changes, and the change is logged once
            # (the runtime's load, unload and failure lines): per request, DEBUG only.
            level = logging.DEBUG if exc.code in _NOT_COORDINATING else logging.WARNING
            log.log(level, "transactional id %r: %s", transactional_id, exc)
            return TxnResponse(exc.code)

    async def _settled(
        self, partition: int, transactional_id: str, write: InFlightWrite[CoordinatorResult]
    ) -> CoordinatorResult:
        """The write's result once durable and replayed, with what follows it begun: the
        requests parked behind the id woken, the transaction's markers sent.

        That follow-up does not depend on the requester. A client that goes away while its
        EndTxn's PREPARE record waits for its fsync gets its handler cancelled; without
        the follow-up the record would stay unreplayed (the id refused as busy) and its
        markers unsent, leaving the transaction prepared with nobody to complete it and
        every partition in it held below its last stable offset until a restart."""
        try:
            result = await write.settled()
        except asyncio.CancelledError:
            self._follow_up_later(partition, transactional_id, write)
            raise
        self._begin_what_follows(partition, transactional_id, result)
        return result

    def _follow_up_later(
        self, partition: int, transactional_id: str, write: InFlightWrite[CoordinatorResult]
    ) -> None:
        """Settle an abandoned write in a marker task of its partition, unless the
        partition is no longer coordinated here (resigned, or the coordinator stopped):
        then the next coordinator's load finds the record and completes what it began."""
        if partition in self._runtime.shards:
            self._spawn(partition, self._follow_up(partition, transactional_id, write))

    async def _follow_up(
        self, partition: int, transactional_id: str, write: InFlightWrite[CoordinatorResult]
    ) -> None:
        """``_settled`` for a write whose requester went away."""
        try:
            result = await write.settled()
        except CoordinatorError as exc:
            log.debug("transactional id %r: abandoned write: %s", transactional_id, exc)
            return
        self._begin_what_follows(partition, transactional_id, result)

    def _begin_what_follows(
        self, partition: int, transactional_id: str, result: CoordinatorResult
    ) -> None:
        """Once a write settled: run the requests parked behind the id, send its markers."""
        if result.records:
            self._wake(transactional_id)
        self._send_markers(partition, result)

    def _in_flight(self, partition: int, transactional_id: str) -> bool:
        """A write, or markers and the completion, are in flight for the id."""
        try:
            shard = self._runtime.shard(partition)  # not ``shards``: a new dict per call
        except CoordinatorError:
            return False
        metadata = shard.get(transactional_id)
        return shard.pending(transactional_id) is not None or (
            metadata is not None and metadata.state.is_prepared
        )

    async def _park(
        self,
        partition: int,
        transactional_id: str,
        handler: Callable[[TransactionCoordinatorShard, int], CoordinatorResult],
        give_up: float,
    ) -> InFlightWrite[CoordinatorResult] | None:
        """Wait until ``_wake`` runs ``handler`` again for the id; its write, or None if
        ``give_up`` (loop time) came first.

        A request that stops waiting (it gave up, or its task was cancelled: the broker
        stopping, the client gone) takes its entry back, so no later ``_wake`` begins a write
        for a request nobody answers."""
        retry: asyncio.Future[InFlightWrite[CoordinatorResult]]
        retry = asyncio.get_running_loop().create_future()
        entry = (partition, handler, retry)
        self._parked.setdefault(transactional_id, []).append(entry)
        left = give_up - asyncio.get_running_loop().time()
        try:
            await asyncio.wait([retry], timeout=max(left, 0))
        except asyncio.CancelledError:
            if retry.done() and retry.exception() is None:  # begun for us in this turn
                self._follow_up_later(partition, transactional_id, retry.result())
            raise
        finally:
            if not retry.done():
                self._unpark(transactional_id, entry)
        if retry.done():
            return retry.result()  # raises the CoordinatorError the retry met
        return None

    def _unpark(self, transactional_id: str, entry: _Parked) -> None:
        """Take back the entry of a request that stopped waiting before ``_wake`` ran it
        (``_wake`` empties an id's whole list at once, so the entry is still there)."""
        parked = self._parked[transactional_id]
        parked.remove(entry)
        if not parked:
            del self._parked[transactional_id]

    def _wake(self, transactional_id: str) -> None:
        """Run the requests parked for the id again, now, in this step."""
        for partition, handler, retry in self._parked.pop(transactional_id, []):
            try:
                retry.set_result(self._runtime.begin_write(partition, handler))
            except CoordinatorError as exc:
                retry.set_exception(exc)

    def _send_markers(self, partition: int, result: CoordinatorResult) -> None:
        for marker in result.markers:
            self._spawn(partition, self._write_markers(partition, marker))

    # -- markers -----------------------------------------------------------------------------

    async def _write_markers(self, partition: int, marker: MarkerRequest) -> None:
        """Write the marker to every participant until each holds it durably, then complete.

        A partition that was deleted is done with; one that refuses the marker as stale (a
        newer producer epoch or coordinator already wrote there) ends the sending in a
        cluster, the transaction left prepared, and is done with on one node
        (``_fenced_marker``); any other failure is retried, so no participant is left with
        an open transaction holding its LSO back.

        The task first lets one loop turn pass. It is begun in the step that finds the
        PREPARE record durable, so without that its first step (the markers' appends and
        the registration of their fsyncs) would run before the responder's wake-up, which
        the handler's return schedules after it: EndTxn's answer would wait for markers
        it does not depend on (issue 12). That relies on everything from the PREPARE
        record settling to the handler's return running in one step (``handle_end_txn``
        awaits nothing after ``end_txn``). Only EndTxn's path needs the yield; markers of a
        restart or of a timed-out transaction yield too, so that every marker task yields
        once alike and markers are still appended in the order they were asked for.
        """
        await asyncio.sleep(0)
        remaining = set(marker.partitions)
        while True:
            outcomes = await self._markers.write(
                marker.producer_id,
                marker.producer_epoch,
                marker.committed,
                marker.coordinator_epoch,
                sorted(remaining),
            )
            for (topic, index), code in outcomes.items():
                if code == ErrorCode.none:
                    remaining.discard((topic, index))
                elif code == ErrorCode.unknown_topic_or_partition:
                    log.info("marker for %s-%d not needed: the partition is gone", topic, index)
                    remaining.discard((topic, index))
                elif code in _FENCED_MARKER_ERRORS:
                    if not self._completes_despite(marker, topic, index, code):
                        # requests parked behind the id (_run) still wait out
                        # CONCURRENT_WAIT_S: it stays prepared, and woken they would park again
                        return
                    remaining.discard((topic, index))
                else:
                    log.warning("marker for %s-%d failed (%s); retrying", topic, index, code.name)
            if not remaining:
                break
            await asyncio.sleep(MARKER_RETRY_S)
        tid = marker.transactional_id
        try:
            completing = self._runtime.begin_write(
                partition, lambda shard, now: shard.complete(tid, now, marker)
            )
            self._wake(tid)  # the next transaction's request shares the COMPLETE's fsync
            # Nothing waits for the COMPLETE record: EndTxn was answered once PREPARE was
            # durable, and a request for the id may be decided on the COMPLETE being
            # written (the shard's _view). So its fsync is not asked for at once: the id's
            # next request (a producer's next AddPartitionsToTxn) appends after it, and the
            # fsync that request waits for covers both, one fsync round fewer per
            # transaction (issue 12). The wait below then finds it durable; without such a
            # request it asks for the fsync itself. A crash before then leaves the PREPARE
            # record for the next load to complete, as it always could.
            if completing.result.records:  # else stale: nothing was appended
                await asyncio.sleep(COMPLETION_FSYNC_DELAY_S)
            await completing.settled()
        except CoordinatorError as exc:  # the next load finds it prepared and completes it
            log.warning("could not complete %r: %s", tid, exc)
        self._wake(tid)

    def _completes_despite(
        self, marker: MarkerRequest, topic: str, index: int, code: ErrorCode
    ) -> bool:
        """A partition refused the marker as stale: whether to complete the transaction
        all the same.

        Kafka (TransactionMarkerRequestCompletionHandler) stops sending and leaves the
        transaction prepared: for conforming traffic the refusal means a newer coordinator,
        or a producer epoch only a newer coordinator hands out (after completing this
        transaction), wrote there, so this coordinator is stale and the newer one, having
        loaded the PREPARE record, completes it. A cluster does the same, with the same
        gap: a refusal no newer coordinator caused (markers an operator wrote at a newer
        epoch, a state this coordinator did not make) leaves the id prepared across every
        failover, as in Kafka. On one node there is no other coordinator (its epoch is
        always 0), so only those causes remain, and a transaction left prepared would stay
        so for good (every restart resends the marker into the same refusal; the id
        answers CONCURRENT_TRANSACTIONS meanwhile): it is completed, the partition named."""
        outcome = (
            "leaving the transaction prepared; a newer coordinator completes it, if one exists"
            if self.elected
            else "completing the transaction without it; that partition holds state of a "
            "newer epoch"
        )
        log.warning(
            "marker of %r (producer %d epoch %d) for %s-%d refused (%s): %s",
            marker.transactional_id,
            marker.producer_id,
            marker.producer_epoch,
            topic,
            index,
            code.name,
            outcome,
        )
        return not self.elected

    # -- timers ------------------------------------------------------------------------------

    async def _run_timeouts(self) -> None:
        """Abort transactions past their timeout (fencing the producer); expire idle ids."""
        settings = self._settings
        next_expiry_ms = self._clock() + settings.remove_expired_interval_ms
        while True:
            await asyncio.sleep(settings.abort_timed_out_interval_ms / 1000)
            now = self._clock()
            expire = now >= next_expiry_ms
            for partition in list(self._runtime.shards):
                try:
                    await self._abort_timed_out(partition)
                    if expire:
                        await self._runtime.write(
                            partition,
                            lambda shard, now: shard.expire_transactional_ids(
                                now, settings.id_expiration_ms
                            ),
                        )
                except CoordinatorError as exc:
                    log.warning("%s-%d: timers: %s", self._topic.name, partition, exc)
            if expire:
                next_expiry_ms = now + settings.remove_expired_interval_ms

    async def _abort_timed_out(self, partition: int) -> None:
        results = await self._runtime.write_each(
            partition, lambda shard, now: shard.abort_timed_out(now)
        )
        for result in results:
            for marker in result.markers:
                log.info("transactional id %r timed out: aborting", marker.transactional_id)
            self._send_markers(partition, result)
