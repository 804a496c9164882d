"""Kafka error codes and the exception that carries one.

The code table itself is kio's (generated from Kafka's own ``Errors`` list, with the
retriable flag and the message); this module is the one place the rest of oncelog
imports it from, so the codec can be replaced without touching callers.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError"]


class KafkaError(Exception):
    """A request-level failure that maps to one Kafka error code.

    Raised by cores and storage; the broker converts it into the response's error
    field, so the message reaches logs and (where the API has one) the client.
    """

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        self.code = code
        self.message = message or code.name.replace("_", " ")
        super().__init__(f"{code.name.upper()}: {self.message}")
