"""The `oncelog` command."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import click

from oncelog.broker.config import BrokerConfig, ConfigError
from oncelog.cli.admin_verbs import (
    alter_topic,
    configs,
    delete_groups,
    delete_offsets,
    records,
    reset_offsets,
)
from oncelog.cli.cluster import cluster
from oncelog.cli.consume import consume
from oncelog.cli.demo import demo
from oncelog.cli.dump_log import dump_log
from oncelog.cli.groups import groups
from oncelog.cli.output import parse_key_values
from oncelog.cli.produce import produce
from oncelog.cli.producers import producers
from oncelog.cli.security import acls, users
from oncelog.cli.topics import topics
from oncelog.cli.transactions import transactions


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def main(verbose: int) -> None:
    """oncelog: an event log with exactly-once semantics that speaks Kafka's protocol."""
    level = logging.WARNING - 10 * verbose
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@main.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Directory holding the partition logs and broker state.",
)
@click.option(
    "--host",
    default=None,
    help="Address of the PLAINTEXT listener [default: 127.0.0.1]; not with `listeners`.",
)
@click.option(
    "--port",
    default=None,
    type=int,
    help="Its port (0 picks a free one) [default: 9092]; not with `listeners`.",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Kafka-style properties file.",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override one configuration key (repeatable; beats --config).",
)
@click.option(
    "--ready-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Once the broker serves, write `LISTENER PORT` lines to this file (then"
    " `metrics PORT` when it serves metrics).",
)
@click.option(
    "--metrics-port",
    type=int,
    default=None,
    help="Serve Prometheus metrics at http://HOST:PORT/metrics (0 picks a free port).",
)
def broker(
    data_dir: Path,
    host: str | None,
    port: int | None,
    config_file: Path | None,
    overrides: tuple[str, ...],
    ready_file: Path | None,
    metrics_port: int | None,
) -> None:
    """Run a broker until SIGTERM or SIGINT."""
    from oncelog.broker.heap import retain_freed_heap, retention_for
    from oncelog.broker.runner import run_forever
    from oncelog.cluster.zookeeper import ZooKeeperError

    if not logging.getLogger().isEnabledFor(logging.INFO):
        logging.getLogger("oncelog").setLevel(logging.INFO)
    try:
        config = BrokerConfig.load(config_file, parse_key_values(overrides, "--set"))
        config.broker_id  # noqa: B018 - checks broker.id against node.id and cluster mode
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    # This process is only a broker: its produce frames reuse freed memory (broker/heap.py).
    retain_freed_heap(retention_for(os.environ))
    try:
        run_forever(config, data_dir, host, port, ready_file, metrics_port)
    except ConfigError as exc:  # listeners, TLS and SASL keys are checked as the broker starts
        raise click.UsageError(str(exc)) from exc
    except ZooKeeperError as exc:
        raise click.ClickException(f"cannot join the cluster: {exc}") from exc


for command in (
    topics,
    produce,
    consume,
    dump_log,
    demo,
    producers,
    transactions,
    groups,
    configs,
    records,
    cluster,
    users,
    acls,
):
    main.add_command(command)
topics.add_command(alter_topic)
for verb in (delete_groups, delete_offsets, reset_offsets):
    groups.add_command(verb)


if __name__ == "__main__":
    main()
