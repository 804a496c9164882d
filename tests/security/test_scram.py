"""SCRAM against RFC 7677's worked example, and its refusals."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.security.mechanism import AuthenticationFailed, InvalidCredentials
from oncelog.security.scram import (
    ScramClient,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    new_credential,
)

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512

# RFC 7677, section 3: user "user", password "pencil".
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_server() -> ScramServer:
    credential = new_credential(SHA256, "pencil", RFC_SALT, 4096)
    return ScramServer(SHA256, {"user": credential}.get, RFC_SERVER_NONCE)


def test_server_reproduces_rfc_7677() -> None:
    server = rfc_server()
    assert server.evaluate(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert not server.complete
    assert server.evaluate(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete and server.authorization_id == "user"


def test_client_reproduces_rfc_7677() -> None:
    client = ScramClient(SHA256, "user", "pencil", RFC_CLIENT_NONCE)
    assert client.first_message() == RFC_CLIENT_FIRST
    assert client.final_message(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify_server_final(RFC_SERVER_FINAL)
    with pytest.raises(AuthenticationFailed, match="server signature"):
        client.verify_server_final(b"v=" + base64.b64encode(b"x" * 32))


def test_wrong_password_is_refused_without_saying_why_to_the_client() -> None:
    server = rfc_server()
    client = ScramClient(SHA256, "user", "pencil?", RFC_CLIENT_NONCE)
    server_first = server.evaluate(client.first_message())
    with pytest.raises(InvalidCredentials, match="Invalid client credentials"):
        server.evaluate(client.final_message(server_first))
    assert not server.complete
    with pytest.raises(InvalidCredentials):  # a failed exchange takes nothing more
        server.evaluate(RFC_CLIENT_FINAL)


def test_unknown_user_fails_at_the_first_message() -> None:
    with pytest.raises(InvalidCredentials, match="Invalid user credentials"):
        rfc_server().evaluate(b"n,,n=nobody,r=abc")


@pytest.mark.parametrize(
    "message",
    [
        b"y,,n=user,r=abc",  # channel binding flags other than n are not supported
        b"p=tls-unique,,n=user,r=abc",
        b"n,,n=user",  # no nonce
        b"n,,n=us,er,r=abc",  # an unescaped comma in the name
        b"n,,n=\xc3\xa9,r=abc",  # non-ASCII names: Kafka's grammar is ASCII
        b"\xff\xfe",
        b"",
    ],
)
def test_malformed_client_first_is_refused(message: bytes) -> None:
    with pytest.raises(InvalidCredentials):
        rfc_server().evaluate(message)


def test_authorization_id_must_be_the_user() -> None:
    with pytest.raises(AuthenticationFailed, match="different from username"):
        rfc_server().evaluate(b"n,a=admin,n=user,r=abc")
    server = rfc_server()
    server.evaluate(b"n,a=user,n=user,r=abc")  # the same name is accepted


def test_the_nonce_and_channel_binding_must_be_the_exchange_s() -> None:
    server = rfc_server()
    server.evaluate(RFC_CLIENT_FIRST)
    replayed = RFC_CLIENT_FINAL.replace(b"k0,p=", b"k1,p=")
    with pytest.raises(InvalidCredentials, match="nonce"):
        server.evaluate(replayed)
    server = rfc_server()
    server.evaluate(RFC_CLIENT_FIRST)
    other_binding = RFC_CLIENT_FINAL.replace(b"c=biws", b"c=" + base64.b64encode(b"n,a=x,"))
    with pytest.raises(InvalidCredentials, match="channel binding"):
        server.evaluate(other_binding)


def test_too_few_iterations_are_refused() -> None:
    weak = new_credential(SHA512, "pw", b"salt", 1000)
    server = ScramServer(SHA512, {"u": weak}.get, "nonce")
    with pytest.raises(InvalidCredentials, match="less than the minimum 4096"):
        server.evaluate(b"n,,n=u,r=abc")


def test_delegation_tokens_are_not_supported() -> None:
    with pytest.raises(InvalidCredentials, match="delegation-token"):
        rfc_server().evaluate(b"n,,n=user,r=abc,tokenauth=true")


def test_credential_text_round_trips_in_kafka_s_form() -> None:
    credential = new_credential(SHA512, "secret", b"0123456789abcdef", 4096)
    text = credential.to_text()
    assert text.startswith("salt=MDEyMzQ1Njc4OWFiY2RlZg==,stored_key=")
    assert text.endswith(",iterations=4096")
    assert ScramCredential.from_text(text) == credential
    with pytest.raises(ValueError, match="invalid SCRAM credential"):
        ScramCredential.from_text("salt=%%%,iterations=1")


@settings(max_examples=25, deadline=None)
@given(
    mechanism=st.sampled_from(list(ScramMechanism)),
    user=st.text(st.characters(min_codepoint=1, max_codepoint=127), min_size=1, max_size=12),
    password=st.text(min_size=1, max_size=12),
    nonce=st.text("abcdefXYZ0189+/", min_size=1, max_size=24),
)
def test_client_and_server_agree(
    mechanism: ScramMechanism, user: str, password: str, nonce: str
) -> None:
    """Any ASCII user name (commas and equal signs escaped) and any password."""
    credential = new_credential(mechanism, password, b"salty", 4096)
    server = ScramServer(mechanism, {user: credential}.get, "srv")
    client = ScramClient(mechanism, user, password, nonce)
    client.verify_server_final(
        server.evaluate(client.final_message(server.evaluate(client.first_message())))
    )
    assert server.complete and server.authorization_id == user
