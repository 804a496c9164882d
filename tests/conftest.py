"""Suite-wide hooks."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _destroy_unreferenced_clients() -> Iterator[None]:
    """Collect the Kafka clients a test dropped while its broker is still known.

    A librdkafka handle only stops when it is destroyed; one left for interpreter exit keeps
    reconnecting to a broker that is gone and prints after pytest's summary.
    """
    yield
    gc.collect()
