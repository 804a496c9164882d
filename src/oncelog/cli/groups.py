"""`oncelog groups list|describe`: consumer groups, their committed offsets and their lag.

Seed 001's point: the usual LAG column is `high watermark - committed`. A read_committed
consumer can only read below the last stable offset (LSO), the first offset of the oldest
open transaction, so while a transaction hangs part of that lag cannot be consumed at all
and standard tools do not show it. `groups describe` shows both lags per partition:

    lag to HW  = high watermark - committed    (what Kafka's tools call LAG)
    lag to LSO = LSO - committed               (what a read_committed consumer can read now)
    unstable   = high watermark - LSO          (held back by open transactions)
"""

from __future__ import annotations

import struct
from dataclasses import asdict, dataclass, field
from typing import Any

import click

from oncelog.cli.output import (
    CliError,
    bootstrap_option,
    json_option,
    print_json,
    print_table,
    reports_errors,
)
from oncelog.client.connection import KafkaConnection
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode

LATEST = -1
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
OFFSET_FETCH_VERSION = 7  # the last one-group layout; 8+ batch groups
CONSUMER_PROTOCOL = "consumer"

COLUMNS = [
    "Topic",
    "Partition",
    "Committed",
    "High watermark",
    "Last stable",
    "Lag (HW)",
    "Lag (LSO)",
    "Unstable",
    "Member",
    "Client id",
]
NUMBER_COLUMNS = [
    "Partition",
    "Committed",
    "High watermark",
    "Last stable",
    "Lag (HW)",
    "Lag (LSO)",
    "Unstable",
]


def check(code: int, message: str | None, what: str) -> None:
    if code != ErrorCode.none:
        name = ErrorCode(code).name.upper()
        raise CliError(f"{what}: {name}" + (f": {message}" if message else ""))


# -- requests shared with `oncelog transactions` ------------------------------------------


def topic_partitions(conn: KafkaConnection, topics: list[str] | None) -> dict[str, list[int]]:
    """Partition indexes of the named topics (all topics, internal ones included, when None)."""
    response = conn.request(
        ApiKey.METADATA,
        {
            "topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
    )
    found = {}
    for topic in response.topics:
        check(topic.error_code, None, f"topic {topic.name!r}")
        found[topic.name] = sorted(p.partition_index for p in topic.partitions)
    return found


def latest_offsets(
    conn: KafkaConnection, partitions: dict[str, list[int]], isolation: int
) -> dict[tuple[str, int], int]:
    """ListOffsets latest: the high watermark (read_uncommitted) or the LSO (read_committed)."""
    if not partitions:
        return {}
    response = conn.request(
        ApiKey.LIST_OFFSETS,
        {
            "replica_id": -1,
            "isolation_level": isolation,
            "timeout": 30_000,
            "topics": [
                {
                    "name": name,
                    "partitions": [
                        {"partition_index": i, "current_leader_epoch": -1, "timestamp": LATEST}
                        for i in indexes
                    ],
                }
                for name, indexes in sorted(partitions.items())
            ],
        },
    )
    found = {}
    for topic in response.topics:
        for p in topic.partitions:
            check(p.error_code, None, f"offsets of {topic.name}-{p.partition_index}")
            found[(topic.name, p.partition_index)] = p.offset
    return found


# -- the consumer protocol's assignment --------------------------------------------------


def decode_assignment(data: bytes) -> list[tuple[str, int]] | None:
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


# -- model --------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupSummary:
    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: list[str] | None  # "topic-partition"; None: not the consumer protocol


@dataclass(frozen=True)
class PartitionLag:
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
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[Member] = field(default_factory=list)
    partitions: list[PartitionLag] = field(default_factory=list)

    @property
    def total_lag_hw(self) -> int:
        return sum(p.lag_hw or 0 for p in self.partitions)

    @property
    def total_lag_lso(self) -> int:
        return sum(p.lag_lso or 0 for p in self.partitions)


def list_groups(conn: KafkaConnection) -> list[GroupSummary]:
    response = conn.request(ApiKey.LIST_GROUPS, {"states_filter": [], "types_filter": []})
    check(response.error_code, None, "list groups")
    return sorted(
        (
            GroupSummary(g.group_id, g.protocol_type, getattr(g, "group_state", "") or "")
            for g in response.groups
        ),
        key=lambda g: g.group_id,
    )


def describe_group(conn: KafkaConnection, group_id: str) -> GroupDescription:
    response = conn.request(
        ApiKey.DESCRIBE_GROUPS, {"groups": [group_id], "include_authorized_operations": False}
    )
    (group,) = response.groups
    check(group.error_code, None, f"group {group_id!r}")
    members = []
    owner: dict[tuple[str, int], Any] = {}
    for m in group.members:
        pairs = (
            decode_assignment(bytes(m.member_assignment))
            if group.protocol_type == CONSUMER_PROTOCOL and m.member_assignment
            else None
        )
        for pair in pairs or ():
            owner[pair] = m
        members.append(
            Member(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                None if pairs is None else [f"{t}-{p}" for t, p in sorted(pairs)],
            )
        )
    fetched = conn.request(
        ApiKey.OFFSET_FETCH,
        {"group_id": group_id, "topics": None, "require_stable": False},
        version=OFFSET_FETCH_VERSION,
    )
    check(fetched.error_code, None, f"committed offsets of {group_id!r}")
    committed: dict[tuple[str, int], int] = {}
    for topic in fetched.topics:
        for p in topic.partitions:
            check(p.error_code, None, f"committed offset of {topic.name}-{p.partition_index}")
            if p.committed_offset >= 0:
                committed[(topic.name, p.partition_index)] = p.committed_offset
    wanted: dict[str, list[int]] = {}
    for topic, index in sorted(set(committed) | set(owner)):
        wanted.setdefault(topic, []).append(index)
    high = latest_offsets(conn, wanted, READ_UNCOMMITTED)
    stable = latest_offsets(conn, wanted, READ_COMMITTED)
    rows = []
    for key in sorted(set(committed) | set(owner)):
        done = committed.get(key)
        member = owner.get(key)
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
                member_id=None if member is None else member.member_id,
                client_id=None if member is None else member.client_id,
            )
        )
    return GroupDescription(
        group.group_id, group.group_state, group.protocol_type, group.protocol_data, members, rows
    )


