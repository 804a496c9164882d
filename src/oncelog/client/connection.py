"""A small blocking Kafka-protocol client for oncelog's admin tools and tests.

It sends one request at a time and picks, for each API, the highest version both sides
support. It is not a producer or consumer: those are confluent-kafka's job. With a
:class:`ClientSecurity` it speaks TLS and authenticates with SASL (SaslHandshake v1, then
SaslAuthenticate) before its first request, as Kafka's clients do.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass, field
from typing import Any

from oncelog.client.security import ClientSecurity
from oncelog.protocol import codec
from oncelog.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.security.mechanism import AuthenticationFailed


class ProtocolClientError(Exception):
    """The broker could not be reached or answered something unreadable."""


@dataclass(frozen=True)
class Bootstrap:
    """Where a cluster is, and how to reach it securely (the command line's
    ``--bootstrap-server`` with ``--command-config``)."""

    servers: str
    security: ClientSecurity = field(default_factory=ClientSecurity)

    def __str__(self) -> str:
        return self.servers


class KafkaConnection:
    """One blocking connection to one broker: requests go one at a time, each at the
    highest version both sides support (ApiVersions is asked once, on connect)."""

    def __init__(
        self,
        bootstrap: str | Bootstrap,
        *,
        client_id: str = "oncelog-cli",
        timeout_s: float = 10.0,
        security: ClientSecurity | None = None,
    ) -> None:
        """Connect to the first of ``bootstrap``'s servers, with the ``security`` given
        (else the Bootstrap's, else PLAINTEXT)."""
        if isinstance(bootstrap, Bootstrap):
            security = security or bootstrap.security
            bootstrap = bootstrap.servers
        host, _, port = bootstrap.split(",")[0].rpartition(":")
        if not port.isdigit():
            raise ProtocolClientError(f"{bootstrap!r} is not HOST:PORT")
        self.client_id = client_id
        self.security = security or ClientSecurity()
        host = host.strip("[]") or "127.0.0.1"
        try:
            self._sock = socket.create_connection((host, int(port)), timeout=timeout_s)
            context = self.security.ssl_context()
            if context is not None:
                self._sock = context.wrap_socket(self._sock, server_hostname=host)
        except (OSError, ssl.SSLError) as exc:
            raise ProtocolClientError(f"cannot connect to {bootstrap}: {exc}") from exc
        self._correlation_id = 0
        try:
            self._broker_versions = self._negotiate()
            self._authenticate()
        except BaseException:
            self._sock.close()
            raise

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> KafkaConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def version_for(self, api_key: int) -> int:
        ours = SUPPORTED_VERSIONS.get(api_key, (0, 0))
        theirs = self._broker_versions.get(api_key)
        if theirs is None:
            raise ProtocolClientError(f"the broker does not support {ApiKey(api_key).name}")
        version = min(ours[1], theirs[1])
        if version < max(ours[0], theirs[0]):
            raise ProtocolClientError(f"no common version of {ApiKey(api_key).name}")
        return version

    def request(self, api_key: int, body: dict[str, Any], version: int | None = None) -> Any:
        """Send one request and return the decoded response entity."""
        api = codec.api_codec(api_key, self.version_for(api_key) if version is None else version)
        _, response = codec.decode_response(api, self.exchange(api, body))
        return response

    def exchange(self, api: codec.ApiCodec, body: dict[str, Any]) -> bytes:
        """Send one request and return its response frame undecoded (its correlation id
        checked): for the responses kio cannot read, see
        :mod:`oncelog.protocol.describe_transactions`."""
        name = ApiKey(api.request_type.__api_key__).name
        self._correlation_id += 1
        try:
            self.send_raw(codec.encode_request(api, self._correlation_id, self.client_id, body))
            frame = self.receive_frame()
        except OSError as exc:  # timeouts and resets: the caller sees one error type
            raise ProtocolClientError(f"{name} request failed: {exc}") from exc
        answered = int.from_bytes(frame[:4], "big", signed=True)
        if answered != self._correlation_id:
            raise ProtocolClientError(
                f"{name}: response correlation id {answered}, expected {self._correlation_id}"
            )
        return frame

    def send_raw(self, data: bytes) -> None:
        self._sock.sendall(data)

    def receive_frame(self) -> bytes:
        size = int.from_bytes(self._receive_exactly(4), "big")
        return self._receive_exactly(size)

    def _receive_exactly(self, count: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < count:
            chunk = self._sock.recv(count - len(chunks))
            if not chunk:
                raise ProtocolClientError("the broker closed the connection")
            chunks += chunk
        return bytes(chunks)

    def reauthenticate(self) -> None:
        """Authenticate again on this connection (KIP-368), as clients do before their
        session ends when the broker sets ``connections.max.reauth.ms``."""
        self._authenticate()

    def _authenticate(self) -> None:
        """SASL, when the security protocol asks for it; ProtocolClientError if refused."""
        exchange = self.security.sasl_exchange()
        if exchange is None:
            return
        mechanism = self.security.mechanism
        handshake = self.request(ApiKey.SASL_HANDSHAKE, {"mechanism": mechanism}, version=1)
        if handshake.error_code != ErrorCode.none:
            raise ProtocolClientError(
                f"the broker does not offer {mechanism} (it offers "
                f"{', '.join(handshake.mechanisms) or 'nothing'})"
            )
        token: bytes | None = exchange.first()
        try:
            while token is not None:
                answer = self.request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": token})
                if answer.error_code != ErrorCode.none:
                    raise ProtocolClientError(
                        f"authentication failed: {answer.error_message or answer.error_code.name}"
                    )
                token = exchange.next(answer.auth_bytes)
        except AuthenticationFailed as exc:
            raise ProtocolClientError(f"authentication failed: {exc}") from exc

    def _negotiate(self) -> dict[int, tuple[int, int]]:
        response = self.request(
            ApiKey.API_VERSIONS,
            {"client_software_name": "oncelog", "client_software_version": "0"},
            version=3,
        )
        return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
