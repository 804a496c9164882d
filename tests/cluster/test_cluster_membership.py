"""Cluster membership on a real ZooKeeper: registration in Kafka's layout, one controller
with a fencing epoch, a duplicate broker.id refused, controller failover after SIGKILL."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from oncelog.testing.cluster import LocalCluster
from oncelog.testing.zookeeper import ZooKeeperServer


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory):
    with LocalCluster(tmp_path_factory.mktemp("membership"), brokers=2) as cluster:
        yield cluster


@pytest.fixture
def zk_client(pair: LocalCluster):
    client = KazooClient(pair.zookeeper.connect_string, timeout=10)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


def run_broker(data_dir: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    """`oncelog broker` on ``data_dir`` with ``settings`` (dots as underscores), to its exit."""
    command = [sys.executable, "-m", "oncelog", "broker", "--data-dir", str(data_dir)]
    for key, value in settings.items():
        command += ["--set", f"{key.replace('_', '.')}={value}"]
    return subprocess.run(
        [*command, "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_brokers_register_with_their_address(pair: LocalCluster, zk_client: KazooClient) -> None:
    assert sorted(zk_client.get_children("/brokers/ids")) == ["1", "2"]
    for broker_id, broker in pair.brokers.items():
        data, stat = zk_client.get(f"/brokers/ids/{broker_id}")
        registration = json.loads(data)
        assert registration["endpoints"] == [f"PLAINTEXT://{broker.bootstrap_servers}"]
        assert (registration["host"], registration["port"]) == ("127.0.0.1", broker.port)
        assert stat.ephemeralOwner != 0  # gone with the broker's session


def test_one_controller_with_an_epoch(pair: LocalCluster, zk_client: KazooClient) -> None:
    controller = json.loads(zk_client.get("/controller")[0])["brokerid"]
    assert controller in (1, 2)
    assert int(zk_client.get("/controller_epoch")[0]) >= 1
    assert json.loads(zk_client.get("/cluster/id")[0])["id"]


def test_duplicate_broker_id_refused(pair: LocalCluster, tmp_path: Path) -> None:
    started = run_broker(
        tmp_path / "intruder", zookeeper_connect=pair.zookeeper.connect_string, broker_id="1"
    )
    assert started.returncode == 1
    assert "broker.id 1 is already registered" in started.stderr
    assert f"a live broker at {pair.brokers[1].bootstrap_servers}" in started.stderr
    assert pair.registered_brokers() == {1, 2}  # the real broker 1 is untouched


def test_cluster_mode_needs_a_broker_id(pair: LocalCluster, tmp_path: Path) -> None:
    started = run_broker(tmp_path, zookeeper_connect=pair.zookeeper.connect_string)
    assert started.returncode == 2
    assert "a cluster broker needs broker.id (or node.id)" in started.stderr


def test_unreachable_zookeeper_is_reported(tmp_path: Path) -> None:
    with ZooKeeperServer(tmp_path / "zk") as zk:
        port = zk.port
    started = run_broker(
        tmp_path / "b",
        zookeeper_connect=f"127.0.0.1:{port}",
        broker_id="5",
        zookeeper_connection_timeout_ms="1000",
    )
    assert started.returncode == 1
    assert f"cannot connect to ZooKeeper at 127.0.0.1:{port} within 1 s" in started.stderr


def test_controller_moves_when_killed(pair: LocalCluster) -> None:
    first = pair.controller()
    assert first is not None
    other = 3 - first
    pair.kill(first)
    pair._wait(lambda: pair.controller() == other, f"broker {other} as controller", 30)
    pair.restart(first)
    pair.wait_for_brokers({1, 2})
    assert pair.controller() == other  # the returning broker does not take it back
