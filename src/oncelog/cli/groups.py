"""`oncelog groups list|describe`: consumer groups, their committed offsets and their lag
to the high watermark and to the last stable offset (:mod:`oncelog.client.group_lag`)."""

from __future__ import annotations

from dataclasses import asdict

import click

from oncelog.cli.output import (
    bootstrap_option,
    json_option,
    print_json,
    print_table,
    reports_errors,
)
from oncelog.client.admin import Admin
from oncelog.client.connection import Bootstrap
from oncelog.client.group_lag import describe_group_lag

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


# -- commands -----------------------------------------------------------------------------


@click.group()
def groups() -> None:
    """Consumer groups: state, members, committed offsets and lag (to the HW and the LSO)."""


@groups.command("list")
@bootstrap_option
@json_option
@reports_errors
def list_command(bootstrap: Bootstrap, as_json: bool) -> None:
    """Every group the broker's coordinator knows, with its protocol type and state."""
    with Admin.connect(bootstrap) as admin:
        found = admin.list_groups()
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
def describe(bootstrap: Bootstrap, group_id: str, as_json: bool) -> None:
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
    with Admin.connect(bootstrap) as admin:
        found = describe_group_lag(admin, group_id)
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
