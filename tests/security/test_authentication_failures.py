"""What a client that fails to authenticate gets: Kafka's error or a closed connection,
nothing more answered, and the broker keeps serving everyone else.

Raw sockets show exactly what comes back on the wire; the real clients show that the
failure reaches the application.
"""

from __future__ import annotations

import datetime
import socket
import ssl
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from oncelog.client.connection import KafkaConnection, ProtocolClientError
from oncelog.client.security import ClientSecurity
from oncelog.protocol import codec
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.security.plain import plain_token
from oncelog.testing import EmbeddedBroker
from oncelog.testing.security import CertificateAuthority, SecurityKit

TIMEOUT_S = 10
METADATA = {
    "topics": [],
    "allow_auto_topic_creation": False,
    "include_topic_authorized_operations": False,
}


def frame(api_key: int, version: int, body: dict[str, object], correlation_id: int = 1) -> bytes:
    return codec.encode_request(codec.api_codec(api_key, version), correlation_id, "raw", body)


def reply(sock: socket.socket, api_key: int, version: int) -> object:
    size = int.from_bytes(read_exactly(sock, 4), "big")
    return codec.decode_response(codec.api_codec(api_key, version), read_exactly(sock, size))[1]


def read_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {count} bytes")
        data += chunk
    return data


def closed_without_answer(sock: socket.socket) -> bool:
    """The broker closed the connection and sent nothing (more)."""
    sock.settimeout(TIMEOUT_S)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


@pytest.fixture
def plain_socket(secure_broker: EmbeddedBroker) -> Iterator[socket.socket]:
    host, port = secure_broker.bootstrap_servers_for("SASL_PLAINTEXT").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
        yield sock


def still_serves(broker: EmbeddedBroker, kit: SecurityKit) -> None:
    """A well-behaved client on each listener is served."""
    for protocol, user, mechanism in (
        ("SASL_SSL", "alice", "SCRAM-SHA-512"),
        ("SASL_PLAINTEXT", "bob", "PLAIN"),
        ("SSL", "alice", None),
    ):
        security = kit.client(protocol, user, mechanism)
        with KafkaConnection(broker.bootstrap_servers_for(protocol), security=security) as conn:
            assert conn.request(ApiKey.METADATA, METADATA).brokers


# -- wrong passwords and unknown users -------------------------------------------------------


@pytest.mark.parametrize(
    ("protocol", "mechanism", "user", "password", "message"),
    [
        ("SASL_PLAINTEXT", "PLAIN", "alice", "nope", "Invalid username or password"),
        ("SASL_PLAINTEXT", "PLAIN", "mallory", "x", "Invalid username or password"),
        ("SASL_SSL", "SCRAM-SHA-512", "alice", "nope", "invalid credentials"),
        ("SASL_SSL", "SCRAM-SHA-256", "mallory", "x", "invalid credentials"),
    ],
)
def test_bad_credentials_get_sasl_authentication_failed(
    secure_broker: EmbeddedBroker,
    kit: SecurityKit,
    protocol: str,
    mechanism: str,
    user: str,
    password: str,
    message: str,
) -> None:
    security = ClientSecurity.from_properties(
        kit.client(protocol, "alice", mechanism).librdkafka()
        | {"sasl.username": user, "sasl.password": password}
    )
    with pytest.raises(ProtocolClientError, match=f"authentication failed: .*{message}"):
        KafkaConnection(secure_broker.bootstrap_servers_for(protocol), security=security)
    still_serves(secure_broker, kit)


def test_confluent_kafka_reports_the_failure(
    secure_broker: EmbeddedBroker, kit: SecurityKit
) -> None:
    config = {
        "bootstrap.servers": secure_broker.bootstrap_servers_for("SASL_SSL"),
        **kit.client("SASL_SSL", "alice", "SCRAM-SHA-512").librdkafka(),
        "sasl.password": "wrong",
    }
    errors: list[str] = []
    admin = AdminClient(config | {"error_cb": lambda e: errors.append(str(e))})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    deadline = time.monotonic() + TIMEOUT_S
    while not errors and time.monotonic() < deadline:
        admin.poll(0.5)  # error callbacks are served by poll
    assert any("Authentication failed" in e for e in errors), errors


