"""Kafka's listener keys: parsing and the rules between them."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncelog.broker.broker import Broker
from oncelog.broker.config import BrokerConfig, ConfigError
from oncelog.broker.listeners import Endpoint, ListenerPlan, SecurityProtocol, plan_listeners

P = SecurityProtocol


def plan(
    listeners: str,
    advertised: str | None = None,
    protocol_map: str | None = None,
    inter_name: str | None = None,
    inter_protocol: str | None = None,
) -> ListenerPlan:
    def split(text: str | None) -> list[str] | None:
        return None if text is None else [part for part in text.split(",") if part]

    return plan_listeners(
        split(listeners) or [], split(advertised), split(protocol_map), inter_name, inter_protocol
    )


def test_several_listeners_with_the_default_protocol_map() -> None:
    result = plan("PLAINTEXT://127.0.0.1:9092,SASL_SSL://:9093,ssl://[::1]:0")
    assert result.listeners == (
        Endpoint("PLAINTEXT", P.PLAINTEXT, "127.0.0.1", 9092),
        Endpoint("SASL_SSL", P.SASL_SSL, "", 9093),
        Endpoint("SSL", P.SSL, "::1", 0),
    )
    assert result.advertised == result.listeners
    assert result.inter_broker_listener == "PLAINTEXT"
    assert str(result.listeners[2]) == "SSL://[::1]:0"


def test_custom_names_need_the_protocol_map() -> None:
    mapping = "INTERNAL:SASL_PLAINTEXT,EXTERNAL:SASL_SSL"
    result = plan("INTERNAL://127.0.0.1:1,EXTERNAL://127.0.0.1:2", None, mapping, "internal")
    assert [e.protocol for e in result.listeners] == [P.SASL_PLAINTEXT, P.SASL_SSL]
    assert result.inter_broker_listener == "INTERNAL"
    with pytest.raises(ConfigError, match="No security protocol defined for listener INTERNAL"):
        plan("INTERNAL://127.0.0.1:1")


def test_advertised_listeners_are_a_subset() -> None:
    result = plan("PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", "SSL://broker.example:9093")
    assert result.advertised_for("SSL") == Endpoint("SSL", P.SSL, "broker.example", 9093)
    assert result.advertised_for("PLAINTEXT") is None
    with pytest.raises(ConfigError, match="subset of listeners"):
        plan("PLAINTEXT://127.0.0.1:0", "SSL://h:1")


def test_inter_broker_listener_rules() -> None:
    assert plan("SSL://127.0.0.1:1", inter_protocol="SSL").inter_broker_listener == "SSL"
    assert plan("SASL_SSL://127.0.0.1:1").inter_broker_listener == "SASL_SSL"
    with pytest.raises(ConfigError, match="Only one of"):
        plan("SSL://127.0.0.1:1", inter_name="SSL", inter_protocol="SSL")
    with pytest.raises(ConfigError, match=r"advertised\.listeners"):
        plan("SSL://127.0.0.1:1,PLAINTEXT://127.0.0.1:2", "SSL://h:1", inter_name="PLAINTEXT")


@pytest.mark.parametrize(
    ("listeners", "message"),
    [
        ("127.0.0.1:9092", "NAME://host:port"),
        ("PLAINTEXT://127.0.0.1", "NAME://host:port"),
        ("PLAINTEXT://127.0.0.1:70000", "0..65535"),
        ("PLAINTEXT://127.0.0.1:1,PLAINTEXT://127.0.0.1:2", "different name"),
        ("PLAINTEXT://127.0.0.1:1,SSL://127.0.0.1:1", "different port"),
        ("", "at least one"),
    ],
)
def test_bad_listeners_are_refused(listeners: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        plan(listeners)


def test_bad_protocol_map_is_refused() -> None:
    with pytest.raises(ConfigError, match="not a security protocol"):
        plan("A://127.0.0.1:1", protocol_map="A:TLS")
    with pytest.raises(ConfigError, match="mapped twice"):
        plan("A://127.0.0.1:1", protocol_map="A:SSL,a:SSL")


SASL_CLUSTER = {
    "zookeeper.connect": "127.0.0.1:1",
    "broker.id": "1",
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "inter.broker.listener.name": "SASL_PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN",
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
}
PLAIN_ENTRY = "org.apache.kafka.common.security.plain.PlainLoginModule required"


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        (  # Kafka's default mechanism, GSSAPI, is not offered
            {"listener.name.sasl_plaintext.plain.sasl.jaas.config": f'{PLAIN_ENTRY} user_a="x";'},
            "sasl.mechanism.inter.broker.protocol",
        ),
        (  # the broker has no credentials of its own
            {
                "sasl.mechanism.inter.broker.protocol": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": f'{PLAIN_ENTRY} user_a="x";',
            },
            "listener.name.sasl_plaintext.plain.sasl.jaas.config",
        ),
    ],
)
def test_a_cluster_broker_needs_its_inter_broker_credentials(
    settings: dict[str, str], key: str, tmp_path: Path
) -> None:
    """How the broker authenticates to its peers is checked before anything starts."""
    with pytest.raises(ConfigError) as refused:
        Broker(BrokerConfig.load(None, SASL_CLUSTER | settings), tmp_path / "cluster")
    assert refused.value.key == key


def test_a_cluster_broker_connects_to_peers_as_its_inter_broker_user(tmp_path: Path) -> None:
    entry = f'{PLAIN_ENTRY} username="broker" password="b-s" user_broker="b-s";'
    settings = {
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": entry,
    }
    broker = Broker(BrokerConfig.load(None, SASL_CLUSTER | settings), tmp_path / "cluster")
    assert broker.cluster is not None
    peers = broker.cluster.peer_security
    assert (peers.protocol, peers.mechanism, peers.username, peers.password) == (
        "SASL_PLAINTEXT",
        "PLAIN",
        "broker",
        "b-s",
    )
