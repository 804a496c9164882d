"""`oncelog cluster start|status|stop`: a local development cluster on 127.0.0.1.

`start` launches a ZooKeeper server and N brokers (oncelog.testing.LocalCluster), hands
them over (they keep running after the command returns) and records their pids and
addresses in ``<data-dir>/cluster.json``; `status` and `stop` read that file. `stop` signals
each recorded pid only after checking, in /proc, that it still runs our command on that
data directory (a pid may have been reused since).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import click

from oncelog.cli.output import parse_key_values

STATE_FILE = "cluster.json"
STOP_TIMEOUT_S = 30.0


@click.group()
def cluster() -> None:
    """A local cluster (ZooKeeper and N brokers on 127.0.0.1) for development."""


_data_dir = click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Directory holding ZooKeeper's and every broker's data, and cluster.json.",
)


@cluster.command()
@_data_dir
@click.option("--brokers", default=3, show_default=True, type=click.IntRange(1, 9))
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Broker configuration key for every broker (repeatable).",
)
def start(data_dir: Path, brokers: int, overrides: tuple[str, ...]) -> None:
    """Start ZooKeeper and the brokers in the background; print the bootstrap servers."""
    from oncelog.testing.cluster import LocalCluster

    state = _read_state(data_dir)
    if state is not None and any(_alive(p, data_dir) for p in _pids(state)):
        raise click.ClickException(
            f"a cluster from {data_dir} is already running: `oncelog cluster stop "
            f"--data-dir {data_dir}` first"
        )
    config = {"zookeeper.session.timeout.ms": "18000", "replica.lag.time.max.ms": "30000"}
    config.update(parse_key_values(overrides, "--set"))
    click.echo(f"starting ZooKeeper and {brokers} broker(s) in {data_dir} ...")
    local = LocalCluster(data_dir, brokers, config).start()
    state = {
        "zookeeper": {"pid": local.zookeeper.pid, "address": local.zookeeper.connect_string},
        "brokers": {
            str(i): {"pid": b.pid, "address": b.bootstrap_servers} for i, b in local.brokers.items()
        },
    }
    for broker in local.brokers.values():
        broker.detach()
    local.zookeeper.detach()
    (data_dir / STATE_FILE).write_text(json.dumps(state, indent=1) + "\n")
    click.echo(f"ZooKeeper: {state['zookeeper']['address']}")
    for broker_id, entry in state["brokers"].items():
        click.echo(f"broker {broker_id}: {entry['address']} (pid {entry['pid']})")
    click.echo(f"bootstrap servers: {','.join(b['address'] for b in state['brokers'].values())}")


@cluster.command()
@_data_dir
def status(data_dir: Path) -> None:
    """Which processes run, which brokers are registered, and the controller."""
    state = _require_state(data_dir)
    zk = state["zookeeper"]
    zk_alive = _alive(zk["pid"], data_dir)
    click.echo(f"ZooKeeper {zk['address']}  pid {zk['pid']}  {_word(zk_alive)}")
    registered: set[int] = set()
    controller = None
    if zk_alive:
        registered, controller = _ask_zookeeper(zk["address"])
    for broker_id, entry in state["brokers"].items():
        alive = _alive(entry["pid"], data_dir)
        notes = []
        if int(broker_id) in registered:
            notes.append("registered")
        if controller == int(broker_id):
            notes.append("controller")
        click.echo(
            f"broker {broker_id}  {entry['address']}  pid {entry['pid']}  {_word(alive)}"
            + (f"  ({', '.join(notes)})" if notes else "")
        )


@cluster.command()
@_data_dir
def stop(data_dir: Path) -> None:
    """Stop every broker cleanly (SIGTERM), then ZooKeeper."""
    state = _require_state(data_dir)
    for broker_id, entry in state["brokers"].items():
        click.echo(f"broker {broker_id}: {_stop_pid(entry['pid'], data_dir)}")
    click.echo(f"ZooKeeper: {_stop_pid(state['zookeeper']['pid'], data_dir)}")
    (data_dir / STATE_FILE).unlink(missing_ok=True)


def _read_state(data_dir: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads((data_dir / STATE_FILE).read_text()))
    except FileNotFoundError:
        return None


def _require_state(data_dir: Path) -> dict[str, Any]:
    state = _read_state(data_dir)
    if state is None:
        raise click.ClickException(f"no cluster was started from {data_dir} ({STATE_FILE} missing)")
    return state


def _pids(state: dict[str, Any]) -> list[int]:
    return [state["zookeeper"]["pid"], *(b["pid"] for b in state["brokers"].values())]


def _alive(pid: int, data_dir: Path) -> bool:
    """Whether ``pid`` runs and is one of ours: its command line names the data dir."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return str(data_dir.resolve()).encode() in cmdline or str(data_dir).encode() in cmdline


def _stop_pid(pid: int, data_dir: Path) -> str:
    if not _alive(pid, data_dir):
        return "not running"
    os.kill(pid, signal.SIGCONT)
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _alive(pid, data_dir):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            return f"killed (pid {pid} ignored SIGTERM for {STOP_TIMEOUT_S:g} s)"
        time.sleep(0.05)
    return f"stopped (pid {pid})"


def _ask_zookeeper(address: str) -> tuple[set[int], int | None]:
    from kazoo.client import KazooClient

    client = KazooClient(address, timeout=5)
    try:
        client.start(timeout=5)
        registered = {int(i) for i in client.get_children("/brokers/ids")}
        controller = None
        if client.exists("/controller"):
            controller = int(json.loads(client.get("/controller")[0])["brokerid"])
        return registered, controller
    except Exception:
        return set(), None
    finally:
        client.stop()
        client.close()


def _word(alive: bool) -> str:
    return "running" if alive else "stopped"
