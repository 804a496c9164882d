"""One topic-partition as the broker sees it: its log, its producers, its offsets and
who waits on it.

All writes to a partition happen on the event loop, one after another (one writer per
partition): a batch is validated against the producer state, appended, and the state
committed, with no await in between. Only the fsync runs on a worker thread (see
durability.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from oncelog.broker.config import TopicConfig
from oncelog.producers.loader import index_aborted, load_producer_state
from oncelog.producers.snapshot import delete_snapshots_below, snapshot_path, write_snapshot
from oncelog.producers.state import Append, Duplicate, ProducerStateManager, Refuse, TxnMarker
from oncelog.protocol.compression import CODEC_IDS, NONE
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.record_batch import (
    BatchHeader,
    build_control_batch,
    control_marker,
    parse_header,
    split_batches,
)
from oncelog.protocol.record_validation import (
    RecordRules,
    max_uncompressed_bytes,
    validate_records,
)
from oncelog.storage import AppendResult, PartitionLog
from oncelog.storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PartitionSettings:
    """The topic configuration a partition acts on at append and flush time."""

    max_message_bytes: int
    log_append_time: bool
    flush_messages: int
    flush_ms: int
    records: RecordRules | None  # None: produced records are not read (benchmarks only)


def record_rules(topic: TopicConfig) -> RecordRules | None:
    """What produce checks in this topic's records and how it stores them (None when
    ``oncelog.record.validation.enable`` is off)."""
    if not topic.broker.record_validation_enable:
        return None
    codec = topic.get("compression.type")
    max_message_bytes = topic.get("max.message.bytes")
    return RecordRules(
        max_uncompressed_bytes=max_uncompressed_bytes(max_message_bytes),
        target_compression=None if codec == "producer" else CODEC_IDS.get(codec, NONE),
        max_message_bytes=max_message_bytes,
        log_append_time=topic.get("message.timestamp.type") == "LogAppendTime",
        timestamp_before_max_ms=topic.get("message.timestamp.before.max.ms"),
        timestamp_after_max_ms=topic.get("message.timestamp.after.max.ms"),
        compacted="compact" in topic.get("cleanup.policy"),
    )


@dataclass(frozen=True, slots=True)
class ProduceOutcome:
    """Where a produced batch is (or, for a retried duplicate, already was) in the log."""

    base_offset: int
    last_offset: int
    log_append_time_ms: int
    duplicate: bool


class Partition:
    """One topic-partition on the broker: its log, producer state, high watermark and last
    stable offset, and the fetches waiting for new data (see the module docstring)."""

    def __init__(
        self,
        topic: str,
        index: int,
        log: PartitionLog,
        producers: ProducerStateManager,
        settings: PartitionSettings,
    ) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.producers = producers
        self.settings = settings
        self._unflushed_since_ms: int | None = None
        self._waiters: list[asyncio.Future[None]] = []
        log.on_roll = self._snapshot_producers
        # Cluster mode: the leader epoch stamped on every batch this broker appends as
        # leader, and the replicated high watermark. A single node leaves both alone (epoch
        # 0; every appended batch is committed).
        self.leader_epoch = 0
        self.replicated_high_watermark: int | None = None
        # A client's append failed in the log write and none has succeeded since: the
        # produce path logs the first such failure, not each retry.
        self.client_writes_failing = False
        # Cluster mode: told when a failed write or flush has left the log offline (until a
        # restart), so the replica manager moves the partition's leadership. None on one node.
        self.on_offline: Callable[[Partition], None] | None = None

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.index})"

    # -- offsets -------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        """On a single node every appended batch is committed: the HW is the log end. In a
        cluster it is what every in-sync replica holds (set by the replica manager)."""
        if self.replicated_high_watermark is None:
            return self.log.log_end_offset
        return self.replicated_high_watermark

    @property
    def last_stable_offset(self) -> int:
        """First offset of the oldest open transaction, or the high watermark: what a
        read_committed consumer may read up to."""
        first_unstable = self.producers.first_unstable_offset()
        if first_unstable is None:
            return self.high_watermark
        # DeleteRecords may have moved the log start past an open transaction's start.
        return max(min(first_unstable, self.high_watermark), self.log_start_offset)

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    # -- producing -----------------------------------------------------------------------

    def append_records(self, records: bytes, now_ms: int) -> ProduceOutcome:
        """Validate the one batch a produce request carries for this partition and append
        it, unless its producer already appended it (a retry), or its sequence or epoch
        is refused (KafkaError). Whether a transactional batch belongs to an ongoing
        transaction is the caller's check (it needs the transaction coordinator)."""
        header, batch = self.split(records, now_ms)
        return self.append_client_batch(batch, header, now_ms)

    def split(self, records: bytes, now_ms: int) -> tuple[BatchHeader, memoryview | bytes]:
        """The one batch of a produce request, its header and its records validated, and
        recompressed if the topic's compression.type says so (KafkaError if refused)."""
        ((header, batch),) = split_batches(
            records, max_message_bytes=self.settings.max_message_bytes
        )
        rules = self.settings.records
        if rules is None:
            return header, batch
        stored = validate_records(header, batch, rules, now_ms)
        return (header, batch) if stored is batch else (parse_header(stored), stored)

    def append_client_batch(
        self, batch: memoryview | bytes, header: BatchHeader, now_ms: int
    ) -> ProduceOutcome:
        """Append a batch `split` validated (the produce path splits once, then checks
        transactional batches against the coordinator before appending)."""
        return self._append_checked(batch, header, now_ms, from_client=True)

    def append_from_coordinator(self, batch: bytes, now_ms: int) -> ProduceOutcome:
        """Append a batch a coordinator built (no sequence numbers: Kafka's coordinator
        origin checks only the producer epoch of transactional offset commits)."""
        return self._append_checked(batch, parse_header(batch), now_ms, from_client=False)

    def _append_checked(
        self, batch: bytes | memoryview, header: BatchHeader, now_ms: int, *, from_client: bool
    ) -> ProduceOutcome:
        """Validate against the producer state, append, commit the state: no await between."""
        if not header.has_producer_id:
            return self._outcome(self.append_batch(batch, header, now_ms))
        decision = self.producers.validate(header, from_client=from_client)
        if isinstance(decision, Refuse):
            raise KafkaError(decision.error_code, decision.message)
        if isinstance(decision, Duplicate):
            log.debug(
                "%r: duplicate of batch at %d..%d from producer %d",
                self,
                decision.first_offset,
                decision.last_offset,
                header.producer_id,
            )
            return ProduceOutcome(
                decision.first_offset, decision.last_offset, decision.timestamp, duplicate=True
            )
        assert isinstance(decision, Append)
        result = self.append_batch(batch, header, now_ms)
        append_time = result.log_append_time_ms if self.settings.log_append_time else None
        self.producers.commit(
            decision.pending, result.base_offset, result.last_offset, timestamp=append_time
        )
        return self._outcome(result)

    def append_batch(
        self, batch: bytes | memoryview, header: BatchHeader, now_ms: int
    ) -> AppendResult:
        try:  # not ``_offline_on_failure``: 1.3 µs more per append (timeit, 11-24, load 0.3)
            result = self.log.append(
                batch,
                header,
                now_ms,
                log_append_time=self.settings.log_append_time,
                leader_epoch=self.leader_epoch,
            )
        except OSError:
            self.check_offline()
            raise
        self._wake_waiters()
        return result

    @contextmanager
    def _offline_on_failure(self) -> Iterator[None]:
        """Around a rare log write (an index entry, a cut): an ``OSError`` that left the log
        offline is reported (``check_offline``) before it reaches the caller."""
        try:
            yield
        except OSError:
            self.check_offline()
            raise

    def take_offline(self, cause: str) -> None:
        """Take the log offline until the restart (``PartitionLog.take_offline``) and tell
        ``on_offline``."""
        self.log.take_offline(cause)
        self.check_offline()

    def check_offline(self) -> None:
        """After a log write or flush failed: tell ``on_offline`` if it left the log
        offline (a torn write that could not be cut back, a failed fsync, an aborted-transaction
        index write that failed)."""
        if self.on_offline is not None and self.log.failed:
            try:
                self.on_offline(self)
            except Exception:  # the write's own error must still reach its caller
                log.exception("%r: handling its offline log failed", self)

    def append_replicated(
        self, batch: bytes | memoryview, header: BatchHeader, now_ms: int
    ) -> None:
        """A follower's append: the leader's batch byte for byte. The producer state learns
        from it as at recovery (Kafka's replication origin: the leader validated it), so a
        follower that becomes leader answers retries and knows open transactions."""
        try:  # as ``append_batch``: a follower's every append
            self.log.append_replicated(batch, header, now_ms)
        except OSError:
            self.check_offline()
            raise
        marker = None
        if header.is_control and header.has_producer_id:
            found = control_marker(batch)
            marker = None if found is None else TxnMarker(*found)
        completed = self.producers.replay(header, marker=marker)
        if completed is not None and completed.aborted:
            with self._offline_on_failure():
                index_aborted(self.log, self.producers, completed)
        self._wake_waiters()

    def truncate_to(self, offset: int, now_ms: int, producer_id_expiration_ms: int) -> None:
        """Cut the log at ``offset`` (a follower's diverged tail) and rebuild the producer
        state from what remains (snapshots past the new end are deleted)."""
        with self._offline_on_failure():
            self.log.truncate_to(offset)
        self.producers = load_producer_state(
            self.log.directory, self.log, now_ms, producer_id_expiration_ms
        )
        if self.replicated_high_watermark is not None:
            self.replicated_high_watermark = min(
                self.replicated_high_watermark, self.log.log_end_offset
            )

    @staticmethod
    def _outcome(result: AppendResult) -> ProduceOutcome:
        return ProduceOutcome(
            result.base_offset, result.last_offset, result.log_append_time_ms, duplicate=False
        )

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        now_ms: int,
    ) -> int:
        """Write a COMMIT or ABORT marker ending `producer_id`'s transaction; its offset.

        An abort is also recorded in the aborted-transaction index, with the stable offset
        right after it, so read_committed fetches can tell consumers what to skip.
        """
        decision = self.producers.validate_marker(
            producer_id, producer_epoch, TxnMarker(commit, coordinator_epoch), now_ms
        )
        if isinstance(decision, Refuse):
            raise KafkaError(decision.error_code, decision.message)
        assert isinstance(decision, Append)
        marker = build_control_batch(
            commit,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            base_offset=0,
            timestamp_ms=now_ms,
        )
        result = self.append_batch(marker, parse_header(marker), now_ms)
        completed = self.producers.commit(decision.pending, result.base_offset, result.last_offset)
        if completed is not None and completed.aborted:
            with self._offline_on_failure():
                self.log.append_aborted_txn(
                    AbortedTxn(
                        completed.producer_id,
                        completed.first_offset,
                        completed.last_offset,
                        self.last_stable_offset,
                    )
                )
        return result.base_offset

    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        return self.log.aborted_txns(start_offset, end_offset)

    # -- producer state upkeep -------------------------------------------------------------

    def _snapshot_producers(self, offset: int) -> None:
        """Write the producer snapshot at ``offset``; never for a failed log (at a roll, a
        DeleteRecords or the close): its next start recovers it and must replay the tail,
        since an ABORT marker whose index entry was lost is indexed again only by that
        replay (``producers.loader``)."""
        if not self.log.failed:
            write_snapshot(self.log.directory, offset, self.producers)

    def expire_producers(self, now_ms: int, expiration_ms: int) -> list[int]:
        return self.producers.remove_expired(now_ms, expiration_ms)

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start up to ``offset``; the new log start (the low
        watermark). Kafka's checks: within [0, high watermark] (OFFSET_OUT_OF_RANGE), and
        only where the cleanup policy deletes (POLICY_VIOLATION on compact-only topics), and
        not on a failed log (KAFKA_STORAGE_ERROR, as for a partition of an offline log
        directory: nothing is deleted from a failing disk before its recovery)."""
        if self.log.failed:
            raise KafkaError(
                ErrorCode.kafka_storage_error,
                f"The log of {self.topic}-{self.index} is offline until the broker restarts",
            )
        if not 0 <= offset <= self.high_watermark:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"Cannot delete records of {self.topic}-{self.index} before offset {offset}: "
                f"the offsets are 0 to the high watermark {self.high_watermark}",
            )
        if not self.log.config.delete:
            raise KafkaError(
                ErrorCode.policy_violation,
                f"Records of partition {self.topic}-{self.index} can not be deleted due to the "
                "configured policy",
            )
        return self.move_log_start(offset)

    def move_log_start(self, offset: int) -> int:
        """Raise the log start offset to ``offset`` (DeleteRecords on a leader, or a
        follower taking its leader's log start); the new log start. The producer state is
        kept (KIP-360): it is snapshotted at the log end first, so a restart does not have
        to rebuild it from batches that are gone. The caller persists the new start."""
        if offset > self.log.log_start_offset:
            self._snapshot_producers(self.log.log_end_offset)
            self.log.advance_log_start(offset)
            self.after_retention()
        return self.log.log_start_offset

    def after_retention(self) -> None:
        """Snapshots below the log start describe batches that are gone: delete them."""
        delete_snapshots_below(self.log.directory, self.log.log_start_offset)

    def close(self) -> None:
        """Snapshot the producers at the log end (a clean start then replays nothing),
        unless nothing was ever appended or that snapshot is already on disk."""
        end = self.log.log_end_offset
        if end > 0 and not snapshot_path(self.log.directory, end).exists():
            self._snapshot_producers(end)
        self.log.close()

    # -- durability --------------------------------------------------------------------------

    @property
    def fsync_before_ack(self) -> bool:
        """acks=-1 waits for an fsync when every message is to be flushed (the default)."""
        return self.settings.flush_messages <= 1

    def flush_due(self) -> bool:
        """More unflushed messages than `flush.messages` allows."""
        return self.log.log_end_offset - self.log.recovery_point >= self.settings.flush_messages

    def flush_overdue(self, now_ms: int) -> bool:
        """Unflushed data older than `flush.ms` (checked by the maintenance task)."""
        if self.log.log_end_offset <= self.log.recovery_point:
            self._unflushed_since_ms = None
            return False
        if self._unflushed_since_ms is None:
            self._unflushed_since_ms = now_ms
        return now_ms - self._unflushed_since_ms >= self.settings.flush_ms

    # -- long polls ----------------------------------------------------------------------------

    def wait_for_append(self, waiter: asyncio.Future[None]) -> None:
        """Resolve `waiter` at the next append (used by long-polling fetches)."""
        self._waiters.append(waiter)

    def forget_waiter(self, waiter: asyncio.Future[None]) -> None:
        try:
            self._waiters.remove(waiter)
        except ValueError:
            pass

    def wake_readers(self) -> None:
        """Wake long-polling fetches: the high watermark moved (cluster mode)."""
        self._wake_waiters()

    def _wake_waiters(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