def test_the_connection_closes_after_the_failure_answer(
    plain_socket: socket.socket,
) -> None:
    plain_socket.sendall(frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}))
    assert reply(plain_socket, ApiKey.SASL_HANDSHAKE, 1).error_code == ErrorCode.none
    plain_socket.sendall(
        frame(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": plain_token("alice", "nope")})
    )
    answer = reply(plain_socket, ApiKey.SASL_AUTHENTICATE, 2)
    assert answer.error_code == ErrorCode.sasl_authentication_failed
    # A request sent right after the failure is never answered.
    plain_socket.sendall(frame(ApiKey.METADATA, 12, METADATA | {"topics": None}))
    assert closed_without_answer(plain_socket)


def test_unsupported_mechanism_lists_what_the_listener_offers(plain_socket: socket.socket) -> None:
    plain_socket.sendall(frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"}))
    answer = reply(plain_socket, ApiKey.SASL_HANDSHAKE, 1)
    assert answer.error_code == ErrorCode.unsupported_sasl_mechanism
    assert set(answer.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert closed_without_answer(plain_socket)


# -- requests before authentication, broken frames -------------------------------------------


@pytest.mark.parametrize(
    ("api_key", "version", "body"),
    [
        (ApiKey.METADATA, 12, METADATA | {"topics": None}),
        (ApiKey.CREATE_TOPICS, 7, {"topics": [], "timeout": 1000, "validate_only": False}),
        (ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None}),
    ],
)
def test_any_other_request_before_authenticating_closes_unanswered(
    secure_broker: EmbeddedBroker,
    kit: SecurityKit,
    plain_socket: socket.socket,
    api_key: int,
    version: int,
    body: dict[str, object],
) -> None:
    plain_socket.sendall(
        frame(
            ApiKey.API_VERSIONS, 3, {"client_software_name": "raw", "client_software_version": "1"}
        )
    )
    assert reply(plain_socket, ApiKey.API_VERSIONS, 3).error_code == ErrorCode.none
    plain_socket.sendall(frame(api_key, version, body))
    assert closed_without_answer(plain_socket)
    still_serves(secure_broker, kit)


def test_a_request_during_the_exchange_gets_illegal_sasl_state(plain_socket: socket.socket) -> None:
    plain_socket.sendall(frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}))
    reply(plain_socket, ApiKey.SASL_HANDSHAKE, 1)
    plain_socket.sendall(frame(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None}))
    answer = reply(plain_socket, ApiKey.DESCRIBE_LOG_DIRS, 4)
    assert answer.error_code == ErrorCode.illegal_sasl_state
    assert answer.results == ()
    assert closed_without_answer(plain_socket)


def test_a_truncated_sasl_frame_closes_only_that_connection(
    secure_broker: EmbeddedBroker, kit: SecurityKit, plain_socket: socket.socket
) -> None:
    plain_socket.sendall(frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}))
    reply(plain_socket, ApiKey.SASL_HANDSHAKE, 1)
    whole = frame(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": plain_token("alice", "alice-secret")})
    truncated = (len(whole) - 4 - 6).to_bytes(4, "big") + whole[4:-6]  # the body cut short
    plain_socket.sendall(truncated)
    assert closed_without_answer(plain_socket)
    still_serves(secure_broker, kit)


def test_a_connection_that_stops_inside_a_sasl_frame_is_dropped(
    secure_broker: EmbeddedBroker, kit: SecurityKit, plain_socket: socket.socket
) -> None:
    whole = frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    plain_socket.sendall(whole[:-3])
    plain_socket.shutdown(socket.SHUT_WR)
    assert closed_without_answer(plain_socket)
    still_serves(secure_broker, kit)


def test_an_oversized_frame_before_authentication_closes_at_once(
    secure_broker: EmbeddedBroker, kit: SecurityKit, plain_socket: socket.socket
) -> None:
    """sasl.server.max.receive.size (512 KiB) applies until the client has authenticated:
    the broker does not wait for, or reserve memory for, the body."""
    plain_socket.sendall((524_289).to_bytes(4, "big") + b"\0" * 16)
    assert closed_without_answer(plain_socket)
    still_serves(secure_broker, kit)


def test_legacy_handshake_v0_with_bare_tokens(plain_socket: socket.socket) -> None:
    """SaslHandshake v0: the SASL tokens travel as bare size-prefixed frames (no
    SaslAuthenticate); after them the connection serves ordinary requests."""
    plain_socket.sendall(frame(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}))
    assert reply(plain_socket, ApiKey.SASL_HANDSHAKE, 0).error_code == ErrorCode.none
    token = plain_token("bob", "bob-secret")
    plain_socket.sendall(len(token).to_bytes(4, "big") + token)
    assert read_exactly(plain_socket, 4) == b"\0\0\0\0"  # PLAIN's empty answer
    plain_socket.sendall(frame(ApiKey.METADATA, 12, METADATA))
    assert reply(plain_socket, ApiKey.METADATA, 12).brokers


def test_legacy_handshake_v0_failure_closes(plain_socket: socket.socket) -> None:
    plain_socket.sendall(frame(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}))
    reply(plain_socket, ApiKey.SASL_HANDSHAKE, 0)
    token = plain_token("bob", "wrong")
    plain_socket.sendall(len(token).to_bytes(4, "big") + token)
    assert closed_without_answer(plain_socket)


def test_plaintext_bytes_on_a_tls_listener_are_refused(
    secure_broker: EmbeddedBroker, kit: SecurityKit
) -> None:
    host, port = secure_broker.bootstrap_servers_for("SASL_SSL").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
        sock.sendall(frame(ApiKey.METADATA, 12, METADATA | {"topics": None}))
        assert closed_without_answer(sock)
    still_serves(secure_broker, kit)


