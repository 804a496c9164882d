"""PeerLink: a broker's connection to a peer follows the peer's registration, and only its."""

from __future__ import annotations

from oncelog.cluster.metadata import MetadataCache
from oncelog.cluster.peer import PeerLink
from oncelog.cluster.zookeeper import BrokerRegistration


def registered(cache: MetadataCache, broker_id: int, port: int, epoch: int) -> None:
    cache.brokers = {
        **cache.brokers,
        broker_id: BrokerRegistration(broker_id, "127.0.0.1", port, epoch),
    }


def test_the_connection_is_kept_while_the_peer_stays_registered_the_same() -> None:
    cache = MetadataCache()
    registered(cache, 2, 9001, epoch=10)
    link = PeerLink(cache, 2, "test")
    first = link.connection()
    assert first is not None and first.address == ("127.0.0.1", 9001)
    registered(cache, 3, 9002, epoch=11)  # another broker joins
    link.refresh()
    assert link.connection() is first


def test_a_new_registration_gets_a_new_connection() -> None:
    cache = MetadataCache()
    registered(cache, 2, 9001, epoch=10)
    link = PeerLink(cache, 2, "test")
    first = link.connection()
    registered(cache, 2, 9001, epoch=12)  # restarted at the same address
    second = link.connection()
    assert second is not None and second is not first
    registered(cache, 2, 9005, epoch=13)  # restarted elsewhere
    third = link.connection()
    assert third is not None and third.address == ("127.0.0.1", 9005)


def test_an_unregistered_peer_has_no_connection() -> None:
    cache = MetadataCache()
    registered(cache, 2, 9001, epoch=10)
    link = PeerLink(cache, 2, "test")
    assert link.connection() is not None
    cache.brokers = {}
    link.refresh()
    assert link.connection() is None
