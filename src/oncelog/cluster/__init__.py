"""Cluster mode: ZooKeeper-coordinated brokers (registration, controller, replication).

Nothing here is imported or started by a single node (no ``zookeeper.connect``), and this
package imports none of its modules: they need kazoo, which a single node never loads. The
broker wires them itself, so the package exports nothing; to run a cluster, use
:class:`oncelog.testing.LocalCluster` or ``oncelog cluster start``.
"""

__all__: list[str] = []
