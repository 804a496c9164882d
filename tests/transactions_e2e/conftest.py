"""Fixtures for the end-to-end transaction tests: real clients (confluent-kafka and
kafka-python) against an embedded broker over loopback.

Until the group coordinator lands (``Broker.groups``), a confluent-kafka Consumer (which
always needs a group.id) would make the broker fail its FindCoordinator(group) request
and close the connection, which also kills the consumer's in-flight fetches. The
``broker`` fixture then installs a stand-in whose ``ready()`` succeeds: with assign(),
explicit start offsets and enable.auto.commit=False, librdkafka sends nothing to the
group coordinator beyond FindCoordinator. Once the real coordinator exists, the
stand-in is not installed (it landed while these tests were written: all of them also
pass against the real group coordinator).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from e2e_helpers import FAST_START, install_group_stand_in

from oncelog.testing import EmbeddedBroker


@pytest.fixture
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(FAST_START) as embedded:
        install_group_stand_in(embedded)
        yield embedded


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    return f"e2e-{request.node.name[:30].strip('[]').replace('[', '-')}-{uuid.uuid4().hex[:6]}"
