"""A follower drops the leader epoch it began as leader and appended nothing in.

The case Kafka's UnifiedLog.truncateTo guards against ("this broker was a leader and
inserted the first start offset entry, but then failed to append any entries before
another leader was elected"): broker A, elected at epoch 1 with its log ending at 20,
records (1, 20) and loses leadership before appending. As the new leader's follower it asks
about epoch 1; the leader answers that epoch 0 ended at 30 (its records 20..29, written
under epoch 0, that A had not fetched yet); A's own epoch 0 ends at its log end, so nothing
is cut. If (1, 20) stayed, the batches 20..29 A fetches next would sit under it, and A,
leading later, would answer OffsetsForLeaderEpoch(0) with 20 where the log says 30: a
follower would cut committed records 20..29 below its high watermark (shown on a 3-broker
cluster by the cluster audit, notes/audit-cluster.md M1). No ZooKeeper: an idle node, a real
partition log and leader-epoch checkpoint, the fetcher's truncation step.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from oncelog.cluster.fetcher import ReplicaFetcher, _Target
from oncelog.cluster.replica_manager import ReplicaManager
from oncelog.storage import PartitionLog
from oncelog.storage.leader_epoch import LeaderEpochCache

from ..storage.test_index_durability import CONFIG, append_batches
from .test_hw_checkpoint import idle_node
from .test_truncation_waiters import _Partition


def follower(tmp_path: Path, *entries: tuple[int, int]) -> tuple[Any, _Target, PartitionLog]:
    """A follower whose log holds offsets 0-19 and whose leader-epoch cache holds
    ``entries``, and its fetcher's target on leader broker 2."""
    log = PartitionLog.open(tmp_path / "t-0", CONFIG, clean_shutdown=False)
    append_batches(log, 0, 10)  # offsets 0-19
    epochs = LeaderEpochCache(tmp_path / "t-0" / "leader-epoch-checkpoint")
    for epoch, start in entries:
        epochs.assign(epoch, start)
    partition = _Partition(log)
    partition.topic, partition.index = "t", 0  # type: ignore[attr-defined]
    replica: Any = SimpleNamespace(partition=partition, epochs=epochs)
    node = idle_node()
    node.peer_security = None
    manager = ReplicaManager(node, tmp_path, flusher=None, clean_start=True)  # type: ignore[arg-type]
    return ReplicaFetcher(manager, leader=2), _Target(replica, leader_epoch=3), log


def test_an_epoch_begun_at_the_log_end_goes_when_the_leader_says_nothing_diverged(
    tmp_path: Path,
) -> None:
    # Elected at epoch 1 at the log end, deposed before appending.
    fetcher, target, log = follower(tmp_path, (0, 0), (1, 20))
    epochs = target.replica.epochs
    try:
        fetcher._apply_truncation(target, leader_epoch=0, end_offset=30)

        assert log.log_end_offset == 20  # nothing of the log was cut
        assert [(e.epoch, e.start_offset) for e in epochs.entries] == [(0, 0)]
        assert not target.truncating
        # The checkpoint says so too (reloaded as after fetching 20..29: log end 30).
        reloaded = LeaderEpochCache.load(tmp_path / "t-0", 0, 30)
        assert [(e.epoch, e.start_offset) for e in reloaded.entries] == [(0, 0)]
    finally:
        log.close()


def test_a_round_that_ends_at_the_log_end_asks_about_an_older_epoch_next(
    tmp_path: Path,
) -> None:
    """The leader never had epoch 2 (this broker's, begun at its log end): it answers for
    epoch 2 with its epoch 1, which this broker never had, so the round is incomplete and
    lands at the log end. The next round must ask about epoch 0; asking about epoch 2 again
    would get the same answer for ever, and the partition would never fetch."""
    fetcher, target, log = follower(tmp_path, (0, 0), (2, 20))
    epochs = target.replica.epochs
    try:
        fetcher._apply_truncation(target, leader_epoch=1, end_offset=25)

        assert log.log_end_offset == 20
        assert target.truncating  # another round
        assert epochs.latest_epoch == 0  # the epoch it asks about next
    finally:
        log.close()
