"""Fixtures of the group core tests (the in-memory broker lives in group_node.py)."""

from __future__ import annotations

import pytest

from .group_node import Node


@pytest.fixture
def node() -> Node:
    return Node()
