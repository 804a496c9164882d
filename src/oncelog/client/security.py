"""How a client reaches a secured broker, from the properties Kafka's clients take.

One description (:class:`ClientSecurity`) read from either family of names, so a user can
keep the file they already have:

- Kafka's Java clients (and Spark's ``kafka.*`` options without the prefix):
  ``security.protocol``, ``sasl.mechanism``, ``sasl.jaas.config`` (username and password of
  a PlainLoginModule or ScramLoginModule), ``ssl.truststore.location`` /
  ``ssl.truststore.certificates`` and ``ssl.keystore.location`` (PEM; ``ssl.*.type`` must
  then be PEM), ``ssl.key.password``, ``ssl.endpoint.identification.algorithm``;
- librdkafka's (confluent-kafka): ``sasl.username``, ``sasl.password``,
  ``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``,
  ``enable.ssl.certificate.verification``.

It then gives what each consumer of it needs: an ``ssl.SSLContext`` and the SASL exchange
for oncelog's own connections (:mod:`oncelog.client.connection`, inter-broker traffic),
librdkafka's names for confluent-kafka (the command line's producer and consumer, the
Spark connector), and the keyword arguments of kafka-python's and aiokafka's clients.
"""

from __future__ import annotations

import secrets
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from oncelog.security.jaas import JaasConfigError, parse_jaas_config
from oncelog.security.plain import plain_token
from oncelog.security.scram import ScramClient, ScramMechanism

__all__ = [
    "PROTOCOLS",
    "SECURITY_KEYS",
    "ClientSecurity",
    "ClientSecurityError",
    "SaslClientExchange",
    "librdkafka_config",
]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# Every key ClientSecurity.from_properties reads, in Kafka's Java names and librdkafka's.
SECURITY_KEYS = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.username",
        "sasl.password",
        "sasl.jaas.config",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.certificates",
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.ca.location",
        "ssl.ca.pem",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
        "enable.ssl.certificate.verification",
    }
)


class ClientSecurityError(ValueError):
    """The client properties are incomplete or contradictory; the message names the key."""


class SaslClientExchange(Protocol):
    """The client's side of one SASL exchange."""

    def first(self) -> bytes:
        """The first token."""

    def next(self, server_token: bytes) -> bytes | None:
        """Answer the server's token; None when the exchange is complete (and the server
        proved itself, for SCRAM). Raises AuthenticationFailed."""


class _PlainExchange:
    def __init__(self, username: str, password: str) -> None:
        self._token = plain_token(username, password)

    def first(self) -> bytes:
        return self._token

    def next(self, server_token: bytes) -> bytes | None:
        return None


class _ScramExchange:
    def __init__(self, mechanism: ScramMechanism, username: str, password: str) -> None:
        self._client = ScramClient(mechanism, username, password, secrets.token_urlsafe(24))
        self._answered_first = False

    def first(self) -> bytes:
        return self._client.first_message()

    def next(self, server_token: bytes) -> bytes | None:
        if not self._answered_first:
            self._answered_first = True
            return self._client.final_message(server_token)
        self._client.verify_server_final(server_token)
        return None


