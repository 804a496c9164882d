"""Kafka's ZooKeeper formats for ACLs, SCRAM credentials and broker endpoints (pure)."""

from __future__ import annotations

import json

import pytest

from oncelog.cluster.security_znodes import (
    acl_change,
    acl_resource_path,
    decode_acl_change,
    decode_acls,
    encode_acls,
    scram_credentials,
    with_scram_credentials,
)
from oncelog.cluster.zookeeper import BrokerRegistration, decode_broker, encode_broker
from oncelog.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from oncelog.security.scram import ScramCredential, ScramMechanism

LITERAL = ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL)
PREFIXED = ResourcePattern(ResourceType.TRANSACTIONAL_ID, "etl-", PatternType.PREFIXED)
WRITE = AccessControlEntry("User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW)


def test_acls_are_stored_where_and_as_kafka_stores_them() -> None:
    assert acl_resource_path(LITERAL) == "/kafka-acl/Topic/orders"
    assert acl_resource_path(PREFIXED) == "/kafka-acl-extended/prefixed/TransactionalId/etl-"
    stored = json.loads(encode_acls([WRITE]))
    assert stored == {
        "version": 1,
        "acls": [
            {
                "principal": "User:alice",
                "permissionType": "Allow",
                "operation": "Write",
                "host": "*",
            }
        ],
    }
    assert decode_acls(encode_acls([WRITE])) == {WRITE}


def test_acl_change_notifications_in_both_of_kafkas_formats() -> None:
    path, data = acl_change(LITERAL)
    assert (path, data) == ("/kafka-acl-changes/acl_changes_", b"Topic:orders")
    assert decode_acl_change(data, extended=False) == LITERAL
    path, data = acl_change(PREFIXED)
    assert path == "/kafka-acl-extended-changes/acl_changes_"
    assert json.loads(data) == {
        "version": 1,
        "resourceType": "TransactionalId",
        "name": "etl-",
        "patternType": "PREFIXED",
    }
    assert decode_acl_change(data, extended=True) == PREFIXED
    with pytest.raises(ValueError):
        decode_acl_change(b"no-separator", extended=False)


def test_scram_credentials_share_the_users_config_with_other_keys() -> None:
    credential = ScramCredential.from_salted_password(
        ScramMechanism.SCRAM_SHA_512, b"salt", b"s" * 64, 4096
    )
    configs = with_scram_credentials(
        {"producer_byte_rate": "1024", "SCRAM-SHA-256": "old"},
        {ScramMechanism.SCRAM_SHA_512: credential},
    )
    assert configs == {"producer_byte_rate": "1024", "SCRAM-SHA-512": credential.to_text()}
    assert scram_credentials(configs) == {ScramMechanism.SCRAM_SHA_512: credential}
    assert with_scram_credentials(configs, {}) == {"producer_byte_rate": "1024"}


def test_a_registration_carries_every_listener_and_peers_use_the_inter_broker_one() -> None:
    registration = BrokerRegistration(
        1,
        "10.0.0.1",
        9093,
        endpoints=(
            ("CLIENTS", "SASL_SSL", "broker1.example", 9092),
            ("INTERNAL", "SASL_PLAINTEXT", "10.0.0.1", 9093),
        ),
    )
    stored = json.loads(encode_broker(registration, 0))
    assert stored["endpoints"] == ["CLIENTS://broker1.example:9092", "INTERNAL://10.0.0.1:9093"]
    assert stored["listener_security_protocol_map"] == {
        "CLIENTS": "SASL_SSL",
        "INTERNAL": "SASL_PLAINTEXT",
    }
    decoded = decode_broker(1, encode_broker(registration, 0), 7)
    assert decoded == BrokerRegistration(1, "10.0.0.1", 9093, 7, registration.endpoints)
    assert decoded.address_for("CLIENTS") == ("broker1.example", 9092)
    assert decoded.address_for("UNKNOWN") == ("10.0.0.1", 9093)
