"""Cluster mode: ZooKeeper-coordinated brokers (registration, controller, replication).

Nothing here is imported or started by a single node (no ``zookeeper.connect``).
"""
