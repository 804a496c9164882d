"""`oncelog demo --security`: the demo's broker reached only through SASL_SSL, as a managed
Kafka service is.

- **Listener**: one SASL_SSL listener on 127.0.0.1 (no PLAINTEXT listener at all), TLS
  with a certificate authority and a server certificate made for this run in the work
  directory (:class:`~oncelog.testing.security.SecurityKit`), SCRAM-SHA-512 the only
  mechanism.
- **Users**: ``admin`` (a super user: it creates the ACLs) and ``oncelog-demo`` (every
  client of the pipeline), with passwords drawn for this run. Their SCRAM credentials are
  written into the broker's data directory before it starts, as Kafka bootstraps its
  first SCRAM users (``kafka-storage format --add-scram``, ``kafka-configs --zookeeper``):
  with SCRAM the only mechanism nobody could log in to create them.
- **ACLs** (Kafka's AclAuthorizer; nothing is allowed without an ACL): ``oncelog-demo``
  may create, write and read the demo's topics and the sink's progress topic (and describe
  the latter's configuration: the sink checks that it keeps its claims), write
  transactional ids starting with ``oncelog-`` (the generator's and the sink's), and
  read groups starting with ``oncelog-`` (the sink's progress group, the verifier's) and
  ``spark-kafka-`` (the source's executors). The admin creates them through CreateAcls.
- **Clients**: :meth:`DemoSecurity.client_properties` in Kafka's Java names, which the
  Spark job passes as ``kafka.security.protocol``, ``kafka.sasl.*``, ``kafka.ssl.*``
  options, as Spark's Kafka connector takes them; the generator, the supervisor's
  clients and the verifier get the same settings in librdkafka's names.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterable
from pathlib import Path

from oncelog.client.security import librdkafka_config
from oncelog.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from oncelog.security.jaas import SCRAM_LOGIN_MODULE
from oncelog.spark.options import DEFAULT_PROGRESS_TOPIC

PROTOCOL = "SASL_SSL"
MECHANISM = "SCRAM-SHA-512"
ADMIN = "admin"
DEMO_USER = "oncelog-demo"
PRINCIPAL = f"User:{DEMO_USER}"


class DemoSecurity:
    """The certificates, users, broker keys, ACLs and client settings of a secured demo
    run, all made in ``directory`` (the run's work directory)."""

    def __init__(self, directory: Path) -> None:
        try:
            from oncelog.testing.security import SecurityKit
        except ImportError:  # pragma: no cover - the spark extra installs cryptography
            raise RuntimeError(
                "--security makes its certificates with the cryptography package: "
                "pip install 'oncelog[spark]'"
            ) from None
        passwords = {user: secrets.token_urlsafe(18) for user in (ADMIN, DEMO_USER)}
        self.kit = SecurityKit(directory, users=passwords)

    def broker_config(self) -> dict[str, str]:
        """The broker's keys: one SASL_SSL listener, SCRAM-SHA-512, the ACL authorizer.
        The listener's JAAS entry names no user: a single broker connects to no other, and
        a password there would show in the broker process's command line."""
        config = self.kit.broker_config(
            (PROTOCOL,), mechanisms=(MECHANISM,), authorizer=True, super_users=(ADMIN,)
        )
        jaas = f"listener.name.{PROTOCOL.lower()}.{MECHANISM.lower()}.sasl.jaas.config"
        assert jaas in config
        return config | {jaas: f"{SCRAM_LOGIN_MODULE} required;"}

    def write_credentials(self, data_dir: Path) -> None:
        """The users' SCRAM credentials (salted; never the passwords) into the data
        directory of a broker that has not started yet."""
        from oncelog.broker.scram_store import FileScramStore
        from oncelog.security.scram import ScramMechanism, new_credential

        scram = ScramMechanism.by_name(MECHANISM)
        assert scram is not None
        data_dir.mkdir(parents=True, exist_ok=True)
        credentials = {
            user: {scram: new_credential(scram, password, secrets.token_bytes(32))}
            for user, password in self.kit.users.items()
        }
        asyncio.run(FileScramStore(data_dir).update(lambda _current: (credentials, None)))

    def grant(self, bootstrap: str, topics: Iterable[str]) -> list[AclBinding]:
        """Create, as the admin, the ACLs the demo's clients need; return them."""
        from oncelog.client.admin import Admin
        from oncelog.client.connection import KafkaConnection

        bindings = demo_acls([*topics, DEFAULT_PROGRESS_TOPIC], DEFAULT_PROGRESS_TOPIC)
        admin = self.kit.client(PROTOCOL, ADMIN, MECHANISM)
        with KafkaConnection(bootstrap, security=admin) as connection:
            Admin(connection).create_acls(bindings)
        return bindings

    def client_properties(self) -> dict[str, str]:
        """How the demo's user connects, in Kafka's Java client names (what a
        ``--command-config`` file or Spark's ``kafka.*`` options hold)."""
        password = self.kit.users[DEMO_USER]
        return {
            "security.protocol": PROTOCOL,
            "sasl.mechanism": MECHANISM,
            "sasl.jaas.config": (
                f'{SCRAM_LOGIN_MODULE} required username="{DEMO_USER}" password="{password}";'
            ),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.kit.authority.ca_file),
        }

    def librdkafka(self) -> dict[str, str]:
        """The same settings in librdkafka's names (confluent-kafka clients)."""
        return librdkafka_config(self.client_properties())

    def describe(self, acls: int) -> str:
        return (
            f"security: {PROTOCOL} only (no PLAINTEXT listener), TLS with a CA made for this "
            f"run ({self.kit.authority.ca_file}), {MECHANISM} as {PRINCIPAL}, "
            f"ACL authorizer ({acls} ACLs for {PRINCIPAL}; super user User:{ADMIN})"
        )


def demo_acls(topics: Iterable[str], progress_topic: str) -> list[AclBinding]:
    """What the demo's principal needs, and nothing more (module docstring)."""

    def allow(kind: ResourceType, name: str, pattern: PatternType, op: AclOperation) -> AclBinding:
        return AclBinding(
            ResourcePattern(kind, name, pattern),
            AccessControlEntry(PRINCIPAL, "*", op, AclPermissionType.ALLOW),
        )

    literal, prefixed = PatternType.LITERAL, PatternType.PREFIXED
    topic_ops = (AclOperation.CREATE, AclOperation.WRITE, AclOperation.READ)
    return [
        *(allow(ResourceType.TOPIC, t, literal, op) for t in topics for op in topic_ops),
        # the sink checks that its progress topic keeps its claims (spark/claims.py)
        allow(ResourceType.TOPIC, progress_topic, literal, AclOperation.DESCRIBE_CONFIGS),
        allow(ResourceType.TRANSACTIONAL_ID, "oncelog-", prefixed, AclOperation.WRITE),
        allow(ResourceType.GROUP, "oncelog-", prefixed, AclOperation.READ),
        allow(ResourceType.GROUP, "spark-kafka-", prefixed, AclOperation.READ),
    ]
