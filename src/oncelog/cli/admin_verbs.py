"""The operator verbs Kafka's tools have (``kafka-topics --alter``, ``kafka-configs``,
``kafka-delete-records``, ``kafka-consumer-groups --delete|--delete-offsets|
--reset-offsets``), over the Kafka protocol, with tables and ``--json``.

``oncelog configs`` and ``oncelog records`` are their own command groups; ``topics alter``
and the ``groups`` verbs are registered on the existing groups (see ``cli/main.py``).
"""

from __future__ import annotations

from typing import Any

import click

from oncelog.cli.groups import check, latest_offsets, topic_partitions
from oncelog.cli.output import (
    CliError,
    bootstrap_option,
    json_option,
    parse_key_values,
    print_json,
    print_table,
    reports_errors,
)
from oncelog.client.connection import KafkaConnection
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode

RESOURCE_TYPES = {"topics": 2, "brokers": 4}
SET, DELETE = 0, 1
EARLIEST, LATEST = -2, -1

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
    bootstrap: str, entity_type: str, entity_name: str, show_all: bool, as_json: bool
) -> None:
    """Each key's value and where it comes from (topic override, dynamic, static, default)."""
    with KafkaConnection(bootstrap) as conn:
        response = conn.request(
            ApiKey.DESCRIBE_CONFIGS,
            {
                "resources": [
                    {
                        "resource_type": RESOURCE_TYPES[entity_type],
                        "resource_name": entity_name,
                        "configuration_keys": None,
                    }
                ],
                "include_synonyms": False,
                "include_documentation": False,
            },
        )
    (result,) = response.results
    check(result.error_code, result.error_message, f"{entity_type} {entity_name!r}")
    rows = [
        {
            "name": c.name,
            "value": c.value,
            "source": _SOURCES.get(c.config_source, str(c.config_source)),
            "read_only": c.read_only,
        }
        for c in result.configs
        if show_all or c.config_source not in (5,)
    ]
    if as_json:
        print_json(rows)
        return
    print_table(
        ["Key", "Value", "Source", "Read-only"],
        [(r["name"], r["value"], r["source"], "yes" if r["read_only"] else "") for r in rows],
    )


