"""pytest fixtures for oncelog, registered through the `pytest11` entry point.

Installing oncelog gives every test suite an `oncelog_broker` fixture: a real
Kafka-protocol broker on a free loopback port with a temporary data directory.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from oncelog.testing.embedded import EmbeddedBroker


@pytest.fixture
def oncelog_broker() -> Iterator[EmbeddedBroker]:
    """A fresh broker for one test, stopped and removed afterwards."""
    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture(scope="session")
def oncelog_session_broker() -> Iterator[EmbeddedBroker]:
    """One broker shared by every test of the session (faster; isolate with topic names)."""
    with EmbeddedBroker() as broker:
        yield broker
