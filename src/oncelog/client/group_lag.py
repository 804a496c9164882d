"""A consumer group's lag to the high watermark and to the last stable offset.

Seed 001's point: the usual LAG column is ``high watermark - committed``. A read_committed
consumer can only read below the last stable offset (LSO), the first offset of the oldest
open transaction, so while a transaction hangs part of that lag cannot be consumed at all
and standard tools do not show it. Per partition:

    lag to HW  = high watermark - committed    (what Kafka's tools call LAG)
    lag to LSO = LSO - committed               (what a read_committed consumer can read now)
    unstable   = high watermark - LSO          (held back by open transactions)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from oncelog.client.admin import Admin, Isolation, OffsetSpec, TopicPartition

__all__ = [
    "GroupLag",
    "MemberAssignment",
    "PartitionLag",
    "decode_assignment",
    "describe_group_lag",
]

CONSUMER_PROTOCOL = "consumer"


@dataclass(frozen=True)
class MemberAssignment:
    """A member and the partitions it is assigned (consumer protocol only)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: list[str] | None  # "topic-partition"; None: not the consumer protocol


@dataclass(frozen=True)
class PartitionLag:
    """One partition's committed offset, ends and lags, and the member that owns it."""

    topic: str
    partition: int
    committed_offset: int | None  # None: nothing committed
    high_watermark: int
    last_stable_offset: int
    lag_hw: int | None
    lag_lso: int | None
    unstable: int  # high watermark - LSO: records held back by open transactions
    member_id: str | None
    client_id: str | None


@dataclass(frozen=True)
class GroupLag:
    """A group's state and members, and the lag of every partition it committed or owns."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberAssignment] = field(default_factory=list)
    partitions: list[PartitionLag] = field(default_factory=list)

    @property
    def total_lag_hw(self) -> int:
        return sum(p.lag_hw or 0 for p in self.partitions)

    @property
    def total_lag_lso(self) -> int:
        return sum(p.lag_lso or 0 for p in self.partitions)


def decode_assignment(data: bytes) -> list[TopicPartition] | None:
    """(topic, partition) pairs of a ConsumerProtocolAssignment (versions 0-3, which share
    the layout: version, [topic, [partition]], user data); None if it does not parse."""
    try:
        (version,), pos = struct.unpack_from(">h", data, 0), 2
        if version < 0:
            return None
        (count,), pos = struct.unpack_from(">i", data, pos), pos + 4
        pairs = []
        for _ in range(max(count, 0)):
            (size,), pos = struct.unpack_from(">h", data, pos), pos + 2
            topic, pos = data[pos : pos + size].decode("utf-8"), pos + size
            (n,), pos = struct.unpack_from(">i", data, pos), pos + 4
            indexes = struct.unpack_from(f">{max(n, 0)}i", data, pos)
            pos += 4 * max(n, 0)
            pairs += [(topic, i) for i in indexes]
        return pairs
    except (struct.error, UnicodeDecodeError):
        return None


def describe_group_lag(admin: Admin, group_id: str) -> GroupLag:
    """The group's members and, for every partition it committed or a member owns, the
    committed offset, high watermark, LSO and both lags."""
    group = admin.describe_group(group_id)
    members = []
    owner: dict[TopicPartition, MemberAssignment] = {}
    for m in group.members:
        pairs = (
            decode_assignment(m.assignment)
            if group.protocol_type == CONSUMER_PROTOCOL and m.assignment
            else None
        )
        member = MemberAssignment(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            None if pairs is None else [f"{t}-{p}" for t, p in sorted(pairs)],
        )
        members.append(member)
        for pair in pairs or ():
            owner[pair] = member
    committed = admin.committed_offsets(group_id)
    keys = sorted(set(committed) | set(owner))
    wanted: dict[str, list[int]] = {}
    for topic, index in keys:
        wanted.setdefault(topic, []).append(index)
    high = admin.list_offsets(wanted, OffsetSpec.LATEST)
    stable = admin.list_offsets(wanted, OffsetSpec.LATEST, Isolation.READ_COMMITTED)
    rows = []
    for key in keys:
        done = committed.get(key)
        holder = owner.get(key)
        rows.append(
            PartitionLag(
                topic=key[0],
                partition=key[1],
                committed_offset=done,
                high_watermark=high[key],
                last_stable_offset=stable[key],
                lag_hw=None if done is None else high[key] - done,
                lag_lso=None if done is None else stable[key] - done,
                unstable=high[key] - stable[key],
                member_id=None if holder is None else holder.member_id,
                client_id=None if holder is None else holder.client_id,
            )
        )
    return GroupLag(group.group_id, group.state, group.protocol_type, group.protocol, members, rows)
