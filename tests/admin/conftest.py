"""One embedded broker per module for the transaction and group admin tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from oncelog.testing import EmbeddedBroker

from .admin_helpers import BROKER_CONFIG


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(BROKER_CONFIG) as running:
        yield running
