"""Rebuild a partition's producer state at start: newest valid snapshot, then the log tail.

Every batch header carries producer id, epoch and sequences, so the log alone is enough to
rebuild the state; snapshots only bound how much of it must be read. Start-up therefore
costs the tail after the newest snapshot, not the whole log.
"""

from __future__ import annotations

import logging
from pathlib import Path

from oncelog.producers.snapshot import (
    CorruptSnapshot,
    list_snapshots,
    read_state,
    snapshot_path,
)
from oncelog.producers.state import CompletedTxn, ProducerStateManager, TxnMarker
from oncelog.protocol.record_batch import control_marker
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
    replayed = 0
    indexed_until = partition_log.last_aborted_marker_offset()
    for _, header in partition_log.scan_headers(replay_from):
        if header.base_offset < replay_from:
            continue
        marker = None
        if header.is_control and header.has_producer_id:
            marker = _read_marker(partition_log, header.base_offset, header.size)
        completed = manager.replay(header, marker=marker)
        replayed += 1
        if completed is not None and completed.aborted and completed.last_offset > indexed_until:
            # The marker survived a crash that its index entry did not: write it again.
            index_aborted(partition_log, manager, completed)
    if replayed:
        log.info(
            "%s: rebuilt producer state from offset %d (%d batches replayed)",
            directory.name,
            replay_from,
            replayed,
        )
    manager.remove_expired(now_ms, expiration_ms)
    return manager


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


def _read_marker(partition_log: PartitionLog, offset: int, size: int) -> TxnMarker | None:
    found = control_marker(partition_log.read(offset, size))
    if found is None:
        return None
    committed, coordinator_epoch = found
    return TxnMarker(committed, coordinator_epoch)
