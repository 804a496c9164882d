"""One partition replica a cluster broker hosts: its Partition, its leader epochs, its role.

A replica is a leader (``LeaderRole``: the pure LeaderState of isr.py, the ZooKeeper version
of the partition state it may compare-and-set, the producers waiting for acks=all) or a
follower (``FollowerRole``: whom it fetches from, at which leader epoch), or neither (no
leader elected, or its leadership is from before this broker's registration).

Also the two small files a cluster replica keeps beside its log, in Kafka's formats:
``partition.metadata`` (the topic id, so a replica of a deleted and re-created topic is
never served as the new one) and the broker-wide ``replication-offset-checkpoint`` (each
partition's high watermark).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oncelog.broker.partition import Partition
from oncelog.cluster.isr import LeaderState
from oncelog.cluster.zookeeper import kafka_uuid, parse_kafka_uuid
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.storage.atomic_file import write_atomically
from oncelog.storage.leader_epoch import LeaderEpochCache

log = logging.getLogger(__name__)

PARTITION_METADATA = "partition.metadata"
HW_CHECKPOINT = "replication-offset-checkpoint"


@dataclass(slots=True)
class LeaderRole:
    """A replica that leads: its LeaderState, the znode version it may compare-and-set and
    the acks=all producers waiting for the ISR."""

    state: LeaderState
    zk_version: int
    controller_epoch: int
    min_insync: int
    # (end offset, waiter, whether the ISR must then have min.insync.replicas members):
    # acks=all producers and coordinator writes, and loads waiting for the high watermark.
    acks_waiting: list[tuple[int, asyncio.Future[None], bool]] = field(default_factory=list)
    # DeleteRecords waiting for every live replica's log start to reach an offset.
    low_watermark_waiting: list[tuple[int, asyncio.Future[int]]] = field(default_factory=list)

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    def release(self, high_watermark: int) -> None:
        """Answer the producers whose batches the ISR now all hold."""
        still = []
        for end_offset, waiter, min_insync in self.acks_waiting:
            if waiter.done():
                continue
            if end_offset <= high_watermark:
                if min_insync and len(self.state.isr) < self.min_insync:
                    waiter.set_exception(
                        KafkaError(
                            ErrorCode.not_enough_replicas_after_append,
                            f"written, but the ISR {sorted(self.state.isr)} is smaller than "
                            f"min.insync.replicas {self.min_insync}",
                        )
                    )
                else:
                    waiter.set_result(None)
            else:
                still.append((end_offset, waiter, min_insync))
        self.acks_waiting = still

    def release_low_watermark(self, low_watermark: int) -> None:
        """Answer the DeleteRecords requests whose offset every live replica's log start
        has now reached, with that low watermark."""
        still = []
        for offset, waiter in self.low_watermark_waiting:
            if waiter.done():
                continue
            if low_watermark >= offset:
                waiter.set_result(low_watermark)
            else:
                still.append((offset, waiter))
        self.low_watermark_waiting = still

    def take_waiters(self, other: LeaderRole) -> None:
        """Still the leader at a new epoch: the requests waiting on ``other`` wait here."""
        self.acks_waiting, other.acks_waiting = other.acks_waiting, []
        self.low_watermark_waiting, other.low_watermark_waiting = other.low_watermark_waiting, []

    def abandon(self, reason: str) -> None:
        """Leadership lost: every waiting producer gets NOT_LEADER_OR_FOLLOWER (it retries
        on the new leader; an idempotent producer's retry is deduplicated there), and so
        does every waiting DeleteRecords."""
        waiters: list[asyncio.Future[Any]] = [w for _, w, _ in self.acks_waiting]
        waiters += [w for _, w in self.low_watermark_waiting]
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(KafkaError(ErrorCode.not_leader_or_follower, reason))
        self.acks_waiting = []
        self.low_watermark_waiting = []


@dataclass(frozen=True, slots=True)
class FollowerRole:
    """A replica that follows: the leader it fetches from and at which leader epoch."""

    leader: int  # -1: no leader elected; nothing to fetch from
    leader_epoch: int


class Replica:
    """One partition this broker hosts in a cluster: its Partition, leader epochs, topic id
    and current role (leader, follower, or none)."""

    def __init__(self, partition: Partition, epochs: LeaderEpochCache, topic_id: uuid.UUID) -> None:
        self.partition = partition
        self.epochs = epochs
        self.topic_id = topic_id
        self.role: LeaderRole | FollowerRole | None = None

    @property
    def key(self) -> tuple[str, int]:
        return self.partition.topic, self.partition.index

    @property
    def leader_epoch(self) -> int:
        return -1 if self.role is None else self.role.leader_epoch

    def __repr__(self) -> str:
        return f"Replica({self.partition.topic}-{self.partition.index}, {self.role!r})"


# -- partition.metadata ------------------------------------------------------------------------


def read_topic_id(directory: Path) -> uuid.UUID | None:
    """The topic id recorded in a partition directory, None if none (or unreadable)."""
    try:
        text = (directory / PARTITION_METADATA).read_text()
    except FileNotFoundError:
        return None
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    try:
        return parse_kafka_uuid(fields["topic_id"].strip())
    except (KeyError, ValueError):
        log.warning("ignoring malformed %s", directory / PARTITION_METADATA)
        return None


def write_topic_id(directory: Path, topic_id: uuid.UUID) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    write_atomically(
        directory / PARTITION_METADATA, f"version: 0\ntopic_id: {kafka_uuid(topic_id)}\n".encode()
    )


# -- replication-offset-checkpoint -------------------------------------------------------------


def read_high_watermarks(data_dir: Path) -> dict[tuple[str, int], int]:
    try:
        lines = (data_dir / HW_CHECKPOINT).read_text().splitlines()
    except FileNotFoundError:
        return {}
    found = {}
    try:
        if lines[0] != "0":
            raise ValueError(f"version {lines[0]!r}")
        for line in lines[2 : 2 + int(lines[1])]:
            topic, partition, offset = line.rsplit(" ", 2)
            found[(topic, int(partition))] = int(offset)
    except (ValueError, IndexError) as exc:
        log.warning("ignoring malformed %s: %s", data_dir / HW_CHECKPOINT, exc)
        return {}
    return found


def write_high_watermarks(data_dir: Path, marks: dict[tuple[str, int], int]) -> None:
    lines = ["0", str(len(marks))]
    lines += [
        f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(marks.items())
    ]
    write_atomically(data_dir / HW_CHECKPOINT, ("\n".join(lines) + "\n").encode())
