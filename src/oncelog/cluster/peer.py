"""A connection from one broker to another (the follower's Fetch and
OffsetsForLeaderEpoch, WriteTxnMarkers, verification): one request at a time, asyncio
streams, the project's codec.

Versions are fixed rather than negotiated: both ends are oncelog brokers of one build.
Over a secured inter-broker listener the connection authenticates like any client (Kafka's
inter-broker client does the same): TLS with the broker's trust store (and its own
certificate as client certificate), then SaslHandshake and SaslAuthenticate with the
broker's own credentials, before its first request. When the other broker limits the
session (``connections.max.reauth.ms``, KIP-368) the connection authenticates again on
itself before a request sent past 85 to 95 % of the session's lifetime, as Kafka's
clients do, instead of being closed by the other broker.
"""

from __future__ import annotations

import asyncio
import random
import ssl
import time
from typing import TYPE_CHECKING, Any

from oncelog.client.security import ClientSecurity
from oncelog.protocol import codec
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.security.mechanism import AuthenticationFailed

if TYPE_CHECKING:
    from oncelog.cluster.metadata import MetadataCache
    from oncelog.cluster.zookeeper import BrokerRegistration

__all__ = [
    "FETCH_VERSION",
    "OFFSETS_FOR_LEADER_EPOCH_VERSION",
    "PeerConnection",
    "PeerError",
    "PeerLink",
]

FETCH_VERSION = 12  # replica_id, current_leader_epoch and log_start_offset; topics by name
OFFSETS_FOR_LEADER_EPOCH_VERSION = 4
SASL_HANDSHAKE_VERSION = 1  # KIP-152: SaslAuthenticate requests follow
SASL_AUTHENTICATE_VERSION = 2
# Kafka's clients re-authenticate at a random point between 85 % and 95 % of the session.
REAUTHENTICATE_WITHIN = (0.85, 0.95)
CONNECT_TIMEOUT_S = 5.0


class PeerError(Exception):
    """The other broker could not be reached, or the connection broke."""


class PeerConnection:
    """A connection to another broker, one request at a time, at fixed versions (both ends
    are oncelog brokers of one build)."""

    def __init__(
        self, host: str, port: int, client_id: str, security: ClientSecurity | None = None
    ) -> None:
        self.address = (host, port)
        self._client_id = client_id
        self._security = security or ClientSecurity()
        self._reauthenticate_at: float | None = None  # time.monotonic(); None: never
        self.opened = 0  # how many times a connection was opened (logs, tests)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation_id = 0

    async def request(
        self, api_key: ApiKey, version: int, body: dict[str, Any], timeout_s: float
    ) -> Any:
        """Send one request and return the decoded response; PeerError on any failure
        (the connection is then closed, the next request opens a new one)."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._connected()
                if self._reauthenticate_at is not None:
                    if time.monotonic() >= self._reauthenticate_at:
                        await self._authenticate()
                return await self._exchange(api_key, version, body)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ssl.SSLError) as exc:
            self.close()
            raise PeerError(
                f"{api_key.name} to {self.address[0]}:{self.address[1]}: {exc!r}"
            ) from exc
        except PeerError:
            self.close()
            raise

    async def _exchange(self, api_key: ApiKey, version: int, body: dict[str, Any]) -> Any:
        assert self._reader is not None and self._writer is not None
        api = codec.api_codec(api_key, version)
        self._correlation_id += 1
        frame = codec.encode_request(api, self._correlation_id, self._client_id, body)
        self._writer.write(frame)
        await self._writer.drain()
        size = int.from_bytes(await self._reader.readexactly(4), "big")
        payload = await self._reader.readexactly(size)
        correlation_id, response = codec.decode_response(api, payload)
        if correlation_id != self._correlation_id:
            raise PeerError(f"correlation id {correlation_id}, expected {self._correlation_id}")
        return response

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
        self._reauthenticate_at = None

    async def _connected(self) -> None:
        if self._reader is not None and self._writer is not None:
            return
        host, port = self.address
        context = self._security.ssl_context()
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            self._reader, self._writer = await asyncio.open_connection(
                host,
                port,
                limit=1 << 20,
                ssl=context,
                server_hostname=host if context is not None else None,
            )
        self.opened += 1
        await self._authenticate()

    async def _authenticate(self) -> None:
        """SASL with the broker's own credentials, when the inter-broker listener asks for
        it; PeerError if the other broker refuses."""
        exchange = self._security.sasl_exchange()
        if exchange is None:
            return
        mechanism = self._security.mechanism
        handshake = await self._exchange(
            ApiKey.SASL_HANDSHAKE, SASL_HANDSHAKE_VERSION, {"mechanism": mechanism}
        )
        if handshake.error_code != ErrorCode.none:
            raise PeerError(f"the broker at {host_port(self.address)} does not offer {mechanism}")
        token: bytes | None = exchange.first()
        try:
            while token is not None:
                answer = await self._exchange(
                    ApiKey.SASL_AUTHENTICATE, SASL_AUTHENTICATE_VERSION, {"auth_bytes": token}
                )
                if answer.error_code != ErrorCode.none:
                    raise PeerError(
                        f"authentication to {host_port(self.address)} as "
                        f"{self._security.username} failed: "
                        f"{answer.error_message or ErrorCode(answer.error_code).name}"
                    )
                token = exchange.next(answer.auth_bytes)
        except AuthenticationFailed as exc:
            raise PeerError(f"authentication to {host_port(self.address)}: {exc}") from exc
        lifetime_s = answer.session_lifetime.total_seconds()
        self._reauthenticate_at = (
            time.monotonic() + lifetime_s * random.uniform(*REAUTHENTICATE_WITHIN)
            if lifetime_s > 0
            else None
        )


class PeerLink:
    """The connection to one broker as it is registered now (from the metadata cache):
    opened on first use, replaced when the broker registers again (a restart, maybe at
    another address), kept while its registration stays the same."""

    def __init__(
        self,
        cache: MetadataCache,
        broker_id: int,
        client_id: str,
        security: ClientSecurity | None = None,
    ) -> None:
        """``security``: how to reach the broker's inter-broker listener."""
        self._cache = cache
        self.broker_id = broker_id
        self._client_id = client_id
        self._security = security
        self._connection: PeerConnection | None = None
        self._registration: BrokerRegistration | None = None  # what _connection is to

    def connection(self) -> PeerConnection | None:
        """The connection to the broker's current registration (None: not registered now)."""
        registration = self._cache.brokers.get(self.broker_id)
        if registration is None:
            return None
        if self._connection is None or registration != self._registration:
            self.close()
            self._connection = PeerConnection(
                registration.host, registration.port, self._client_id, self._security
            )
            self._registration = registration
        return self._connection

    def refresh(self) -> None:
        """The live brokers changed: close the connection if this broker's registration is
        not the one it was made to (a request waiting on it fails now, not at its timeout)."""
        if self._connection is not None and (
            self._cache.brokers.get(self.broker_id) != self._registration
        ):
            self.close()

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def host_port(address: tuple[str, int]) -> str:
    return f"{address[0]}:{address[1]}"
