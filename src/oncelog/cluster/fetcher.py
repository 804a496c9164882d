"""A follower's fetcher: one per leader broker (Kafka's ReplicaFetcherThread), for every
partition this broker follows on that leader.

A partition joins the fetcher needing truncation. While any does, the fetcher asks the
leader OffsetsForLeaderEpoch (KIP-101/KIP-279) and cuts each diverged tail (truncation.py);
then it fetches from each partition's log end offset, with its replica id and the leader
epoch it follows, appends the batches exactly as the leader stored them, and takes the
leader's high watermark (capped by its own log end). A fetch that the leader refuses with a
leader-epoch error waits for this broker's metadata to catch up (the watch brings the new
state, and the replica manager moves the partition to the right fetcher).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oncelog.clock import wall_clock_ms
from oncelog.cluster.peer import (
    FETCH_VERSION,
    OFFSETS_FOR_LEADER_EPOCH_VERSION,
    PeerConnection,
    PeerError,
    PeerLink,
)
from oncelog.cluster.truncation import decide_truncation
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import crc_is_valid, iter_stored_batches
from oncelog.storage.leader_epoch import UNDEFINED_EPOCH

if TYPE_CHECKING:
    from oncelog.cluster.replica import Replica
    from oncelog.cluster.replica_manager import ReplicaManager
    from oncelog.storage import PartitionLog

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 30.0  # Kafka's replica.socket.timeout.ms


@dataclass(slots=True)
class _Target:
    replica: Replica
    leader_epoch: int
    truncating: bool = True
    retry_at_ms: int = 0


class ReplicaFetcher:
    """Kafka's ReplicaFetcherThread for one leader broker: truncates, then fetches every
    partition this broker follows on that leader (see the module docstring)."""

    def __init__(self, manager: ReplicaManager, leader: int) -> None:
        self.leader = leader
        self._manager = manager
        self._targets: dict[tuple[str, int], _Target] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._link = PeerLink(
            manager.node.cache,
            leader,
            f"oncelog-replica-{manager.broker_id}",
            manager.node.peer_security,
        )

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"fetcher-{self.leader}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._link.close()

    def add(self, replica: Replica, leader_epoch: int) -> None:
        self._targets[replica.key] = _Target(replica, leader_epoch)
        self._wake.set()

    def remove(self, key: tuple[str, int]) -> None:
        self._targets.pop(key, None)

    def brokers_changed(self) -> None:
        """The live brokers changed: drop the connection if the leader registered again."""
        self._link.refresh()

    # -- the loop --------------------------------------------------------------------------

    async def _run(self) -> None:
        backoff_s = self._manager.config.replica_fetch_backoff_ms / 1000
        while True:
            now = wall_clock_ms()
            ready = [t for t in self._targets.values() if t.retry_at_ms <= now]
            if not ready:
                self._wake.clear()
                try:
                    async with asyncio.timeout(backoff_s):
                        await self._wake.wait()
                except TimeoutError:
                    pass
                continue
            connection = self._link.connection()
            if connection is None:
                await asyncio.sleep(backoff_s)
                continue
            try:
                truncating = [t for t in ready if t.truncating]
                if truncating:
                    await self._truncate(connection, truncating)
                else:
                    await self._fetch(connection, ready)
            except PeerError as exc:
                log.info("fetching from broker %d failed: %s", self.leader, exc)
                await asyncio.sleep(backoff_s)
            except Exception:
                log.exception("fetcher for broker %d failed; retrying", self.leader)
                await asyncio.sleep(backoff_s)

    def _current(self, key: tuple[str, int], target: _Target) -> bool:
        """Whether an answer still concerns what we asked (the role may have moved on)."""
        return self._targets.get(key) is target

    def _back_off(self, target: _Target) -> None:
        target.retry_at_ms = wall_clock_ms() + self._manager.config.replica_fetch_backoff_ms

    # -- truncation ------------------------------------------------------------------------

    async def _truncate(self, connection: PeerConnection, targets: list[_Target]) -> None:
        asking = []
        for target in targets:
            replica = target.replica
            if (
                replica.epochs.latest_epoch == UNDEFINED_EPOCH
                and not replica.partition.log.size_bytes()
            ):
                target.truncating = False  # an empty log has no tail to cut
                continue
            asking.append(target)
        if not asking:
            return
        by_topic: dict[str, list[_Target]] = {}
        for target in asking:
            by_topic.setdefault(target.replica.partition.topic, []).append(target)
        response = await connection.request(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            OFFSETS_FOR_LEADER_EPOCH_VERSION,
            {
                "replica_id": self._manager.broker_id,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {
                                "partition": t.replica.partition.index,
                                "current_leader_epoch": t.leader_epoch,
                                "leader_epoch": t.replica.epochs.latest_epoch,
                            }
                            for t in group
                        ],
                    }
                    for topic, group in by_topic.items()
                ],
            },
            REQUEST_TIMEOUT_S,
        )
        for topic_answer in response.topics:
            for answer in topic_answer.partitions:
                key = (topic_answer.topic, answer.partition)
                found = self._targets.get(key)
                if found is None or found not in asking:
                    continue
                target = found
                if answer.error_code != ErrorCode.none:
                    log.info(
                        "broker %d refused OffsetsForLeaderEpoch for %s-%d: %s",
                        self.leader,
                        *key,
                        answer.error_code.name,
                    )
                    self._back_off(target)
                    continue
                self._apply_truncation(target, answer.leader_epoch, answer.end_offset)

    def _apply_truncation(self, target: _Target, leader_epoch: int, end_offset: int) -> None:
        replica = target.replica
        partition = replica.partition
        end = partition.log.log_end_offset
        decision = decide_truncation(
            replica.epochs, end, partition.high_watermark, leader_epoch, end_offset
        )
        if decision.offset < end:
            log.warning(
                "%s-%d: truncating the diverged tail %d..%d (leader %d says epoch %d ended at %d)",
                partition.topic,
                partition.index,
                decision.offset,
                end,
                self.leader,
                leader_epoch,
                end_offset,
            )
        # Kafka's doTruncate runs for every decision, one at the log end too: it cuts
        # nothing there but still drops an epoch entry starting at the log end (see
        # ReplicaManager.truncate).
        self._manager.truncate(replica, decision.offset)
        target.truncating = not decision.complete

    # -- fetching --------------------------------------------------------------------------

    async def _fetch(self, connection: PeerConnection, targets: list[_Target]) -> None:
        config = self._manager.config
        by_topic: dict[str, list[_Target]] = {}
        for target in targets:
            by_topic.setdefault(target.replica.partition.topic, []).append(target)
        wait_ms = config.replica_fetch_wait_max_ms
        response = await connection.request(
            ApiKey.FETCH,
            FETCH_VERSION,
            {
                "replica_id": self._manager.broker_id,
                "max_wait": wait_ms,
                "min_bytes": config.replica_fetch_min_bytes,
                "max_bytes": config.replica_fetch_response_max_bytes,
                "isolation_level": 0,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {
                                "partition": t.replica.partition.index,
                                "current_leader_epoch": t.leader_epoch,
                                "fetch_offset": t.replica.partition.log.log_end_offset,
                                "last_fetched_epoch": -1,
                                "log_start_offset": t.replica.partition.log.log_start_offset,
                                "partition_max_bytes": config.replica_fetch_max_bytes,
                            }
                            for t in group
                        ],
                    }
                    for topic, group in by_topic.items()
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            },
            REQUEST_TIMEOUT_S + wait_ms / 1000,
        )
        moved_start = []
        for topic_answer in response.responses:
            for answer in topic_answer.partitions:
                key = (topic_answer.topic, answer.partition_index)
                found = self._targets.get(key)
                if (
                    found is not None
                    and found in targets
                    and self._apply_fetched(key, found, answer)
                ):
                    moved_start.append(found.replica.partition.log)
        if moved_start:
            # Durable before the next fetch tells the leader (a DeleteRecords answer waits
            # for it), as the leader's own is before it answers.
            await asyncio.to_thread(_write_log_starts, moved_start)

    def _apply_fetched(self, key: tuple[str, int], target: _Target, answer: Any) -> bool:
        """Append what the leader returned and take its high watermark and log start;
        whether the log start moved."""
        replica = target.replica
        partition = replica.partition
        code = answer.error_code
        if code == ErrorCode.offset_out_of_range:
            self._out_of_range(target, answer.log_start_offset)
            return False
        if code != ErrorCode.none:
            log.info("broker %d refused to serve %s-%d: %s", self.leader, *key, code.name)
            self._back_off(target)
            return False
        records = answer.records or b""
        now = wall_clock_ms()
        appended = 0
        for position, header in iter_stored_batches(records):
            batch = memoryview(records)[position : position + header.size]
            if not crc_is_valid(batch):
                log.error(
                    "%s-%d: batch at offset %d from broker %d fails its CRC; fetching again",
                    *key,
                    header.base_offset,
                    self.leader,
                )
                break
            if header.partition_leader_epoch > replica.epochs.latest_epoch:
                replica.epochs.assign(header.partition_leader_epoch, header.base_offset)
            partition.append_replicated(batch, header, now)
            appended += 1
        if appended and partition.flush_due():
            self._manager.flusher.request_flush(partition)
        self._manager.follower_high_watermark(replica, answer.high_watermark)
        return self._manager.follow_log_start(replica, answer.log_start_offset)

    def _out_of_range(self, target: _Target, leader_log_start: int) -> None:
        partition = target.replica.partition
        if 0 <= partition.log.log_end_offset < leader_log_start:
            log.warning(
                "%s-%d: the leader's log starts at %d, past our end %d: starting over there",
                partition.topic,
                partition.index,
                leader_log_start,
                partition.log.log_end_offset,
            )
            self._manager.restart_log_at(target.replica, leader_log_start)
        else:
            target.truncating = True  # our end is past the leader's: check epochs again


def _write_log_starts(logs: list[PartitionLog]) -> None:
    for partition_log in logs:
        partition_log.write_log_start_checkpoint()
