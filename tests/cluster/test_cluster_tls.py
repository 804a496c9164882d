"""A 3-broker cluster on mutual TLS only (one SSL listener, client certificates required,
ACLs): clients and brokers are known by their certificates. Replication and transaction
markers travel over the inter-broker TLS connections, each broker presenting its own
certificate, whose subject is a super user; a peer without a certificate gets nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from oncelog.client.security import ClientSecurity
from oncelog.cluster.peer import PeerError
from oncelog.protocol.errors import ErrorCode
from oncelog.testing.cluster import LocalCluster
from oncelog.testing.security import SecurityKit

from .test_cluster_security import (
    check_a_transaction_across_three_leaders,
    check_acks_all_with_three_in_sync_replicas,
    replica_fetch_as,
    spread_topic,
)


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> SecurityKit:
    return SecurityKit(tmp_path_factory.mktemp("tls-kit"))


@pytest.fixture(scope="module")
def cluster(kit: SecurityKit, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    config = kit.broker_config(["SSL"], client_auth="required", authorizer=True)
    # The brokers' certificate has no OU=clients: its principal is its whole subject.
    config["super.users"] = f"User:admin;User:{kit.server.subject}"
    config |= {
        "inter.broker.listener.name": "SSL",
        "transaction.state.log.num.partitions": "3",
        "offsets.topic.num.partitions": "3",
    }
    base = tmp_path_factory.mktemp("tls-cluster")
    with LocalCluster(base, brokers=3, config=config, security=kit.client("SSL", "admin")) as c:
        yield c


def test_acks_all_with_three_replicas_replicates_over_mutual_tls(cluster: LocalCluster) -> None:
    check_acks_all_with_three_in_sync_replicas(cluster)


def test_a_transaction_across_three_leaders_commits_over_mutual_tls(cluster: LocalCluster) -> None:
    check_a_transaction_across_three_leaders(cluster)


def test_a_peer_without_the_brokers_certificate_gets_nothing(
    cluster: LocalCluster, kit: SecurityKit
) -> None:
    """The control: the broker's key store as client certificate fetches as a replica; a
    user's certificate is refused the replica fetch (no ClusterAction), and no certificate
    at all fails the TLS handshake."""
    topic = spread_topic(cluster)
    ca = str(kit.authority.ca_file)
    as_broker = ClientSecurity("SSL", ca_file=ca, certificate_file=str(kit.server.key_store))
    assert replica_fetch_as(cluster, topic, as_broker) == ErrorCode.none
    alice = kit.client("SSL", "alice")
    assert replica_fetch_as(cluster, topic, alice) == ErrorCode.topic_authorization_failed
    with pytest.raises(PeerError):
        replica_fetch_as(cluster, topic, ClientSecurity("SSL", ca_file=ca))
