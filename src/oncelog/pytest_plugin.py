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
