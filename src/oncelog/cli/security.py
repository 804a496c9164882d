"""`oncelog users` (SCRAM credentials) and `oncelog acls` (access control lists).

Both talk to a broker (``--bootstrap-server``, with ``--command-config`` for a secured
listener), as Kafka's ``kafka-configs --entity-type users`` and ``kafka-acls`` do: the
broker checks that the caller may (Alter or Describe on the cluster) and stores the change
in its data directory (a cluster broker refuses SASL and ACLs for now: docs/security.md).
Passwords are salted and hashed here; only the salted password is sent.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

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
from oncelog.security.acl import (
    CLUSTER_NAME,
    WILDCARD_HOST,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from oncelog.security.principal import KafkaPrincipal
from oncelog.security.scram import DEFAULT_ITERATIONS, MAX_ITERATIONS

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")

# -- users -------------------------------------------------------------------------------


@click.group()
def users() -> None:
    """SCRAM users: list, set a password, delete."""


@users.command("list")
@bootstrap_option
@click.option("--user", "names", multiple=True, help="Only this user (repeatable).")
@json_option
@reports_errors
def list_users(bootstrap: Bootstrap, names: tuple[str, ...], as_json: bool) -> None:
    """Users with SCRAM credentials, and their mechanisms and iteration counts."""
    with Admin.connect(bootstrap) as admin:
        found = admin.describe_scram_users(list(names) or None)
    if as_json:
        print_json(
            [
                {
                    "user": u.user,
                    "credentials": [{"mechanism": m, "iterations": i} for m, i in u.credentials],
                    "error": u.error,
                }
                for u in found
            ]
        )
        return
    rows: list[tuple[str, str | None, int | None, str | None]] = []
    for u in found:
        rows += [(u.user, m, i, None) for m, i in u.credentials] or [(u.user, None, None, u.error)]
    print_table(["User", "Mechanism", "Iterations", "Error"], rows, right=["Iterations"])


@users.command("set")
@bootstrap_option
@click.option("--user", required=True, help="The user to create or update.")
@click.option(
    "--password",
    prompt=True,
    hide_input=True,
    confirmation_prompt=True,
    help="The password (asked for when not given).",
)
@click.option(
    "--mechanism",
    "mechanisms",
    type=click.Choice(MECHANISMS, case_sensitive=False),
    multiple=True,
    help="SCRAM mechanism (repeatable) [default: both].",
)
@click.option(
    "--iterations",
    type=click.IntRange(4096, MAX_ITERATIONS),
    default=DEFAULT_ITERATIONS,
    show_default=True,
)
@reports_errors
def set_user(
    bootstrap: Bootstrap, user: str, password: str, mechanisms: tuple[str, ...], iterations: int
) -> None:
    """Create a SCRAM user, or change its password."""
    with Admin.connect(bootstrap) as admin:
        chosen = list(dict.fromkeys(mechanisms or MECHANISMS))  # a repeated one counts once
        admin.upsert_scram_credentials({user: password}, chosen, iterations)


@users.command("delete")
@bootstrap_option
@click.option("--user", required=True, help="The user whose credentials to delete.")
@click.option(
    "--mechanism",
    "mechanisms",
    type=click.Choice(MECHANISMS, case_sensitive=False),
    multiple=True,
    help="Only this mechanism (repeatable) [default: every one the user has].",
)
@reports_errors
def delete_user(bootstrap: Bootstrap, user: str, mechanisms: tuple[str, ...]) -> None:
    """Delete a user's SCRAM credentials."""
    with Admin.connect(bootstrap) as admin:
        if not mechanisms:
            (found,) = admin.describe_scram_users([user])
            if found.error:
                raise click.ClickException(found.error)
            mechanisms = tuple(m for m, _ in found.credentials)
        admin.delete_scram_credentials([user], mechanisms)


# -- acls --------------------------------------------------------------------------------


def _resource_options(command: click.decorators.FC) -> click.decorators.FC:
    for option in reversed(
        [
            click.option("--topic", help="A topic (or, prefixed, a topic name prefix)."),
            click.option("--group", help="A consumer group."),
            click.option("--transactional-id", help="A transactional id."),
            click.option("--cluster", is_flag=True, help="The cluster."),
            click.option(
                "--resource-pattern-type",
                type=click.Choice(["literal", "prefixed", "match", "any"], case_sensitive=False),
                help="How the name matches [add: literal; list and remove: any].",
            ),
        ]
    ):
        command = option(command)
    return command


def _resource(
    topic: str | None, group: str | None, transactional_id: str | None, cluster: bool
) -> tuple[ResourceType, str | None]:
    chosen = [
        (kind, name)
        for kind, name in (
            (ResourceType.TOPIC, topic),
            (ResourceType.GROUP, group),
            (ResourceType.TRANSACTIONAL_ID, transactional_id),
            (ResourceType.CLUSTER, CLUSTER_NAME if cluster else None),
        )
        if name is not None
    ]
    if len(chosen) > 1:
        raise click.UsageError(
            "name one resource: --topic, --group, --transactional-id or --cluster"
        )
    return chosen[0] if chosen else (ResourceType.ANY, None)


