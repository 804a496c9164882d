"""Rebuild a partition's producer state at start: newest valid snapshot, then the log tail.

Every batch header carries producer id, epoch and sequences, so the log alone is enough to
rebuild the state; snapshots only bound how much of it must be read. Start-up therefore
costs the tail after the newest snapshot, not the whole log.
"""

from __future__ import annotations

import logging
from pathlib import Path

from oncelog.collector import collector_paused
from oncelog.producers.snapshot import (
    CorruptSnapshot,
    list_snapshots,
    read_state,
    snapshot_path,
)
from oncelog.producers.state import BatchMetadata, CompletedTxn, ProducerStateManager, TxnMarker
from oncelog.protocol.record_batch import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    LOG_OVERHEAD,
    PRODUCER_FIELDS,
    control_marker,
    last_sequence,
    parse_header,
)
from oncelog.storage import PartitionLog
from oncelog.storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)


def load_producer_state(
    directory: Path, partition_log: PartitionLog, now_ms: int, expiration_ms: int
) -> ProducerStateManager:
    """The producer state as of the log end offset, without producers already expired."""
    log_end = partition_log.log_end_offset
    for stale in (o for o in list_snapshots(directory) if o > log_end):
        # Written before a crash truncated the log: it describes batches that are gone.
        snapshot_path(directory, stale).unlink(missing_ok=True)
    manager = ProducerStateManager()
    replay_from = partition_log.log_start_offset
    for offset in reversed(list_snapshots(directory)):
        try:
            manager = read_state(snapshot_path(directory, offset))
        except CorruptSnapshot as exc:
            log.warning(
                "ignoring corrupt producer snapshot %s: %s", snapshot_path(directory, offset), exc
            )
            snapshot_path(directory, offset).unlink(missing_ok=True)
            continue
        replay_from = max(offset, partition_log.log_start_offset)
        break
    replayed = _replay_tail(manager, partition_log, replay_from)
    if replayed:
        log.info(
            "%s: rebuilt producer state from offset %d (%d batches replayed)",
            directory.name,
            replay_from,
            replayed,
        )
    manager.remove_expired(now_ms, expiration_ms)
    return manager


def _replay_tail(
    manager: ProducerStateManager, partition_log: PartitionLog, replay_from: int
) -> int:
    """Replay every batch from ``replay_from`` on into ``manager``; returns how many.

    The tail after a snapshot can hold a batch from each of a hundred thousand producers,
    so a data batch costs one compiled ``struct`` read of the fields producer state uses
    and one entry, with no ``BatchHeader`` built; markers (a few per transaction) take
    the general path. The cyclic collector is paused meanwhile: the entries kept form no
    cycles, yet their numbers set off collections that traverse them again and again
    (about a quarter of the replay's CPU, measured)."""
    indexed_until = partition_log.last_aborted_marker_offset()
    unpack = PRODUCER_FIELDS.unpack_from
    replayed = 0
    with collector_paused():
        for run in partition_log.batch_runs(replay_from):
            pos, end = 0, len(run)
            while pos < end:
                base, length, attributes, delta, max_ts, pid, epoch, base_seq = unpack(run, pos)
                batch_at, pos = pos, pos + LOG_OVERHEAD + length
                if base < replay_from or pid < 0:
                    continue
                replayed += 1
                if not attributes & ATTR_CONTROL:
                    last_seq = last_sequence(base_seq, delta)
                    batch = BatchMetadata(base_seq, last_seq, base, base + delta, max_ts)
                    manager.replay_data(pid, epoch, batch, bool(attributes & ATTR_TRANSACTIONAL))
                    continue
                _replay_marker(manager, partition_log, run[batch_at:pos], indexed_until)
    return replayed


def _replay_marker(
    manager: ProducerStateManager,
    partition_log: PartitionLog,
    batch: memoryview,
    indexed_until: int,
) -> None:
    """Replay a control batch; an abort marker past the aborted-transaction index's end
    survived a crash that its index entry did not: write the entry again."""
    found = control_marker(batch)
    marker = None if found is None else TxnMarker(*found)
    completed = manager.replay(parse_header(batch), marker=marker)
    if completed is not None and completed.aborted and completed.last_offset > indexed_until:
        index_aborted(partition_log, manager, completed)


def index_aborted(
    partition_log: PartitionLog, manager: ProducerStateManager, completed: CompletedTxn
) -> None:
    """Record a transaction its marker aborted in the aborted-transaction index, with the
    stable offset right after the marker (what read_committed fetches need)."""
    stable = manager.first_unstable_offset()
    partition_log.append_aborted_txn(
        AbortedTxn(
            completed.producer_id,
            completed.first_offset,
            completed.last_offset,
            completed.last_offset + 1 if stable is None else stable,
        )
    )
