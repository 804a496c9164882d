"""What a SASL mechanism's server side looks like to the connection's authenticator.

A mechanism server is a pure object fed the client's tokens one at a time. It fails in one
of two ways, as Kafka's ``SaslServer`` implementations do: :class:`AuthenticationFailed`
carries a message meant for the client (``Authentication failed: Invalid username or
password``), :class:`InvalidCredentials` one meant only for the broker's log: the client
gets a generic message, so that it cannot learn, for example, which user names exist.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["AuthenticationFailed", "InvalidCredentials", "MechanismServer"]


class AuthenticationFailed(Exception):
    """Authentication failed; the message is sent to the client as it is."""


class InvalidCredentials(Exception):
    """Authentication failed; the message is logged, the client gets a generic one."""


class MechanismServer(Protocol):
    """One authentication exchange of one mechanism, server side."""

    @property
    def complete(self) -> bool:
        """The exchange succeeded: no more tokens are expected."""

    @property
    def authorization_id(self) -> str:
        """Who the client authenticated as (valid once complete)."""

    def evaluate(self, token: bytes) -> bytes:
        """Take the client's next token, return the server's (possibly empty) answer."""
