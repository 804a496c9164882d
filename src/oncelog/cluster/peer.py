"""A connection from one broker to another, for the follower's Fetch and
OffsetsForLeaderEpoch: one request at a time, asyncio streams, the project's codec.

Versions are fixed rather than negotiated: both ends are oncelog brokers of one build.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from oncelog.protocol import codec
from oncelog.protocol.api_versions import ApiKey

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
CONNECT_TIMEOUT_S = 5.0


class PeerError(Exception):
    """The other broker could not be reached, or the connection broke."""


class PeerConnection:
    """A connection to another broker, one request at a time, at fixed versions (both ends
    are oncelog brokers of one build)."""

    def __init__(self, host: str, port: int, client_id: str) -> None:
        self.address = (host, port)
        self._client_id = client_id
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation_id = 0

    async def request(
        self, api_key: ApiKey, version: int, body: dict[str, Any], timeout_s: float
    ) -> Any:
        """Send one request and return the decoded response; PeerError on any failure
        (the connection is then closed, the next request opens a new one)."""
        api = codec.api_codec(api_key, version)
        self._correlation_id += 1
        frame = codec.encode_request(api, self._correlation_id, self._client_id, body)
        try:
            async with asyncio.timeout(timeout_s):
                reader, writer = await self._connected()
                writer.write(frame)
                await writer.drain()
                size = int.from_bytes(await reader.readexactly(4), "big")
                payload = await reader.readexactly(size)
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            self.close()
            raise PeerError(
                f"{api_key.name} to {self.address[0]}:{self.address[1]}: {exc!r}"
            ) from exc
        correlation_id, response = codec.decode_response(api, payload)
        if correlation_id != self._correlation_id:
            self.close()
            raise PeerError(f"correlation id {correlation_id}, expected {self._correlation_id}")
        return response

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def _connected(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._reader is None or self._writer is None:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(*self.address, limit=1 << 20), CONNECT_TIMEOUT_S
            )
            self._reader, self._writer = reader, writer
            return reader, writer
        return self._reader, self._writer


class PeerLink:
    """The connection to one broker as it is registered now (from the metadata cache):
    opened on first use, replaced when the broker registers again (a restart, maybe at
    another address), kept while its registration stays the same."""

    def __init__(self, cache: MetadataCache, broker_id: int, client_id: str) -> None:
        self._cache = cache
        self.broker_id = broker_id
        self._client_id = client_id
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
                registration.host, registration.port, client_id=self._client_id
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
