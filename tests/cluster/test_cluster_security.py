"""Security on a 3-broker cluster (one cluster for the module): SASL_PLAINTEXT for clients
and between brokers (PLAIN, the broker's own user ``admin``, a super user), ACLs and SCRAM
credentials in ZooKeeper. Replication with acks=all, a transaction whose markers go to the
other brokers over the authenticated inter-broker channel, an ACL created through one
broker enforced by another, a SCRAM user created through one broker logging in on
another, and a replica fetch refused without ClusterAction: each with its allowed and
denied case."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from oncelog.client.admin import Admin
from oncelog.client.connection import KafkaConnection, ProtocolClientError
from oncelog.client.security import ClientSecurity
from oncelog.cluster.peer import FETCH_VERSION, PeerConnection, PeerError
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from oncelog.testing.cluster import LocalCluster
from oncelog.testing.security import SecurityKit
from tests.broker.raw_requests import fetch_body, metadata

from .test_cluster_coordinators import create_once_every_broker_is_live
from .test_cluster_coordinators import read_values as read_all

LISTENER = "SASL_PLAINTEXT"
TIMEOUT_S = 60
PROPAGATION_S = 15  # how long a change made through one broker may take to reach another


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> SecurityKit:
    return SecurityKit(tmp_path_factory.mktemp("cluster-kit"))


@pytest.fixture(scope="module")
def cluster(kit: SecurityKit, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    config = kit.broker_config([LISTENER], mechanisms=["PLAIN", "SCRAM-SHA-512"], authorizer=True)
    config |= {
        "inter.broker.listener.name": LISTENER,
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "transaction.state.log.num.partitions": "3",
        "offsets.topic.num.partitions": "3",
    }
    admin = kit.client(LISTENER, "admin", "PLAIN")
    base = tmp_path_factory.mktemp("secured-cluster")
    with LocalCluster(base, brokers=3, config=config, security=admin) as c:
        yield c


def as_user(kit: SecurityKit, user: str, mechanism: str = "PLAIN") -> ClientSecurity:
    return kit.client(LISTENER, user, mechanism)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def admin_of(cluster: LocalCluster) -> ClientSecurity:
    """The cluster's administrator (a super user): the security the cluster was started with."""
    assert cluster.security is not None
    return cluster.security


def spread_topic(cluster: LocalCluster, min_isr: int = 2) -> str:
    """A topic of three partitions, each led by another broker, replication factor 3."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = unique("spread")
    admin = AdminClient(
        {"bootstrap.servers": cluster.bootstrap_servers, **admin_of(cluster).librdkafka()}
    )
    topic = NewTopic(
        name,
        3,
        replica_assignment=[[1, 2, 3], [2, 3, 1], [3, 1, 2]],
        config={"min.insync.replicas": str(min_isr)},
    )
    create_once_every_broker_is_live(admin, topic)
    for partition in range(3):
        cluster.wait_for_leader(name, partition)
    return name


def producer(cluster: LocalCluster, security: ClientSecurity, **extra: Any) -> Producer:
    return Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, **security.librdkafka(), **extra}
    )


def read_values(
    cluster: LocalCluster, security: ClientSecurity, topic: str, isolation: str
) -> list[bytes]:
    return read_all(cluster.bootstrap_servers, topic, isolation, security.librdkafka())


def eventually(check: Callable[[], bool], what: str, timeout_s: float = PROPAGATION_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def connect(cluster: LocalCluster, broker_id: int, security: ClientSecurity) -> KafkaConnection:
    return KafkaConnection(cluster.address(broker_id), security=security)


def metadata_error(
    cluster: LocalCluster, broker_id: int, user: str, kit: SecurityKit, topic: str
) -> ErrorCode:
    with connect(cluster, broker_id, as_user(kit, user)) as conn:
        return ErrorCode(metadata(conn, topic).error_code)


# -- replication and transactions over the authenticated inter-broker channel -----------------


def check_acks_all_with_three_in_sync_replicas(cluster: LocalCluster) -> None:
    """min.insync.replicas=3: every write waits for both followers, which fetch over the
    secured inter-broker listener as the broker's own principal."""
    topic = spread_topic(cluster, min_isr=3)
    admin = admin_of(cluster)
    sender = producer(cluster, admin, acks="all", **{"enable.idempotence": True})
    failures: list[KafkaError] = []
    for i in range(30):
        sender.produce(
            topic,
            value=b"%d" % i,
            partition=i % 3,
            on_delivery=lambda err, _msg: failures.append(err) if err else None,
        )
    assert sender.flush(TIMEOUT_S) == 0
    assert failures == []
    for partition in range(3):
        cluster.wait_for_isr(topic, partition, [1, 2, 3])
    values = read_values(cluster, admin, topic, "read_uncommitted")
    assert sorted(values, key=int) == [b"%d" % i for i in range(30)]


