"""A follower's cut, and a replica dropped, fail the durability waiters of what they removed.

A demoted leader's acks=all appends and coordinator writes may still wait on the
group-commit flusher when the new leader's log makes this broker cut its diverged tail
(`ReplicaManager.truncate`) or drop its whole log (`restart_log_at`), or when the replica
is dropped (its topic moved to other brokers or was deleted, or the broker stops). The
replica manager tells the flusher (`GroupCommitFlusher.cut`, also tested on its own in
tests/broker/test_group_commit_flusher.py, and `GroupCommitFlusher.drop`); these tests pin
that each path does, with Kafka's answer. No ZooKeeper: an idle node, a real partition
log, stand-ins for the rest of the partition.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from oncelog.broker.durability import GroupCommitFlusher
from oncelog.cluster.replica_manager import ReplicaManager
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.storage import PartitionLog

from ..storage.test_index_durability import CONFIG, append_batches
from .test_hw_checkpoint import idle_node


class _Partition:
    """What the replica manager's two cuts use of a broker.partition.Partition."""

    def __init__(self, log: PartitionLog) -> None:
        self.log = log
        self.replicated_high_watermark: int | None = None

    def truncate_to(self, offset: int, now_ms: int, producer_id_expiration_ms: int) -> None:
        self.log.truncate_to(offset)

    def after_retention(self) -> None:
        """No producer snapshots here."""

    def check_offline(self) -> None:
        """The flusher's hook after a failed fsync: none fail here."""

    @property
    def high_watermark(self) -> int:
        return 0

    def close(self) -> None:
        self.log.close()


@pytest.mark.parametrize("how", ["truncate", "restart_log_at"])
def test_both_cuts_of_a_follower_fail_the_waiters_of_what_they_removed(
    tmp_path: Path, how: str
) -> None:
    async def scenario() -> None:
        log = PartitionLog.open(tmp_path / "t-0", CONFIG, clean_shutdown=False)
        append_batches(log, 0, 10)  # offsets 0-19, appended while this broker led
        partition = _Partition(log)
        epochs = SimpleNamespace(truncate_from_end=lambda _: None, clear=lambda: None)
        replica: Any = SimpleNamespace(partition=partition, epochs=epochs)
        node = idle_node()
        node.truncating = lambda partition, offset: None
        flusher = GroupCommitFlusher()
        flusher.start()
        manager = ReplicaManager(node, tmp_path, flusher, clean_start=True)  # type: ignore[arg-type]
        try:
            waiting = flusher.wait_durable(partition, 20)  # type: ignore[arg-type]
            if how == "truncate":
                manager.truncate(replica, 10)
            else:
                manager.restart_log_at(replica, 30)
            with pytest.raises(KafkaError) as raised:
                await asyncio.wait_for(waiting, 5)
            assert raised.value.code == ErrorCode.not_leader_or_follower
        finally:
            await asyncio.wait_for(flusher.stop(), 5)
            log.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        # Kafka's answer for a partition no longer hosted whose topic lives on (left to the
        # flusher's next round, the closed log's UNKNOWN_TOPIC_OR_PARTITION)
        ("moved-away", ErrorCode.not_leader_or_follower),
        ("deleted", ErrorCode.unknown_topic_or_partition),
        ("broker-stopping", ErrorCode.not_leader_or_follower),
    ],
)
def test_a_dropped_replica_fails_its_waiters_as_kafka_answers(
    tmp_path: Path, how: str, expected: ErrorCode
) -> None:
    async def scenario() -> None:
        log = PartitionLog.open(tmp_path / "t-0", CONFIG, clean_shutdown=False)
        append_batches(log, 0, 10)
        partition = _Partition(log)
        replica: Any = SimpleNamespace(partition=partition, role=None, key=("t", 0))
        node = idle_node()
        if how == "moved-away":
            node.cache.topics = {"t": SimpleNamespace(replicas={0: [2, 3]})}
        flusher = GroupCommitFlusher()
        flusher.start()
        manager = ReplicaManager(node, tmp_path, flusher, clean_start=True)  # type: ignore[arg-type]
        manager.replicas[("t", 0)] = replica
        try:
            waiting = flusher.wait_durable(partition, 20)  # type: ignore[arg-type]
            if how == "broker-stopping":
                await manager.stop()
            else:
                manager._reconcile(("t", 0))  # a metadata change without this broker runs it
                assert ("t", 0) not in manager.replicas
            with pytest.raises(KafkaError) as raised:
                await asyncio.wait_for(waiting, 5)
            assert raised.value.code == expected
        finally:
            await asyncio.wait_for(flusher.stop(), 5)
            log.close()

    asyncio.run(scenario())