# -- certificates ----------------------------------------------------------------------------


def tls_connect(
    broker: EmbeddedBroker, kit: SecurityKit, certificate: tuple[str, str] | None
) -> None:
    """A TLS connection to the SSL listener (client certificate required) that sends one
    Metadata request and reads its answer."""
    context = ssl.create_default_context(cafile=str(kit.authority.ca_file))
    if certificate is not None:
        context.load_cert_chain(*certificate)
    host, port = broker.bootstrap_servers_for("SSL").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as raw:
        with context.wrap_socket(raw, server_hostname=host) as sock:
            sock.sendall(frame(ApiKey.METADATA, 12, METADATA))
            reply(sock, ApiKey.METADATA, 12)


def test_a_valid_client_certificate_is_served(
    secure_broker: EmbeddedBroker, kit: SecurityKit
) -> None:
    issued = kit.client_certificate("alice")
    tls_connect(secure_broker, kit, (str(issued.certificate), str(issued.key)))


def test_an_expired_client_certificate_is_refused(
    secure_broker: EmbeddedBroker, kit: SecurityKit
) -> None:
    now = datetime.datetime.now(datetime.UTC)
    expired = kit.authority.issue(
        "expired",
        "alice",
        valid_from=now - datetime.timedelta(days=3),
        valid_until=now - datetime.timedelta(days=1),
    )
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        tls_connect(secure_broker, kit, (str(expired.certificate), str(expired.key)))
    still_serves(secure_broker, kit)


def test_a_certificate_from_another_authority_is_refused(
    secure_broker: EmbeddedBroker, kit: SecurityKit, tmp_path: object
) -> None:
    stranger = CertificateAuthority(kit.authority.directory / "stranger", "another CA")
    forged = stranger.issue("forged", "alice")
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        tls_connect(secure_broker, kit, (str(forged.certificate), str(forged.key)))
    still_serves(secure_broker, kit)


def test_no_client_certificate_is_refused_when_required(
    secure_broker: EmbeddedBroker, kit: SecurityKit
) -> None:
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        tls_connect(secure_broker, kit, None)
    still_serves(secure_broker, kit)


def test_the_client_refuses_a_broker_it_does_not_trust(
    secure_broker: EmbeddedBroker, kit: SecurityKit
) -> None:
    stranger = CertificateAuthority(kit.authority.directory / "other-trust", "untrusted CA")
    security = ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
            "ssl.ca.location": str(stranger.ca_file),
        }
    )
    with pytest.raises(ProtocolClientError, match="CERTIFICATE_VERIFY_FAILED"):
        KafkaConnection(secure_broker.bootstrap_servers_for("SASL_SSL"), security=security)


# -- re-authentication (KIP-368) -------------------------------------------------------------


@pytest.fixture(scope="module")
def reauth_broker(kit: SecurityKit) -> Iterator[EmbeddedBroker]:
    config = kit.broker_config(["SASL_PLAINTEXT"], mechanisms=["PLAIN"])
    with EmbeddedBroker(config=config | {"connections.max.reauth.ms": "2500"}) as broker:
        yield broker


def test_a_session_past_its_lifetime_is_closed(
    reauth_broker: EmbeddedBroker, kit: SecurityKit
) -> None:
    security = kit.client("SASL_PLAINTEXT", "alice", "PLAIN")
    with KafkaConnection(reauth_broker.bootstrap_servers, security=security) as conn:
        assert conn.request(ApiKey.METADATA, METADATA).brokers
        time.sleep(3)
        with pytest.raises(ProtocolClientError):
            conn.request(ApiKey.METADATA, METADATA)


def test_reauthentication_keeps_the_connection(
    reauth_broker: EmbeddedBroker, kit: SecurityKit
) -> None:
    security = kit.client("SASL_PLAINTEXT", "alice", "PLAIN")
    with KafkaConnection(reauth_broker.bootstrap_servers, security=security) as conn:
        for _ in range(3):
            time.sleep(1.5)
            conn.reauthenticate()  # within the lifetime, on the same connection
            assert conn.request(ApiKey.METADATA, METADATA).brokers


def test_librdkafka_reauthenticates_without_reconnecting(
    reauth_broker: EmbeddedBroker, kit: SecurityKit
) -> None:
    """librdkafka re-authenticates before the session ends (KIP-368): over three session
    lifetimes the connections it opened are the ones it keeps using."""
    from confluent_kafka import Producer

    server = reauth_broker.broker
    assert server is not None
    producer = Producer(
        {
            "bootstrap.servers": reauth_broker.bootstrap_servers,
            **kit.client("SASL_PLAINTEXT", "alice", "PLAIN").librdkafka(),
        }
    )
    producer.produce("reauth", b"first")
    assert producer.flush(TIMEOUT_S) == 0
    opened = server.server.connections_opened
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        producer.produce("reauth", b"more")
        assert producer.flush(TIMEOUT_S) == 0
        time.sleep(0.5)
    assert server.server.connections_opened == opened