@dataclass(frozen=True)
class ClientSecurity:
    """How a client reaches a listener: the security protocol, the SASL mechanism and
    credentials, and the TLS trust and client certificate (read from Kafka's or
    librdkafka's client properties)."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    ca_file: str | None = None
    ca_pem: str | None = None
    certificate_file: str | None = None  # may also hold the key (a PEM key store)
    key_file: str | None = None
    key_password: str | None = None
    check_hostname: bool = True
    verify_certificates: bool = True

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ClientSecurity:
        """Read Kafka's or librdkafka's client keys; unrelated keys are ignored."""
        protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
        if protocol not in PROTOCOLS:
            raise ClientSecurityError(
                f"security.protocol={protocol!r}: expected one of {', '.join(PROTOCOLS)}"
            )
        mechanism = props.get("sasl.mechanism", props.get("sasl.mechanisms"))
        username, password = props.get("sasl.username"), props.get("sasl.password")
        if "sasl.jaas.config" in props:
            try:
                options = parse_jaas_config(props["sasl.jaas.config"]).options
            except JaasConfigError as exc:
                raise ClientSecurityError(f"sasl.jaas.config: {exc}") from None
            username = options.get("username", username)
            password = options.get("password", password)
        if protocol.startswith("SASL_"):
            mechanism = (mechanism or "GSSAPI").strip().upper()
            if mechanism not in _MECHANISMS:
                raise ClientSecurityError(
                    f"sasl.mechanism={mechanism}: oncelog's clients speak {', '.join(_MECHANISMS)}"
                )
            if not username or password is None:
                raise ClientSecurityError(
                    f"{protocol} with {mechanism} needs a username and password "
                    "(sasl.username and sasl.password, or sasl.jaas.config)"
                )
        for store in ("ssl.truststore.type", "ssl.keystore.type"):
            if store in props and props[store].upper() != "PEM":
                raise ClientSecurityError(f"{store}={props[store]}: only PEM stores are read")
        identification = props.get("ssl.endpoint.identification.algorithm", "https")
        return cls(
            protocol=protocol,
            mechanism=mechanism if protocol.startswith("SASL_") else None,
            username=username,
            password=password,
            ca_file=props.get("ssl.ca.location", props.get("ssl.truststore.location")),
            ca_pem=props.get("ssl.truststore.certificates", props.get("ssl.ca.pem")),
            certificate_file=props.get(
                "ssl.certificate.location", props.get("ssl.keystore.location")
            ),
            key_file=props.get("ssl.key.location"),
            key_password=props.get("ssl.key.password"),
            check_hostname=identification.strip().lower() == "https",
            verify_certificates=props.get("enable.ssl.certificate.verification", "true").lower()
            != "false",
        )

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context of a connection (None for PLAINTEXT and SASL_PLAINTEXT)."""
        if not self.uses_tls:
            return None
        context = ssl.create_default_context(cafile=self.ca_file, cadata=self.ca_pem)
        context.check_hostname = self.check_hostname and self.verify_certificates
        if not self.verify_certificates:
            context.verify_mode = ssl.CERT_NONE
        if self.certificate_file:
            context.load_cert_chain(
                self.certificate_file, self.key_file, password=self.key_password
            )
        return context

    def sasl_exchange(self) -> SaslClientExchange | None:
        if not self.uses_sasl:
            return None
        assert self.mechanism and self.username is not None and self.password is not None
        scram = ScramMechanism.by_name(self.mechanism)
        if scram is None:
            return _PlainExchange(self.username, self.password)
        return _ScramExchange(scram, self.username, self.password)

    def librdkafka(self) -> dict[str, str]:
        """The same settings in librdkafka's names, for confluent-kafka clients."""
        settings = {"security.protocol": self.protocol}
        if self.uses_sasl:
            assert self.mechanism and self.username is not None and self.password is not None
            settings |= {
                "sasl.mechanism": self.mechanism,
                "sasl.username": self.username,
                "sasl.password": self.password,
            }
        if self.uses_tls:
            optional = {
                "ssl.ca.location": self.ca_file,
                "ssl.ca.pem": self.ca_pem,
                "ssl.certificate.location": self.certificate_file,
                "ssl.key.location": self.key_file or self.certificate_file,
                "ssl.key.password": self.key_password,
            }
            settings |= {k: v for k, v in optional.items() if v is not None}
            if not self.certificate_file:
                settings.pop("ssl.key.location", None)
            settings["ssl.endpoint.identification.algorithm"] = (
                "https" if self.check_hostname else "none"
            )
            if not self.verify_certificates:
                settings["enable.ssl.certificate.verification"] = "false"
        return settings

    def kafka_python(self) -> dict[str, Any]:
        """Keyword arguments for kafka-python's KafkaProducer, KafkaConsumer, KafkaAdminClient."""
        settings: dict[str, Any] = {"security_protocol": self.protocol}
        if self.uses_sasl:
            settings |= {
                "sasl_mechanism": self.mechanism,
                "sasl_plain_username": self.username,
                "sasl_plain_password": self.password,
            }
        if self.uses_tls:
            settings["ssl_context"] = self.ssl_context()
        return settings

    def aiokafka(self) -> dict[str, Any]:
        """Keyword arguments for aiokafka's AIOKafkaProducer and AIOKafkaConsumer."""
        return self.kafka_python()  # aiokafka takes the same names


def librdkafka_config(props: Mapping[str, str]) -> dict[str, str]:
    """``props`` for a confluent-kafka client: the security keys, in Kafka's Java names
    (``sasl.jaas.config``, ``ssl.truststore.location``, as Spark's Kafka connector takes
    them after ``kafka.``) or librdkafka's, rewritten in librdkafka's names; every other
    key unchanged. ClientSecurityError names a key that is wrong or missing."""
    if not SECURITY_KEYS & props.keys():
        return dict(props)
    others = {k: v for k, v in props.items() if k not in SECURITY_KEYS}
    return others | ClientSecurity.from_properties(props).librdkafka()
