"""A small blocking Kafka-protocol client for admin tools and tests: one connection
(:class:`KafkaConnection`) and the admin requests every ``oncelog`` command uses
(:class:`Admin`). Producing and consuming are confluent-kafka's job.

The names are imported on first use, not with the package: `oncelog.client.security` is
also what the Spark connector's options import in every Python worker, and importing the
connection here brought in the protocol and kio's types with it (half of the worker's
objects, which PySpark's worker garbage-collects after every task)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oncelog.client.admin import Admin, AdminError
    from oncelog.client.connection import KafkaConnection, ProtocolClientError

__all__ = ["Admin", "AdminError", "KafkaConnection", "ProtocolClientError"]
_HOME = {
    "Admin": "oncelog.client.admin",
    "AdminError": "oncelog.client.admin",
    "KafkaConnection": "oncelog.client.connection",
    "ProtocolClientError": "oncelog.client.connection",
}


def __getattr__(name: str) -> Any:
    """`Admin` and the other names, imported from their module when first asked for."""
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME])