def check_a_transaction_across_three_leaders(cluster: LocalCluster) -> None:
    """Committed and aborted: the markers reach the leaders on the other brokers."""
    topic = spread_topic(cluster)
    admin = admin_of(cluster)
    for outcome in ("commit", "abort"):
        txn = producer(cluster, admin, **{"transactional.id": unique("txn")})
        txn.init_transactions(TIMEOUT_S)
        txn.begin_transaction()
        for partition in range(3):
            txn.produce(topic, value=outcome.encode(), partition=partition)
        assert txn.flush(TIMEOUT_S) == 0  # written before the end (abort drops what is queued)
        if outcome == "commit":
            txn.commit_transaction(TIMEOUT_S)
        else:
            txn.abort_transaction(TIMEOUT_S)
    assert read_values(cluster, admin, topic, "read_committed") == [b"commit"] * 3
    everything = read_values(cluster, admin, topic, "read_uncommitted")
    assert sorted(everything) == sorted([b"commit"] * 3 + [b"abort"] * 3)


def test_acks_all_with_three_replicas_replicates_over_sasl(cluster: LocalCluster) -> None:
    check_acks_all_with_three_in_sync_replicas(cluster)


def test_a_transaction_across_three_leaders_commits_and_aborts(cluster: LocalCluster) -> None:
    check_a_transaction_across_three_leaders(cluster)


