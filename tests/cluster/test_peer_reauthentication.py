"""KIP-368 on the inter-broker connection: a broker that limits sessions
(``connections.max.reauth.ms``) keeps a peer's connection open as long as the peer
authenticates again on it in time, which PeerConnection does on its own."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from oncelog.client.connection import KafkaConnection, ProtocolClientError
from oncelog.cluster.peer import PeerConnection
from oncelog.protocol.api_versions import ApiKey
from oncelog.testing import EmbeddedBroker
from oncelog.testing.security import SecurityKit

LIFETIME_MS = 1500
METADATA = {
    "topics": [],
    "allow_auto_topic_creation": False,
    "include_cluster_authorized_operations": False,
    "include_topic_authorized_operations": False,
}


@pytest.fixture(scope="module")
def broker(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[EmbeddedBroker, SecurityKit]]:
    kit = SecurityKit(tmp_path_factory.mktemp("reauth-kit"))
    config = kit.broker_config(["SASL_PLAINTEXT"], mechanisms=["SCRAM-SHA-512", "PLAIN"])
    config["connections.max.reauth.ms"] = str(LIFETIME_MS)
    with EmbeddedBroker(config=config) as b:
        yield b, kit


def test_a_peer_connection_authenticates_again_instead_of_being_closed(
    broker: tuple[EmbeddedBroker, SecurityKit],
) -> None:
    embedded, kit = broker
    host, _, port = embedded.bootstrap_servers.rpartition(":")
    security = kit.client("SASL_PLAINTEXT", "admin", "PLAIN")

    async def requests_over_three_lifetimes() -> int:
        connection = PeerConnection(host, int(port), "test-peer", security)
        try:
            deadline = time.monotonic() + 3 * LIFETIME_MS / 1000
            while time.monotonic() < deadline:
                answer = await connection.request(ApiKey.METADATA, 12, METADATA, 10.0)
                assert answer.brokers
                await asyncio.sleep(0.2)
            return connection.opened
        finally:
            connection.close()

    assert asyncio.run(requests_over_three_lifetimes()) == 1  # one connection throughout


def test_without_authenticating_again_the_session_ends(
    broker: tuple[EmbeddedBroker, SecurityKit],
) -> None:
    """The control: the same requests on a connection that never re-authenticates."""
    embedded, kit = broker
    security = kit.client("SASL_PLAINTEXT", "admin", "PLAIN")
    with KafkaConnection(embedded.bootstrap_servers, security=security) as conn:
        deadline = time.monotonic() + 3 * LIFETIME_MS / 1000
        with pytest.raises(ProtocolClientError):
            while time.monotonic() < deadline:
                conn.request(ApiKey.METADATA, METADATA, version=12)
                time.sleep(0.2)
