"""The authentication state machine of a connection, driven frame by frame."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.protocol import codec
from oncelog.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.security.plain import PlainServer, plain_token
from oncelog.security.principal import KafkaPrincipal
from oncelog.security.sasl import (
    Authenticated,
    Dispatch,
    Refuse,
    SaslServerAuthenticator,
    SaslState,
    Send,
)
from oncelog.security.scram import ScramClient, ScramMechanism, ScramServer, new_credential

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
SHA512 = ScramMechanism.SCRAM_SHA_512
CREDENTIALS = {
    name: new_credential(SHA512, pw, b"salt-" + name.encode()) for name, pw in USERS.items()
}


def authenticator(reauth_ms: int = 0) -> SaslServerAuthenticator:
    return SaslServerAuthenticator(
        {
            "PLAIN": lambda: PlainServer(USERS),
            "SCRAM-SHA-512": lambda: ScramServer(SHA512, CREDENTIALS.get, "server-nonce"),
        },
        reauth_ms={"PLAIN": reauth_ms, "SCRAM-SHA-512": reauth_ms},
        max_receive_bytes=4096,
    )


def frame(api_key: int, version: int, body: dict[str, Any], correlation_id: int = 7) -> bytes:
    """A request frame as the server hands it over: without its size prefix."""
    return codec.encode_request(codec.api_codec(api_key, version), correlation_id, "t", body)[4:]


def response(api_key: int, version: int, data: bytes) -> Any:
    correlation_id, body = codec.decode_response(codec.api_codec(api_key, version), data[4:])
    assert correlation_id == 7
    return body


def api_versions() -> bytes:
    return frame(
        ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
    )


def handshake(mechanism: str, version: int = 1) -> bytes:
    return frame(ApiKey.SASL_HANDSHAKE, version, {"mechanism": mechanism})


def authenticate(token: bytes, version: int = 2) -> bytes:
    return frame(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": token})


def metadata() -> bytes:
    return frame(
        ApiKey.METADATA,
        12,
        {
            "topics": None,
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )


def plain_login(
    auth: SaslServerAuthenticator,
    user: str = "alice",
    password: str = "alice-secret",
    now_ms: int = 0,
) -> Any:
    assert isinstance(auth.receive(handshake("PLAIN"), now_ms), Send)
    return auth.receive(authenticate(plain_token(user, password)), now_ms)


def test_api_versions_then_plain_then_ordinary_requests() -> None:
    auth = authenticator()
    assert auth.max_frame_bytes == 4096
    assert isinstance(auth.receive(api_versions(), 0), Dispatch)
    assert auth.state is SaslState.HANDSHAKE_REQUEST
    sent = auth.receive(handshake("PLAIN"), 0)
    assert isinstance(sent, Send)
    answer = response(ApiKey.SASL_HANDSHAKE, 1, sent.frame)
    assert answer.error_code == ErrorCode.none
    assert answer.mechanisms == ("PLAIN", "SCRAM-SHA-512")
    done = auth.receive(authenticate(plain_token("alice", "alice-secret")), 0)
    assert isinstance(done, Authenticated)
    assert done.principal == KafkaPrincipal("User", "alice") and done.session_expiry_ms is None
    assert response(ApiKey.SASL_AUTHENTICATE, 2, done.frame).error_code == ErrorCode.none
    assert auth.max_frame_bytes is None
    assert isinstance(auth.receive(metadata(), 0), Dispatch)


def test_scram_exchange_with_framing() -> None:
    auth = authenticator()
    client = ScramClient(SHA512, "bob", "bob-secret", "client-nonce")
    auth.receive(handshake("SCRAM-SHA-512"), 0)
    first = auth.receive(authenticate(client.first_message()), 0)
    assert isinstance(first, Send)
    server_first = response(ApiKey.SASL_AUTHENTICATE, 2, first.frame).auth_bytes
    done = auth.receive(authenticate(client.final_message(server_first)), 0)
    assert isinstance(done, Authenticated) and done.principal.name == "bob"
    client.verify_server_final(response(ApiKey.SASL_AUTHENTICATE, 2, done.frame).auth_bytes)


@pytest.mark.parametrize(
    ("user", "password", "message"),
    [
        ("alice", "wrong", "Authentication failed: Invalid username or password"),
        ("nobody", "x", "Authentication failed: Invalid username or password"),
    ],
)
def test_plain_failure_answers_then_closes(user: str, password: str, message: str) -> None:
    auth = authenticator()
    refused = plain_login(auth, user, password)
    assert isinstance(refused, Refuse) and refused.frame is not None
    answer = response(ApiKey.SASL_AUTHENTICATE, 2, refused.frame)
    assert answer.error_code == ErrorCode.sasl_authentication_failed
    assert answer.error_message == message
    assert auth.state is SaslState.FAILED
    assert isinstance(auth.receive(metadata(), 0), Refuse)  # nothing more is answered


def test_scram_failure_gets_kafka_s_generic_message() -> None:
    auth = authenticator()
    auth.receive(handshake("SCRAM-SHA-512"), 0)
    refused = auth.receive(authenticate(b"n,,n=nobody,r=abc"), 0)
    assert isinstance(refused, Refuse) and refused.frame is not None
    answer = response(ApiKey.SASL_AUTHENTICATE, 2, refused.frame)
    assert answer.error_message == (
        "Authentication failed during authentication due to invalid credentials with SASL "
        "mechanism SCRAM-SHA-512"
    )
    assert "Invalid user credentials" in refused.reason  # the detail stays in the log


def test_unsupported_mechanism_lists_the_enabled_ones_then_closes() -> None:
    auth = authenticator()
    refused = auth.receive(handshake("GSSAPI"), 0)
    assert isinstance(refused, Refuse) and refused.frame is not None
    answer = response(ApiKey.SASL_HANDSHAKE, 1, refused.frame)
    assert answer.error_code == ErrorCode.unsupported_sasl_mechanism
    assert answer.mechanisms == ("PLAIN", "SCRAM-SHA-512")


def test_any_other_request_before_the_handshake_closes_without_an_answer() -> None:
    auth = authenticator()
    refused = auth.receive(metadata(), 0)
    assert refused == Refuse(None, refused.reason)
    assert "wrong security protocol" in refused.reason


def test_another_request_during_authentication_gets_illegal_sasl_state() -> None:
    auth = authenticator()
    auth.receive(handshake("PLAIN"), 0)
    describe = frame(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})
    refused = auth.receive(describe, 0)
    assert isinstance(refused, Refuse) and refused.frame is not None
    answer = response(ApiKey.DESCRIBE_LOG_DIRS, 4, refused.frame)
    assert answer.error_code == ErrorCode.illegal_sasl_state
    assert "during SASL authentication" in refused.reason


def test_api_versions_twice_closes() -> None:
    auth = authenticator()
    auth.receive(api_versions(), 0)
    assert isinstance(auth.receive(api_versions(), 0), Refuse)


def test_an_unsupported_api_versions_version_may_be_retried() -> None:
    auth = authenticator()
    too_new = bytearray(api_versions())
    too_new[2:4] = (SUPPORTED_VERSIONS[ApiKey.API_VERSIONS][1] + 1).to_bytes(2, "big")
    assert isinstance(auth.receive(bytes(too_new), 0), Dispatch)  # the broker answers v0
    assert auth.state is SaslState.HANDSHAKE_OR_VERSIONS_REQUEST
    assert isinstance(auth.receive(api_versions(), 0), Dispatch)
    assert auth.state is SaslState.HANDSHAKE_REQUEST


@pytest.mark.parametrize("junk", [b"", b"\x00\x12", b"GET / HTTP/1.1\r\n", b"\x60\x82\x01\x00" * 4])
def test_bytes_that_are_not_a_kafka_request_close(junk: bytes) -> None:
    assert isinstance(authenticator().receive(junk, 0), Refuse)


def test_a_truncated_authenticate_request_closes() -> None:
    auth = authenticator()
    auth.receive(handshake("PLAIN"), 0)
    whole = authenticate(plain_token("alice", "alice-secret"))
    refused = auth.receive(whole[:-5], 0)
    assert isinstance(refused, Refuse) and refused.frame is None
    assert "malformed" in refused.reason


def test_legacy_handshake_v0_takes_bare_tokens() -> None:
    auth = authenticator()
    assert isinstance(auth.receive(handshake("PLAIN", version=0), 0), Send)
    done = auth.receive(plain_token("alice", "alice-secret"), 0)
    assert isinstance(done, Authenticated)
    assert done.frame == b"\0\0\0\0"  # PLAIN's empty answer, size-prefixed
    failed = authenticator()
    failed.receive(handshake("PLAIN", version=0), 0)
    assert failed.receive(plain_token("alice", "nope"), 0) == Refuse(
        None, "Authentication failed: Invalid username or password"
    )


def test_legacy_scram_exchange() -> None:
    auth = authenticator()
    client = ScramClient(SHA512, "alice", "alice-secret", "n1")
    auth.receive(handshake("SCRAM-SHA-512", version=0), 0)
    first = auth.receive(client.first_message(), 0)
    assert isinstance(first, Send)
    done = auth.receive(client.final_message(first.frame[4:]), 0)
    assert isinstance(done, Authenticated)
    client.verify_server_final(done.frame[4:])


def test_session_lifetime_is_announced_and_enforced() -> None:
    auth = authenticator(reauth_ms=60_000)
    done = plain_login(auth, now_ms=1_000)
    assert isinstance(done, Authenticated) and done.session_expiry_ms == 61_000
    assert response(ApiKey.SASL_AUTHENTICATE, 2, done.frame).session_lifetime.total_seconds() == 60
    assert isinstance(auth.receive(metadata(), 60_999), Dispatch)
    expired = auth.receive(metadata(), 61_000)
    assert isinstance(expired, Refuse) and expired.frame is None


def test_reauthentication_keeps_the_connection() -> None:
    auth = authenticator(reauth_ms=60_000)
    plain_login(auth, now_ms=0)
    done = plain_login(auth, now_ms=50_000)
    assert isinstance(done, Authenticated) and done.session_expiry_ms == 110_000
    assert isinstance(auth.receive(metadata(), 100_000), Dispatch)


def test_reauthentication_cannot_change_the_principal() -> None:
    auth = authenticator(reauth_ms=60_000)
    plain_login(auth, now_ms=0)
    refused = plain_login(auth, "bob", "bob-secret", now_ms=50_000)
    assert isinstance(refused, Refuse) and refused.frame is not None
    answer = response(ApiKey.SASL_AUTHENTICATE, 2, refused.frame)
    assert answer.error_message == (
        "Cannot change principals during re-authentication from User.alice: User.bob"
    )


def test_reauthentication_cannot_change_the_mechanism() -> None:
    auth = authenticator(reauth_ms=60_000)
    plain_login(auth, now_ms=0)
    assert isinstance(auth.receive(handshake("SCRAM-SHA-512"), 50_000), Send)
    assert auth.state is SaslState.REAUTH_BAD_MECHANISM
    refused = auth.receive(authenticate(b"n,,n=alice,r=x"), 50_000)
    assert (
        isinstance(refused, Refuse) and "re-authentication of mechanism 'PLAIN'" in refused.reason
    )


def test_without_a_session_lifetime_a_handshake_goes_to_the_broker() -> None:
    auth = authenticator()
    plain_login(auth)
    assert isinstance(auth.receive(handshake("PLAIN"), 10), Dispatch)


def test_reauthentication_within_a_second_goes_to_the_broker() -> None:
    auth = authenticator(reauth_ms=60_000)
    plain_login(auth, now_ms=0)
    plain_login(auth, now_ms=5_000)  # first re-authentication
    assert isinstance(auth.receive(handshake("PLAIN"), 5_500), Dispatch)


FRAMES = st.one_of(
    st.binary(max_size=64),
    st.sampled_from(
        [
            api_versions(),
            handshake("PLAIN"),
            handshake("SCRAM-SHA-512"),
            handshake("PLAIN", 0),
            metadata(),
            handshake("GSSAPI"),
        ]
    ),
    st.builds(authenticate, st.binary(max_size=40)),
    st.builds(
        lambda u, p: authenticate(plain_token(u, p)),
        st.sampled_from(["alice", "eve"]),
        st.sampled_from(["wrong", "", "alice-secret2"]),
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(FRAMES, max_size=8))
def test_no_frame_sequence_without_the_password_authenticates(frames: list[bytes]) -> None:
    """Whatever arrives, the core decides (never raises), dispatches nothing but
    ApiVersions before authentication, and authenticates nobody without a password."""
    auth = authenticator()
    for data in frames:
        decision = auth.receive(data, 0)
        assert not isinstance(decision, Authenticated)
        if isinstance(decision, Dispatch):
            assert codec.peek_api(data)[0] == ApiKey.API_VERSIONS
        if isinstance(decision, Refuse):
            assert isinstance(auth.receive(api_versions(), 0), Refuse)
            break
