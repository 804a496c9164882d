"""What every CLI command shares: `--json` for scripts, rich tables for people, times as
ISO 8601, and turning expected failures into one clear line and a non-zero exit (never a
traceback). The commands only parse arguments and present; the requests are
:mod:`oncelog.client.admin`'s."""

from __future__ import annotations

import base64
import datetime
import functools
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import click
from rich.console import Console
from rich.table import Table

from oncelog.broker.config import parse_properties
from oncelog.client.admin import AdminError
from oncelog.client.connection import Bootstrap, ProtocolClientError
from oncelog.client.security import ClientSecurity, ClientSecurityError

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"

P = ParamSpec("P")
R = TypeVar("R")


class CliError(Exception):
    """An expected failure (the broker refused, input is wrong) worth one line, not a trace."""


json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON (stable keys) instead of a table."
)


def bootstrap_option(command: Callable[..., R]) -> Callable[..., R]:
    """``--bootstrap-server`` and ``--command-config``, given to the command as one
    ``bootstrap`` (a :class:`Bootstrap`): where the broker is and how to reach it."""

    @click.option(
        "--bootstrap-server",
        "bootstrap",
        default=DEFAULT_BOOTSTRAP,
        show_default=True,
        metavar="HOST:PORT",
        help="Broker to connect to.",
    )
    @click.option(
        "--command-config",
        type=click.Path(dir_okay=False, exists=True, path_type=Path),
        help="Client properties file, as Kafka's tools take it: security.protocol, "
        "sasl.mechanism, sasl.jaas.config or sasl.username/sasl.password, ssl.* "
        "(Kafka's or librdkafka's names).",
    )
    @functools.wraps(command)
    def wrapper(*args: Any, bootstrap: str, command_config: Path | None, **kwargs: Any) -> R:
        return command(*args, bootstrap=_bootstrap(bootstrap, command_config), **kwargs)

    return wrapper


def _bootstrap(servers: str, command_config: Path | None) -> Bootstrap:
    if command_config is None:
        return Bootstrap(servers)
    properties = parse_properties(command_config.read_text(encoding="utf-8"))
    try:
        return Bootstrap(servers, ClientSecurity.from_properties(properties))
    except ClientSecurityError as exc:
        raise click.BadParameter(str(exc), param_hint="--command-config") from None


class _LibrdkafkaLog:
    """librdkafka's own log lines (refused connections, retries) demoted to INFO, so they
    show only with -v: the commands report the failures that matter in one line."""

    _log = logging.getLogger("oncelog.cli.librdkafka")

    def log(self, level: int, message: str, *args: object) -> None:
        self._log.log(min(level, logging.INFO), message, *args)


def client_config(bootstrap: str | Bootstrap, **settings: Any) -> dict[str, Any]:
    """confluent-kafka configuration shared by the console producer and consumer."""
    security = bootstrap.security.librdkafka() if isinstance(bootstrap, Bootstrap) else {}
    return {
        "bootstrap.servers": str(bootstrap),
        "logger": _LibrdkafkaLog(),
        **security,
        **settings,
    }


def reports_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Show CliError, the broker's refusals and connection failures as `Error: ...` with
    exit status 1."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except (CliError, AdminError, ProtocolClientError) as exc:
            raise click.ClickException(str(exc)) from exc

    return wrapper


def parse_key_values(pairs: Sequence[str], option: str) -> dict[str, str]:
    """`KEY=VALUE` options (repeatable) as a dict; a malformed one is a usage error."""
    parsed = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint=option)
        parsed[key.strip()] = value.strip()
    return parsed


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2))


def print_table(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], *, right: Sequence[str] = ()
) -> None:
    """A rich table; the columns named in `right` (numbers) are right-aligned, None is '-'."""
    table = Table()
    for column in columns:
        table.add_column(column, justify="right" if column in right else "left")
    for row in rows:
        table.add_row(*("-" if cell is None else str(cell) for cell in row))
    console = Console(soft_wrap=False)
    if not console.is_terminal:  # piped: rich would assume 80 columns and squeeze the table
        console.width = 200
    console.print(table)


def render_bytes(data: bytes | None, *, binary: bool = False) -> str | None:
    """Bytes as text for JSON: utf-8 with bad bytes replaced, or base64 when asked."""
    if data is None:
        return None
    return base64.b64encode(data).decode("ascii") if binary else data.decode("utf-8", "replace")


def iso_utc(timestamp_ms: int | None) -> str | None:
    """Milliseconds since the epoch as ISO 8601 UTC with milliseconds; None if unknown (None
    or negative)."""
    if timestamp_ms is None or timestamp_ms < 0:
        return None
    moment = datetime.datetime.fromtimestamp(timestamp_ms / 1000, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
