"""Real Kafka clients against one broker for the module; topics are unique per test."""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    return f"{request.node.name[:40].strip('[]').replace('[', '-')}-{uuid.uuid4().hex[:8]}"
