"""pytest fixtures for oncelog, registered through the `pytest11` entry point.

Installing oncelog gives every test suite an `oncelog_broker` fixture: a real
Kafka-protocol broker on a free loopback port with a temporary data directory. This
module lives outside `oncelog.testing` so that loading it imports nothing heavy.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    # Imported inside the fixtures: pytest loads this plugin in every test session of
    # every project that has oncelog installed, so it must import nothing heavy.
    from oncelog.testing.cluster import LocalCluster
    from oncelog.testing.embedded import EmbeddedBroker


@pytest.fixture
def oncelog_broker() -> Iterator[EmbeddedBroker]:
    """A fresh broker for one test, stopped and removed afterwards."""
    from oncelog.testing.embedded import EmbeddedBroker

    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture(scope="session")
def oncelog_session_broker() -> Iterator[EmbeddedBroker]:
    """One broker shared by every test of the session (faster; isolate with topic names)."""
    from oncelog.testing.embedded import EmbeddedBroker

    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture
def oncelog_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A fresh cluster for one test: ZooKeeper and 3 broker processes (ids 1, 2, 3) on
    127.0.0.1, stopped afterwards. Needs Java 17 and ZooKeeper (Debian's `zookeeper`)."""
    from oncelog.testing.cluster import LocalCluster

    with LocalCluster(tmp_path_factory.mktemp("oncelog-cluster"), brokers=3) as cluster:
        yield cluster