# -- commands -----------------------------------------------------------------------------


@click.group()
def groups() -> None:
    """Consumer groups: state, members, committed offsets and lag (to the HW and the LSO)."""


@groups.command("list")
@bootstrap_option
@json_option
@reports_errors
def list_command(bootstrap: str, as_json: bool) -> None:
    """Every group the broker's coordinator knows, with its protocol type and state."""
    with KafkaConnection(bootstrap) as conn:
        found = list_groups(conn)
    if as_json:
        print_json([asdict(g) for g in found])
        return
    if not found:
        click.echo("No consumer groups.")
        return
    print_table(
        ["Group", "Protocol type", "State"],
        [(g.group_id, g.protocol_type or None, g.state) for g in found],
    )


@groups.command()
@bootstrap_option
@click.option("--group", "group_id", required=True, help="Group to describe.")
@json_option
@reports_errors
def describe(bootstrap: str, group_id: str, as_json: bool) -> None:
    """State, members and, per partition, the committed offset, the high watermark (HW),
    the last stable offset (LSO) and two lags.

    \b
    Lag (HW)   = HW - committed: the LAG column of Kafka's tools.
    Lag (LSO)  = LSO - committed: what a read_committed consumer can read now.
    Unstable   = HW - LSO: records behind an open transaction; a read_committed
                 consumer cannot get past them until it ends (see
                 `oncelog transactions find-hanging`).

    Partitions are those with a committed offset plus those assigned to a member
    (consumer protocol); '-' (null in JSON) means nothing committed.
    """
    with KafkaConnection(bootstrap) as conn:
        found = describe_group(conn, group_id)
    if as_json:
        data = asdict(found)
        data["total_lag_hw"] = found.total_lag_hw
        data["total_lag_lso"] = found.total_lag_lso
        print_json(data)
        return
    click.echo(
        f"Group {found.group_id}: state {found.state}"
        + (f", protocol {found.protocol_type}" if found.protocol_type else "")
        + (f"/{found.protocol}" if found.protocol else "")
        + f", {len(found.members)} member(s)"
    )
    for m in found.members:
        assigned = (
            "" if m.assignment is None else f" assigned {', '.join(m.assignment) or 'nothing'}"
        )
        click.echo(
            f"  member {m.member_id} (client {m.client_id}, {m.client_host or '-'}){assigned}"
        )
    if not found.partitions:
        click.echo("No committed offsets and no assigned partitions.")
        return
    print_table(
        COLUMNS,
        [
            (
                p.topic,
                p.partition,
                p.committed_offset,
                p.high_watermark,
                p.last_stable_offset,
                p.lag_hw,
                p.lag_lso,
                p.unstable,
                p.member_id,
                p.client_id,
            )
            for p in found.partitions
        ],
        right=NUMBER_COLUMNS,
    )
    click.echo(
        f"Total lag: {found.total_lag_hw} to the high watermark, "
        f"{found.total_lag_lso} to the last stable offset."
    )
