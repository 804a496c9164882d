"""Tools for testing applications against oncelog: an embedded broker, a broker in a
child process (for crash tests), a local cluster on ZooKeeper, and pytest fixtures.

The cluster helpers (LocalCluster, ZooKeeperServer) are imported on first use: they need
kazoo, Java and ZooKeeper, which a single-node test suite does not."""

from typing import TYPE_CHECKING, Any

from oncelog.testing.embedded import EmbeddedBroker
from oncelog.testing.process import BrokerProcess, BrokerProcessError
from oncelog.testing.proxy import FaultConfig, FaultInjectionProxy, ProxyStats

if TYPE_CHECKING:
    from oncelog.testing.cluster import LocalCluster
    from oncelog.testing.zookeeper import ZooKeeperServer

__all__ = [
    "BrokerProcess",
    "BrokerProcessError",
    "EmbeddedBroker",
    "FaultConfig",
    "FaultInjectionProxy",
    "LocalCluster",
    "ProxyStats",
    "ZooKeeperServer",
]


def __getattr__(name: str) -> Any:
    if name == "LocalCluster":
        from oncelog.testing.cluster import LocalCluster

        return LocalCluster
    if name == "ZooKeeperServer":
        from oncelog.testing.zookeeper import ZooKeeperServer

        return ZooKeeperServer
    raise AttributeError(name)
