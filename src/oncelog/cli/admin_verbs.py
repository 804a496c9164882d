"""The operator verbs Kafka's tools have (``kafka-topics --alter``, ``kafka-configs``,
``kafka-delete-records``, ``kafka-consumer-groups --delete|--delete-offsets|
--reset-offsets``), over the Kafka protocol, with tables and ``--json``.

``oncelog configs`` and ``oncelog records`` are their own command groups; ``topics alter``
and the ``groups`` verbs are registered on the existing groups (see ``cli/main.py``).

On a cluster the admin client (``client/admin.py``) sends each request where Kafka's tools
send it: a broker's own configuration to that broker, CreatePartitions to the controller,
DeleteRecords to each partition's leader.
"""

from __future__ import annotations

import click

from oncelog.broker.config import ConfigSource
from oncelog.cli.output import (
    CliError,
    bootstrap_option,
    json_option,
    parse_key_values,
    print_json,
    print_table,
    reports_errors,
)
from oncelog.client.admin import Admin, ConfigResourceType, OffsetSpec
from oncelog.client.connection import Bootstrap
from oncelog.protocol.errors import ErrorCode

RESOURCE_TYPES = {"topics": ConfigResourceType.TOPIC, "brokers": ConfigResourceType.BROKER}

entity_type_option = click.option(
    "--entity-type",
    type=click.Choice(sorted(RESOURCE_TYPES)),
    required=True,
    help="What to configure.",
)
entity_name_option = click.option(
    "--entity-name",
    default="",
    help="Topic name, or broker id ('' with brokers: the cluster-wide default).",
)


# -- configs -------------------------------------------------------------------------------


@click.group()
def configs() -> None:
    """Describe and alter topic and broker configuration (kafka-configs)."""


@configs.command("describe")
@bootstrap_option
@entity_type_option
@entity_name_option
@click.option("--all", "show_all", is_flag=True, help="Also keys left at their default.")
@json_option
@reports_errors
def describe_configs(
    bootstrap: Bootstrap, entity_type: str, entity_name: str, show_all: bool, as_json: bool
) -> None:
    """Each key's value and where it comes from (topic override, dynamic, static, default)."""
    with Admin.connect(bootstrap) as admin:
        entries = admin.describe_configs(RESOURCE_TYPES[entity_type], entity_name)
    rows = [
        {
            "name": c.name,
            "value": c.value,
            "source": _SOURCES.get(c.source, str(c.source)),
            "read_only": c.read_only,
        }
        for c in entries
        if show_all or c.source != ConfigSource.DEFAULT_CONFIG
    ]
    if as_json:
        print_json(rows)
        return
    print_table(
        ["Key", "Value", "Source", "Read-only"],
        [(r["name"], r["value"], r["source"], "yes" if r["read_only"] else "") for r in rows],
    )


_SOURCES: dict[int, str] = {
    ConfigSource.TOPIC_CONFIG: "topic",
    ConfigSource.DYNAMIC_BROKER_CONFIG: "dynamic broker",
    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG: "dynamic default",
    ConfigSource.STATIC_BROKER_CONFIG: "static",
    ConfigSource.DEFAULT_CONFIG: "default",
}


@configs.command("alter")
@bootstrap_option
@entity_type_option
@entity_name_option
@click.option(
    "--add-config", "additions", multiple=True, metavar="KEY=VALUE", help="Set a key (repeatable)."
)
@click.option("--delete-config", "deletions", multiple=True, metavar="KEY", help="Unset a key.")
@click.option("--validate-only", is_flag=True, help="Check the change, apply nothing.")
@json_option
@reports_errors
def alter_configs(
    bootstrap: Bootstrap,
    entity_type: str,
    entity_name: str,
    additions: tuple[str, ...],
    deletions: tuple[str, ...],
    validate_only: bool,
    as_json: bool,
) -> None:
    """Set and unset keys (IncrementalAlterConfigs: other keys stay as they are)."""
    set_keys = parse_key_values(additions, "--add-config")
    if not set_keys and not deletions:
        raise click.UsageError("give --add-config and/or --delete-config")
    with Admin.connect(bootstrap) as admin:
        admin.alter_configs(
            RESOURCE_TYPES[entity_type],
            entity_name,
            set_keys,
            deletions,
            validate_only=validate_only,
        )
    changed = [*set_keys, *deletions]
    if as_json:
        print_json({"changed": changed, "validate_only": validate_only})
    else:
        verb = "Valid" if validate_only else "Changed"
        click.echo(f"{verb}: {', '.join(changed)} of {entity_type} {entity_name!r}.")


# -- topics alter ----------------------------------------------------------------------------


@click.command("alter")
@bootstrap_option
@click.option("--topic", required=True, help="Topic to change.")
@click.option(
    "--partitions", type=click.IntRange(min=1), required=True, help="New partition count."
)
@json_option
@reports_errors
def alter_topic(bootstrap: Bootstrap, topic: str, partitions: int, as_json: bool) -> None:
    """Add partitions to a topic (CreatePartitions; existing data does not move)."""
    with Admin.connect(bootstrap) as admin:
        admin.create_partitions(topic, partitions)
    if as_json:
        print_json({"topic": topic, "partitions": partitions})
    else:
        click.echo(f"Topic {topic} now has {partitions} partitions.")


