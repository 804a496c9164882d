"""Tools for testing applications against oncelog: an embedded broker and a pytest fixture."""

from oncelog.testing.embedded import EmbeddedBroker

__all__ = ["EmbeddedBroker"]