_SOURCES = {1: "topic", 2: "dynamic broker", 3: "dynamic default", 4: "static", 5: "default"}


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
    bootstrap: str,
    entity_type: str,
    entity_name: str,
    additions: tuple[str, ...],
    deletions: tuple[str, ...],
    validate_only: bool,
    as_json: bool,
) -> None:
    """Set and unset keys (IncrementalAlterConfigs: other keys stay as they are)."""
    changes = [
        {"name": k, "config_operation": SET, "value": v}
        for k, v in parse_key_values(additions, "--add-config").items()
    ] + [{"name": k, "config_operation": DELETE, "value": None} for k in deletions]
    if not changes:
        raise click.UsageError("give --add-config and/or --delete-config")
    with KafkaConnection(bootstrap) as conn:
        response = conn.request(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            {
                "resources": [
                    {
                        "resource_type": RESOURCE_TYPES[entity_type],
                        "resource_name": entity_name,
                        "configs": changes,
                    }
                ],
                "validate_only": validate_only,
            },
        )
    (answer,) = response.responses
    check(answer.error_code, answer.error_message, f"{entity_type} {entity_name!r}")
    changed = [str(c["name"]) for c in changes]
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
def alter_topic(bootstrap: str, topic: str, partitions: int, as_json: bool) -> None:
    """Add partitions to a topic (CreatePartitions; existing data does not move)."""
    with KafkaConnection(bootstrap) as conn:
        response = conn.request(
            ApiKey.CREATE_PARTITIONS,
            {
                "topics": [{"name": topic, "count": partitions, "assignments": None}],
                "timeout": 30_000,
                "validate_only": False,
            },
        )
    (result,) = response.results
    check(result.error_code, result.error_message, f"topic {topic!r}")
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
    default=LATEST,
    show_default=True,
    help="Delete the records below this offset (-1: everything up to the high watermark).",
)
@json_option
@reports_errors
def delete_records(
    bootstrap: str, topic: str, partitions: tuple[int, ...], offset: int, as_json: bool
) -> None:
    """Move the log start offset of partitions up (DeleteRecords)."""
    with KafkaConnection(bootstrap) as conn:
        indexes = list(partitions) or topic_partitions(conn, [topic])[topic]
        response = conn.request(
            ApiKey.DELETE_RECORDS,
            {
                "topics": [
                    {
                        "name": topic,
                        "partitions": [{"partition_index": i, "offset": offset} for i in indexes],
                    }
                ],
                "timeout": 30_000,
            },
        )
    rows = []
    for answer in response.topics[0].partitions:
        check(answer.error_code, None, f"{topic}-{answer.partition_index}")
        rows.append({"partition": answer.partition_index, "low_watermark": answer.low_watermark})
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
def delete_groups(bootstrap: str, group_ids: tuple[str, ...], as_json: bool) -> None:
    """Delete Empty groups and their committed offsets (DeleteGroups)."""
    with KafkaConnection(bootstrap) as conn:
        response = conn.request(ApiKey.DELETE_GROUPS, {"groups_names": list(group_ids)})
    rows = [(r.group_id, _error_name(r.error_code)) for r in response.results]
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
    bootstrap: str, group_id: str, topic: str, partitions: tuple[int, ...], as_json: bool
) -> None:
    """Delete a group's committed offsets of a topic (OffsetDelete)."""
    with KafkaConnection(bootstrap) as conn:
        indexes = list(partitions) or topic_partitions(conn, [topic])[topic]
        response = conn.request(
            ApiKey.OFFSET_DELETE,
            {
                "group_id": group_id,
                "topics": [
                    {"name": topic, "partitions": [{"partition_index": i} for i in indexes]}
                ],
            },
        )
    check(response.error_code, None, f"group {group_id!r}")
    rows = [
        (t.name, p.partition_index, _error_name(p.error_code))
        for t in response.topics
        for p in t.partitions
    ]
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
    bootstrap: str,
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
    with KafkaConnection(bootstrap) as conn:
        indexes = list(partitions) or topic_partitions(conn, [topic])[topic]
        if to_offset is not None:
            plan = {(topic, i): to_offset for i in indexes}
        else:
            plan = _offsets_at(conn, topic, indexes, EARLIEST if target == "earliest" else LATEST)
        if execute:
            _commit(conn, group_id, plan)
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


def _offsets_at(
    conn: KafkaConnection, topic: str, indexes: list[int], timestamp: int
) -> dict[tuple[str, int], int]:
    if timestamp == LATEST:
        return latest_offsets(conn, {topic: indexes}, 0)
    response = conn.request(
        ApiKey.LIST_OFFSETS,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "timeout": 30_000,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": i, "current_leader_epoch": -1, "timestamp": timestamp}
                        for i in indexes
                    ],
                }
            ],
        },
    )
    found = {}
    for p in response.topics[0].partitions:
        check(p.error_code, None, f"offsets of {topic}-{p.partition_index}")
        found[(topic, p.partition_index)] = p.offset
    return found


def _commit(conn: KafkaConnection, group_id: str, plan: dict[tuple[str, int], int]) -> None:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), offset in sorted(plan.items()):
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": partition,
                "committed_offset": offset,
                "committed_leader_epoch": -1,
                "committed_metadata": "",
            }
        )
    response = conn.request(
        ApiKey.OFFSET_COMMIT,
        {
            "group_id": group_id,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [{"name": t, "partitions": parts} for t, parts in by_topic.items()],
        },
    )
    for topic in response.topics:
        for p in topic.partitions:
            check(p.error_code, None, f"commit of {topic.name}-{p.partition_index}")


def _error_name(code: int) -> str:
    return "OK" if code == ErrorCode.none else ErrorCode(code).name.upper()