# -- records ---------------------------------------------------------------------------------


@click.group()
def records() -> None:
    """Delete records (kafka-delete-records)."""


@records.command("delete")
@bootstrap_option
@click.option("--topic", required=True)
@click.option("--partition", "partitions", type=int, multiple=True, help="Default: all.")
@click.option(
    "--before",
    "offset",
    type=int,
    default=OffsetSpec.LATEST.value,
    show_default=True,
    help="Delete the records below this offset (-1: everything up to the high watermark).",
)
@json_option
@reports_errors
def delete_records(
    bootstrap: Bootstrap, topic: str, partitions: tuple[int, ...], offset: int, as_json: bool
) -> None:
    """Move the log start offset of partitions up (DeleteRecords)."""
    with Admin.connect(bootstrap) as admin:
        indexes = list(partitions) or admin.topic_partitions([topic])[topic]
        low_watermarks = admin.delete_records(topic, dict.fromkeys(indexes, offset))
    rows = [{"partition": p, "low_watermark": low} for p, low in low_watermarks.items()]
    if as_json:
        print_json(rows)
    else:
        print_table(
            ["Partition", "Log start"],
            [(r["partition"], r["low_watermark"]) for r in rows],
            right=["Partition", "Log start"],
        )


# -- groups delete / delete-offsets / reset-offsets --------------------------------------


@click.command("delete")
@bootstrap_option
@click.option("--group", "group_ids", multiple=True, required=True, help="Group (repeatable).")
@json_option
@reports_errors
def delete_groups(bootstrap: Bootstrap, group_ids: tuple[str, ...], as_json: bool) -> None:
    """Delete Empty groups and their committed offsets (DeleteGroups)."""
    with Admin.connect(bootstrap) as admin:
        outcomes = admin.delete_groups(group_ids)
    rows = [(group, _error_name(code)) for group, code in outcomes.items()]
    if as_json:
        print_json([{"group": g, "error": e} for g, e in rows])
    else:
        print_table(["Group", "Result"], rows)
    failed = [g for g, e in rows if e != "OK"]
    if failed:
        raise CliError(f"not deleted: {', '.join(failed)}")


@click.command("delete-offsets")
@bootstrap_option
@click.option("--group", "group_id", required=True)
@click.option("--topic", required=True)
@click.option("--partition", "partitions", type=int, multiple=True, help="Default: all.")
@json_option
@reports_errors
def delete_offsets(
    bootstrap: Bootstrap, group_id: str, topic: str, partitions: tuple[int, ...], as_json: bool
) -> None:
    """Delete a group's committed offsets of a topic (OffsetDelete)."""
    with Admin.connect(bootstrap) as admin:
        indexes = list(partitions) or admin.topic_partitions([topic])[topic]
        outcomes = admin.delete_group_offsets(group_id, topic, indexes)
    rows = [(t, p, _error_name(code)) for (t, p), code in outcomes.items()]
    if as_json:
        print_json([{"topic": t, "partition": p, "error": e} for t, p, e in rows])
    else:
        print_table(["Topic", "Partition", "Result"], rows, right=["Partition"])
    if any(e != "OK" for _, _, e in rows):
        raise CliError("some offsets were not deleted")


@click.command("reset-offsets")
@bootstrap_option
@click.option("--group", "group_id", required=True)
@click.option("--topic", required=True)
@click.option("--partition", "partitions", type=int, multiple=True, help="Default: all.")
@click.option("--to-earliest", "target", flag_value="earliest", help="The log start offsets.")
@click.option("--to-latest", "target", flag_value="latest", help="The high watermarks.")
@click.option("--to-offset", "to_offset", type=int, help="This offset on every partition.")
@click.option("--execute", is_flag=True, help="Commit them (otherwise: only show the plan).")
@json_option
@reports_errors
def reset_offsets(
    bootstrap: Bootstrap,
    group_id: str,
    topic: str,
    partitions: tuple[int, ...],
    target: str | None,
    to_offset: int | None,
    execute: bool,
    as_json: bool,
) -> None:
    """Set a group's committed offsets (the group must be Empty, as in Kafka's tool)."""
    if (target is None) == (to_offset is None):
        raise click.UsageError("give one of --to-earliest, --to-latest, --to-offset")
    with Admin.connect(bootstrap) as admin:
        indexes = list(partitions) or admin.topic_partitions([topic])[topic]
        if to_offset is not None:
            plan = {(topic, i): to_offset for i in indexes}
        else:
            spec = OffsetSpec.EARLIEST if target == "earliest" else OffsetSpec.LATEST
            plan = admin.list_offsets({topic: indexes}, spec)
        if execute:
            admin.alter_group_offsets(group_id, plan)
    rows = [(t, p, offset) for (t, p), offset in sorted(plan.items())]
    if as_json:
        print_json(
            {
                "executed": execute,
                "offsets": [{"topic": t, "partition": p, "offset": o} for t, p, o in rows],
            }
        )
        return
    print_table(["Topic", "Partition", "New offset"], rows, right=["Partition", "New offset"])
    if not execute:
        click.echo("Nothing changed: add --execute to commit these offsets.")


def _error_name(code: int) -> str:
    return "OK" if code == ErrorCode.none else ErrorCode(code).name.upper()