def test_a_principal_without_write_on_a_transactional_id_cannot_use_it(
    cluster: LocalCluster, kit: SecurityKit
) -> None:
    """The denied side of the transaction test: bob holds no ACL."""
    txn = producer(cluster, as_user(kit, "bob"), **{"transactional.id": unique("txn")})
    with pytest.raises(KafkaException) as refused:
        txn.init_transactions(TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


# -- ACLs and SCRAM credentials in ZooKeeper ------------------------------------------------


def test_an_acl_created_through_broker_1_is_enforced_by_broker_2(
    cluster: LocalCluster, kit: SecurityKit
) -> None:
    topic = spread_topic(cluster)
    assert metadata_error(cluster, 2, "alice", kit, topic) == ErrorCode.topic_authorization_failed
    write = AclBinding(
        ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
        AccessControlEntry("User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW),
    )
    with connect(cluster, 1, admin_of(cluster)) as conn:
        Admin(conn).create_acls([write])
    eventually(
        lambda: metadata_error(cluster, 2, "alice", kit, topic) == ErrorCode.none,
        "broker 2 to allow alice what broker 1 was told",
    )
    # Kafka's layout: the literal resource's znode and a literal change notification.
    stored = json.loads(cluster.znode(f"/kafka-acl/Topic/{topic}") or b"{}")
    assert stored["acls"] == [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Write", "host": "*"}
    ]
    changes = [
        cluster.znode(f"/kafka-acl-changes/{n}")
        for n in cluster.znode_children("/kafka-acl-changes")
    ]
    assert f"Topic:{topic}".encode() in changes
    # Every leader (one per broker) takes alice's writes now; bob is still refused.
    sender = producer(cluster, as_user(kit, "alice"), acks="all")
    for partition in range(3):
        sender.produce(topic, value=b"alice", partition=partition)
    assert sender.flush(TIMEOUT_S) == 0
    denied: list[KafkaError] = []
    refused = producer(cluster, as_user(kit, "bob"), acks="all", **{"message.timeout.ms": 5000})
    refused.produce(topic, value=b"bob", on_delivery=lambda err, _m: denied.append(err))
    refused.flush(TIMEOUT_S)
    assert [e.code() for e in denied] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    # Removed through broker 3: broker 2 refuses alice again.
    with connect(cluster, 3, admin_of(cluster)) as conn:
        only_this = AclBindingFilter(
            ResourcePatternFilter(ResourceType.TOPIC, topic, PatternType.LITERAL),
            AccessControlEntryFilter(None, None, AclOperation.ANY, AclPermissionType.ANY),
        )
        assert Admin(conn).delete_acls([only_this]) == [write]
    eventually(
        lambda: (
            metadata_error(cluster, 2, "alice", kit, topic) == ErrorCode.topic_authorization_failed
        ),
        "broker 2 to refuse alice again",
    )
    assert cluster.znode(f"/kafka-acl/Topic/{topic}") is None


def test_a_scram_user_created_through_broker_2_logs_in_on_broker_3(
    cluster: LocalCluster, kit: SecurityKit
) -> None:
    user, password = unique("dave"), "dave-secret"
    dave = ClientSecurity.from_properties(
        {
            "security.protocol": LISTENER,
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": password,
        }
    )
    with pytest.raises(ProtocolClientError, match="authentication failed"):
        connect(cluster, 3, dave).close()
    with connect(cluster, 2, admin_of(cluster)) as conn:
        Admin(conn).upsert_scram_credentials({user: password}, ["SCRAM-SHA-512"])

    def logs_in() -> bool:
        try:
            connect(cluster, 3, dave).close()
        except ProtocolClientError:
            return False
        return True

    eventually(logs_in, "broker 3 to know the user created through broker 2")
    wrong = ClientSecurity.from_properties(
        {
            "security.protocol": LISTENER,
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": "not-the-password",
        }
    )
    with pytest.raises(ProtocolClientError, match="authentication failed"):
        connect(cluster, 3, wrong).close()
    stored = json.loads(cluster.znode(f"/config/users/{user}") or b"{}")
    assert set(stored["config"]) == {"SCRAM-SHA-512"}
    assert "iterations=" in stored["config"]["SCRAM-SHA-512"]


# -- replica fetch needs ClusterAction ------------------------------------------------------


def test_fetching_as_a_replica_needs_cluster_action(
    cluster: LocalCluster, kit: SecurityKit
) -> None:
    """A Fetch carrying a follower's replica id, from a principal without ClusterAction,
    reads nothing: Kafka's KafkaApis answers each partition TOPIC_AUTHORIZATION_FAILED
    (not CLUSTER_AUTHORIZATION_FAILED). The broker's own user (a super user) reads."""
    topic = spread_topic(cluster)
    producer_ = producer(cluster, admin_of(cluster), acks="all")
    producer_.produce(topic, value=b"replicated", partition=0)
    assert producer_.flush(TIMEOUT_S) == 0
    follower = 2  # partition 0 is led by broker 1, followed by 2 and 3
    body = fetch_body(topic) | {"replica_id": follower}
    for user, expected, records in (
        ("alice", ErrorCode.topic_authorization_failed, False),
        ("admin", ErrorCode.none, True),
    ):
        with connect(cluster, 1, as_user(kit, user)) as conn:
            answer = conn.request(ApiKey.FETCH, body, version=12)
        [partition] = [p for t in answer.responses for p in t.partitions]
        assert (ErrorCode(partition.error_code), bool(partition.records)) == (expected, records)


def test_the_inter_broker_connection_authenticates_or_gets_nothing(
    cluster: LocalCluster, kit: SecurityKit
) -> None:
    """The control for the replication and marker tests: a peer connection as the brokers
    make it (PeerConnection with the broker's user) fetches; without credentials, or with
    a wrong password, the listener answers nothing but the SASL exchange."""
    topic = spread_topic(cluster)
    assert replica_fetch_as(cluster, topic, admin_of(cluster)) == ErrorCode.none
    wrong = ClientSecurity(LISTENER, "PLAIN", "admin", "not-the-password")
    with pytest.raises(PeerError, match=r"authentication .* failed"):
        replica_fetch_as(cluster, topic, wrong)
    with pytest.raises(PeerError):  # PLAINTEXT to a SASL listener: closed unanswered
        replica_fetch_as(cluster, topic, ClientSecurity())


def replica_fetch_as(cluster: LocalCluster, topic: str, security: ClientSecurity) -> ErrorCode:
    """Partition 0 of ``topic`` fetched from broker 1 (its leader) as follower 2 would,
    through a PeerConnection with ``security``; PeerError if it cannot connect."""
    host, _, port = cluster.address(1).rpartition(":")
    body = fetch_body(topic) | {"replica_id": 2}

    async def fetch() -> ErrorCode:
        connection = PeerConnection(host, int(port), "test-peer", security)
        try:
            answer = await connection.request(ApiKey.FETCH, FETCH_VERSION, body, 10.0)
        finally:
            connection.close()
        [partition] = [p for t in answer.responses for p in t.partitions]
        return ErrorCode(partition.error_code)

    return asyncio.run(fetch())
