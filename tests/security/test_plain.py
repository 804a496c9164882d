"""SASL/PLAIN: Kafka's PlainSaslServer rules and messages."""

from __future__ import annotations

import pytest

from oncelog.security.mechanism import AuthenticationFailed, InvalidCredentials
from oncelog.security.plain import PlainServer, plain_token

USERS = {"alice": "alice-secret", "admin": "admin-secret"}


def test_a_configured_user_authenticates() -> None:
    server = PlainServer(USERS)
    assert server.evaluate(plain_token("alice", "alice-secret")) == b""
    assert server.complete and server.authorization_id == "alice"


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (plain_token("alice", "wrong"), "Invalid username or password"),
        (plain_token("mallory", "alice-secret"), "Invalid username or password"),
        (plain_token("", "x"), "username not specified"),
        (plain_token("alice", ""), "password not specified"),
        (plain_token("alice", "alice-secret", "admin"), "authorization id that is different"),
    ],
)
def test_refusals_carry_kafka_s_message(token: bytes, message: str) -> None:
    server = PlainServer(USERS)
    with pytest.raises(AuthenticationFailed, match=message):
        server.evaluate(token)
    assert not server.complete


@pytest.mark.parametrize("token", [b"alice\0alice-secret", b"a\0b\0c\0d", b"\xff\0a\0b"])
def test_malformed_tokens_are_refused(token: bytes) -> None:
    with pytest.raises(InvalidCredentials):
        PlainServer(USERS).evaluate(token)
