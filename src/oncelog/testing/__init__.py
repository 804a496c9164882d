"""Tools for testing applications against oncelog: an embedded broker, a broker in a
child process (for crash tests), a local cluster on ZooKeeper, and pytest fixtures.

The names are imported on first use, not with the package. Spark's Python workers import
this package whenever they unpickle the demonstration's fault-injecting data source
(`oncelog.testing.spark`), and a failed task's retry always runs in a new worker: importing
the embedded broker there (the whole broker and kio's types, with hypothesis's hooks where
it is installed) cost each new worker about 1.3 CPU-seconds for modules it never uses
(importing pyspark.sql, pyarrow and `oncelog.testing.spark` took 1.67 user seconds with
it, 0.38 without; load 3.7). The
cluster helpers also need kazoo, Java and ZooKeeper, which a single-node test suite does
not."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.lazy_names import lazy_names

if TYPE_CHECKING:
    from oncelog.testing.cluster import LocalCluster
    from oncelog.testing.embedded import EmbeddedBroker
    from oncelog.testing.process import BrokerProcess, BrokerProcessError
    from oncelog.testing.proxy import FaultConfig, FaultInjectionProxy, ProxyStats
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
_HOME = {
    "BrokerProcess": "oncelog.testing.process",
    "BrokerProcessError": "oncelog.testing.process",
    "EmbeddedBroker": "oncelog.testing.embedded",
    "FaultConfig": "oncelog.testing.proxy",
    "FaultInjectionProxy": "oncelog.testing.proxy",
    "LocalCluster": "oncelog.testing.cluster",
    "ProxyStats": "oncelog.testing.proxy",
    "ZooKeeperServer": "oncelog.testing.zookeeper",
}


__getattr__, __dir__ = lazy_names(__name__, _HOME, globals())
