"""Fixtures for the transaction coordinator tests."""

from __future__ import annotations

import pytest

from .txn_harness import Harness


@pytest.fixture
def h() -> Harness:
    return Harness()
