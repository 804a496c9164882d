"""`oncelog topics`: create, list, describe and delete topics over the Kafka protocol."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import click

from oncelog.cli.output import (
    CliError,
    bootstrap_option,
    json_option,
    parse_key_values,
    print_json,
    print_table,
    reports_errors,
)
from oncelog.client.admin import Admin, TopicDescription
from oncelog.client.connection import Bootstrap

NUMBER_COLUMNS = [
    "Partition",
    "Leader",
    "Log start",
    "High watermark",
    "Last stable",
    "Log end",
    "Segments",
    "Bytes",
]


@click.group()
def topics() -> None:
    """Create, list, describe and delete topics."""


@topics.command()
@bootstrap_option
@click.option("--topic", required=True, help="Name of the topic to create.")
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    help="Partition count [default: the broker's num.partitions].",
)
@click.option(
    "--replication-factor",
    type=int,
    default=-1,
    help="Replicas per partition; a single node accepts only 1 [default: the broker's].",
)
@click.option(
    "--config",
    "configs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Topic config override, e.g. retention.ms=60000 (repeatable).",
)
@json_option
@reports_errors
def create(
    bootstrap: Bootstrap,
    topic: str,
    partitions: int | None,
    replication_factor: int,
    configs: tuple[str, ...],
    as_json: bool,
) -> None:
    """Create a topic."""
    overrides = parse_key_values(configs, "--config")
    with Admin.connect(bootstrap) as admin:
        created = admin.create_topic(topic, partitions or -1, replication_factor, overrides)
    if as_json:
        print_json(asdict(created))
    else:
        click.echo(
            f"Created topic {created.name} ({created.partitions} partitions,"
            f" id {created.topic_id})."
        )


@topics.command("list")
@bootstrap_option
@json_option
@reports_errors
def list_topics(bootstrap: Bootstrap, as_json: bool) -> None:
    """List every topic, internal ones included."""
    with Admin.connect(bootstrap) as admin:
        found = admin.list_topics()
    if as_json:
        print_json([asdict(t) for t in found])
    else:
        print_table(
            ["Topic", "Partitions", "Internal", "Topic id"],
            [(t.name, t.partitions, "yes" if t.internal else "", t.topic_id) for t in found],
            right=["Partitions"],
        )


@topics.command()
@bootstrap_option
@click.option("--topic", required=True, help="Topic to describe.")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="The broker's data directory, when the CLI runs on the broker's machine: "
    "needed for the segment count, which no Kafka API reports "
    "(shown as '-' without it).",
)
@json_option
@reports_errors
def describe(bootstrap: Bootstrap, topic: str, data_dir: Path | None, as_json: bool) -> None:
    """Offsets, segments and bytes of each partition; replicas and ISR in a cluster.

    Per partition: leader, log start offset, high watermark, last stable offset, log end
    offset, segments and bytes. Offsets come from ListOffsets (earliest; latest
    read_uncommitted; latest read_committed) asked of each partition's leader, bytes and the
    log end from DescribeLogDirs. On a single node the log end offset equals the high
    watermark. In a cluster the table adds replicas, ISR and whether the partition is
    under-replicated (fewer in-sync replicas than replicas), and counts those. The segment
    count needs --data-dir.
    """
    with Admin.connect(bootstrap) as admin:
        description = admin.describe_topic(topic)
    segments = (
        {p.partition: _count_segments(data_dir, topic, p.partition) for p in description.partitions}
        if data_dir
        else {}
    )
    if as_json:
        print_json(_describe_json(description, segments))
        return
    summary = description.summary
    click.echo(f"Topic {summary.name}  id {summary.topic_id}  partitions {summary.partitions}")
    click.echo(f"Log dir {description.log_dir or '-'}")
    columns = list(NUMBER_COLUMNS)
    rows: list[list[object]] = [
        [
            p.partition,
            p.leader if p.leader >= 0 else "none",
            *(
                None if value < 0 else value
                for value in (
                    p.log_start_offset,
                    p.high_watermark,
                    p.last_stable_offset,
                    p.log_end_offset,
                )
            ),
            segments.get(p.partition),
            p.size_bytes,
        ]
        for p in description.partitions
    ]
    if description.replicated:
        columns += ["Replicas", "ISR", "Under-replicated"]
        for row, p in zip(rows, description.partitions, strict=True):
            row += [_ids(p.replicas), _ids(p.isr), "yes" if p.under_replicated else ""]
    print_table(columns, rows, right=NUMBER_COLUMNS)
    if description.replicated:
        under = [p.partition for p in description.partitions if p.under_replicated]
        click.echo(
            f"Under-replicated partitions: {len(under)}"
            + (f" ({', '.join(map(str, under))})" if under else "")
        )


def _ids(brokers: tuple[int, ...]) -> str:
    return ",".join(map(str, brokers))


def _describe_json(description: TopicDescription, segments: dict[int, int]) -> dict[str, object]:
    summary = description.summary
    return {
        "name": summary.name,
        "topic_id": summary.topic_id,
        "internal": summary.internal,
        "log_dir": description.log_dir,
        "partitions": [
            {
                "partition": p.partition,
                "leader": p.leader,
                "log_start_offset": p.log_start_offset,
                "high_watermark": p.high_watermark,
                "last_stable_offset": p.last_stable_offset,
                "log_end_offset": p.log_end_offset,
                "segments": segments.get(p.partition),
                "size_bytes": p.size_bytes,
                "replicas": list(p.replicas),
                "isr": list(p.isr),
                "under_replicated": p.under_replicated,
            }
            for p in description.partitions
        ],
    }


def _count_segments(data_dir: Path, topic: str, partition: int) -> int:
    """Segments are `<base offset>.log` files in `<data dir>/<topic>-<partition>/`."""
    directory = data_dir / f"{topic}-{partition}"
    if not directory.is_dir():
        raise CliError(f"{directory} does not exist: is --data-dir the broker's data directory?")
    return sum(1 for f in directory.glob("*.log") if f.stem.isdigit())


@topics.command()
@bootstrap_option
@click.option("--topic", required=True, help="Topic to delete, with all its data.")
@json_option
@reports_errors
def delete(bootstrap: Bootstrap, topic: str, as_json: bool) -> None:
    """Delete a topic and its data."""
    with Admin.connect(bootstrap) as admin:
        topic_id = admin.delete_topic(topic)
    if as_json:
        print_json({"name": topic, "topic_id": topic_id, "deleted": True})
    else:
        click.echo(f"Deleted topic {topic}.")