def _operations(names: tuple[str, ...]) -> list[AclOperation]:
    try:
        return [AclOperation.from_name(name) for name in names]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--operation") from None


def _principal(text: str) -> str:
    try:
        return str(KafkaPrincipal.parse(text))
    except ValueError as exc:
        raise click.BadParameter(
            str(exc), param_hint="--allow-principal/--deny-principal"
        ) from None


_OPERATIONS_HELP = (
    "Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
    "AlterConfigs, IdempotentWrite or All (repeatable)."
)


@click.group()
def acls() -> None:
    """Access control lists (with authorizer.class.name set on the broker)."""


@acls.command("add")
@bootstrap_option
@_resource_options
@click.option("--allow-principal", "allowed", multiple=True, help="Principal to allow: User:alice.")
@click.option("--deny-principal", "denied", multiple=True, help="Principal to deny.")
@click.option("--operation", "operations", multiple=True, required=True, help=_OPERATIONS_HELP)
@click.option("--host", default=WILDCARD_HOST, show_default=True, help="Client address.")
@reports_errors
def add_acls(
    bootstrap: Bootstrap,
    topic: str | None,
    group: str | None,
    transactional_id: str | None,
    cluster: bool,
    resource_pattern_type: str | None,
    allowed: tuple[str, ...],
    denied: tuple[str, ...],
    operations: tuple[str, ...],
    host: str,
) -> None:
    """Allow or deny principals operations on one resource."""
    kind, name = _resource(topic, group, transactional_id, cluster)
    if name is None:
        raise click.UsageError(
            "name the resource: --topic, --group, --transactional-id or --cluster"
        )
    if not allowed and not denied:
        raise click.UsageError("give --allow-principal or --deny-principal")
    pattern = ResourcePattern(kind, name, PatternType.from_name(resource_pattern_type or "literal"))
    bindings = [
        AclBinding(pattern, AccessControlEntry(_principal(p), host, operation, permission))
        for principals, permission in (
            (allowed, AclPermissionType.ALLOW),
            (denied, AclPermissionType.DENY),
        )
        for p in principals
        for operation in _operations(operations)
    ]
    with Admin.connect(bootstrap) as admin:
        admin.create_acls(bindings)


def _filter_options(command: Callable[..., None]) -> Callable[..., None]:
    """The resource options, ``--principal`` and ``--operation``, given to the command as
    one ``acl_filter`` (an :class:`AclBindingFilter`; what is not given matches anything)."""

    @_resource_options
    @click.option("--principal", help="Only this principal's ACLs.")
    @click.option("--operation", help="Only ACLs for this operation.")
    @functools.wraps(command)
    def wrapper(
        *args: Any,
        topic: str | None,
        group: str | None,
        transactional_id: str | None,
        cluster: bool,
        resource_pattern_type: str | None,
        principal: str | None,
        operation: str | None,
        **kwargs: Any,
    ) -> None:
        kind, name = _resource(topic, group, transactional_id, cluster)
        acl_filter = AclBindingFilter(
            ResourcePatternFilter(
                kind, name, PatternType.from_name(resource_pattern_type or "any")
            ),
            AccessControlEntryFilter(
                None if principal is None else _principal(principal),
                None,
                AclOperation.ANY if operation is None else _operations((operation,))[0],
                AclPermissionType.ANY,
            ),
        )
        command(*args, acl_filter=acl_filter, **kwargs)

    return wrapper


def _print_bindings(bindings: list[AclBinding], as_json: bool) -> None:
    rows = [
        (
            b.pattern.resource_type.kafka_name,
            b.pattern.pattern_type.kafka_name,
            b.pattern.name,
            b.entry.principal,
            b.entry.host,
            b.entry.operation.kafka_name,
            b.entry.permission.kafka_name,
        )
        for b in sorted(bindings, key=lambda b: (str(b.pattern), str(b.entry)))
    ]
    columns = ["Resource type", "Pattern", "Name", "Principal", "Host", "Operation", "Permission"]
    if as_json:
        keys = ["resource_type", "pattern_type", "name", "principal", "host", "operation"]
        print_json([dict(zip([*keys, "permission"], row, strict=True)) for row in rows])
    else:
        print_table(columns, rows)


@acls.command("list")
@bootstrap_option
@_filter_options
@json_option
@reports_errors
def list_acls(bootstrap: Bootstrap, acl_filter: AclBindingFilter, as_json: bool) -> None:
    """ACLs, all or those matching the options."""
    with Admin.connect(bootstrap) as admin:
        _print_bindings(admin.describe_acls(acl_filter), as_json)


@acls.command("remove")
@bootstrap_option
@_filter_options
@json_option
@reports_errors
def remove_acls(bootstrap: Bootstrap, acl_filter: AclBindingFilter, as_json: bool) -> None:
    """Remove the ACLs matching the options (name a resource or a principal), and list
    what was removed."""
    if acl_filter.pattern.resource_type is ResourceType.ANY and acl_filter.entry.principal is None:
        raise click.UsageError("name a resource or a --principal: removing every ACL is refused")
    with Admin.connect(bootstrap) as admin:
        _print_bindings(admin.delete_acls([acl_filter]), as_json)
