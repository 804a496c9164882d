"""SASL/PLAIN (RFC 4616) as Kafka's ``PlainSaslServer`` does it: pure.

The client sends one message, ``authzid NUL username NUL password``; the broker checks the
password against its configured users (``user_<name>="<password>"`` in the listener's
``PlainLoginModule`` JAAS configuration) and answers an empty token. The failure messages
are Kafka's and reach the client; PLAIN sends the password in the clear, so it belongs on
SASL_SSL listeners (or loopback).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from oncelog.security.mechanism import AuthenticationFailed, InvalidCredentials

__all__ = ["PlainServer", "plain_token"]


def plain_token(username: str, password: str, authorization_id: str = "") -> bytes:
    """The client's message."""
    return f"{authorization_id}\0{username}\0{password}".encode()


class PlainServer:
    """One PLAIN exchange against a table of users and passwords."""

    def __init__(self, passwords: Mapping[str, str]) -> None:
        self._passwords = passwords
        self._user: str | None = None

    @property
    def complete(self) -> bool:
        return self._user is not None

    @property
    def authorization_id(self) -> str:
        assert self._user is not None, "authentication exchange has not completed"
        return self._user

    def evaluate(self, token: bytes) -> bytes:
        if self._user is not None:
            raise InvalidCredentials("Unexpected challenge after PLAIN authentication completed")
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidCredentials("Invalid SASL/PLAIN response: not UTF-8") from None
        parts = text.split("\0")
        if len(parts) != 3:
            raise InvalidCredentials(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}"
            )
        authorization_id, username, password = parts
        if not username:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        expected = self._passwords.get(username)
        # Compared even for an unknown user, so that the time taken says nothing about
        # which users exist.
        matches = hmac.compare_digest(password.encode(), (expected or "\0").encode())
        if expected is None or not matches:
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        if authorization_id and authorization_id != username:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        self._user = username
        return b""
