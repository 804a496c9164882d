"""ZooKeeperServer picks its port, then ZooKeeper binds it: another process (another test
of a parallel suite) can take the port in between. The server must neither take another
ZooKeeper on that port for its own nor fail a start whose port it picked itself."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncelog.testing import zookeeper
from oncelog.testing.zookeeper import ZooKeeperPortTaken, ZooKeeperServer

START_LINE = "=== ZooKeeperServer start on port"


@pytest.fixture
def occupied_port() -> Iterator[int]:
    """A port something else listens on (and never answers)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def test_another_zookeeper_on_the_port_is_not_taken_for_this_one(tmp_path: Path) -> None:
    with ZooKeeperServer(tmp_path / "first") as first:
        second = ZooKeeperServer(tmp_path / "second", port=first.port)
        # `ruok` would be answered `imok` by the first server: the second must see that
        # the server answering is not its own, and that its own exited on a taken port
        with pytest.raises(ZooKeeperPortTaken, match="Address already in use"):
            second.start()
        assert second.log_path.read_text().count(START_LINE) == 1  # a given port: no retry
        assert zookeeper._conf(first.host, first.port)  # the first one still serves


def test_a_picked_port_taken_before_zookeeper_binds_it_is_replaced(
    tmp_path: Path, occupied_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    picks = iter([occupied_port])
    real_free_port = zookeeper.free_port
    monkeypatch.setattr(
        zookeeper, "free_port", lambda host: next(picks, None) or real_free_port(host)
    )
    with ZooKeeperServer(tmp_path / "zk") as zk:
        assert zk.port != occupied_port
        starts = [line for line in zk.log_path.read_text().splitlines() if START_LINE in line]
        assert starts == [f"{START_LINE} {occupied_port}", f"{START_LINE} {zk.port}"]
