"""Secured brokers shared by the security tests: ``secure_broker`` has SASL_SSL,
SASL_PLAINTEXT and SSL listeners (mutual TLS required), PLAIN users from the JAAS
configuration and the same users' SCRAM credentials created through the broker, and no
authorizer; ``acl_broker`` enforces ACLs."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncelog.testing import EmbeddedBroker
from oncelog.testing.security import SecurityKit


@pytest.fixture(scope="session")
def kit(tmp_path_factory: pytest.TempPathFactory) -> SecurityKit:
    return SecurityKit(tmp_path_factory.mktemp("security-kit"))


@pytest.fixture(scope="session")
def secure_broker(
    kit: SecurityKit, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EmbeddedBroker]:
    data_dir = Path(tmp_path_factory.mktemp("secure-broker"))
    with EmbeddedBroker(config=kit.broker_config(), data_dir=data_dir) as broker:
        kit.create_scram_users(
            broker.bootstrap_servers_for("SASL_PLAINTEXT"),
            kit.client("SASL_PLAINTEXT", "admin", "PLAIN"),
        )
        yield broker


@pytest.fixture(scope="session")
def acl_broker(
    kit: SecurityKit, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EmbeddedBroker]:
    """ACLs enforced (``User:admin`` a super user) on one SASL_PLAINTEXT listener with PLAIN."""
    config = kit.broker_config(["SASL_PLAINTEXT"], mechanisms=["PLAIN"], authorizer=True)
    data_dir = Path(tmp_path_factory.mktemp("acl-broker"))
    with EmbeddedBroker(config=config, data_dir=data_dir) as broker:
        yield broker


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    return f"{request.node.name[:40].strip('[]').replace('[', '-')}-{uuid.uuid4().hex[:8]}"
