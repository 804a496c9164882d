"""Fixtures for the end-to-end transaction tests: real clients (confluent-kafka and
kafka-python) against an embedded broker over loopback."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from oncelog.testing import EmbeddedBroker

from .e2e_helpers import FAST_START


@pytest.fixture
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(FAST_START) as embedded:
        yield embedded


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    return f"e2e-{request.node.name[:30].strip('[]').replace('[', '-')}-{uuid.uuid4().hex[:6]}"
