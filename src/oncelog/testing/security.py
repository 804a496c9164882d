"""Certificates and users for secured brokers in tests and demos.

    kit = SecurityKit(tmp_path)                        # a CA, a server certificate
    with EmbeddedBroker(config=kit.broker_config()) as broker:
        kit.create_scram_users(broker.bootstrap_servers_for("SASL_PLAINTEXT"))
        producer = confluent_kafka.Producer({
            "bootstrap.servers": broker.bootstrap_servers_for("SASL_SSL"),
            **kit.client("SASL_SSL", "alice", "SCRAM-SHA-512").librdkafka(),
        })

:class:`CertificateAuthority` issues short-lived PEM certificates (EC P-256) with the
``cryptography`` package, which the ``test`` extra installs; nothing here is imported by
the broker. The users and their passwords are fixed and public: never use them outside
tests.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from oncelog.client.security import ClientSecurity
from oncelog.security.jaas import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE

if TYPE_CHECKING:
    from cryptography.x509 import GeneralName

__all__ = ["CertificateAuthority", "IssuedCertificate", "SecurityKit"]

ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
# name -> password: PLAIN users (JAAS) and, once created, SCRAM users alike
DEFAULT_USERS = {
    "admin": "admin-secret",
    "alice": "alice-secret",
    "bob": "bob-secret",
    "carol": "carol-secret",
    "dave": "dave-secret",
}


@dataclass(frozen=True)
class IssuedCertificate:
    """A certificate the test authority issued, with its key, as PEM files."""

    certificate: Path  # the certificate (PEM)
    key: Path  # its private key (PEM, unencrypted)
    key_store: Path  # key then certificate, one PEM file: Kafka's ssl.keystore.location
    subject: str  # as Java writes it (RFC 2253): what ACLs name with the DEFAULT mapping


class CertificateAuthority:
    """A throwaway certificate authority writing PEM files into ``directory``."""

    def __init__(self, directory: Path, name: str = "oncelog test CA") -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self._certificate = (
            x509.CertificateBuilder()
            .subject_name(self._name)
            .issuer_name(self._name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.ca_file = self._write("ca.pem", _pem_certificate(self._certificate))

    def issue(
        self,
        file_name: str,
        common_name: str,
        *,
        organizational_unit: str | None = None,
        hosts: Iterable[str] = (),
        valid_from: datetime.datetime | None = None,
        valid_until: datetime.datetime | None = None,
    ) -> IssuedCertificate:
        """A certificate for ``common_name`` (with the host names and addresses ``hosts``
        as subject alternative names), valid for a day unless told otherwise."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        from oncelog.security.x500 import subject_from_der

        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "oncelog tests")]
        if organizational_unit:
            attributes.append(
                x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, organizational_unit)
            )
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attributes))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(valid_from or now - datetime.timedelta(minutes=5))
            .not_valid_after(valid_until or now + datetime.timedelta(days=1))
        )
        names = [_general_name(host) for host in hosts]
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        certificate = builder.sign(self._key, hashes.SHA256())
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
        certificate_pem = _pem_certificate(certificate)
        return IssuedCertificate(
            certificate=self._write(f"{file_name}.crt.pem", certificate_pem),
            key=self._write(f"{file_name}.key.pem", key_pem),
            key_store=self._write(f"{file_name}.keystore.pem", key_pem + certificate_pem),
            subject=subject_from_der(certificate.public_bytes(serialization.Encoding.DER)),
        )

    def _write(self, name: str, text: str) -> Path:
        path = self.directory / name
        path.write_text(text)
        path.chmod(0o600)
        return path


def _pem_certificate(certificate: object) -> str:
    from cryptography.hazmat.primitives import serialization

    return certificate.public_bytes(serialization.Encoding.PEM).decode()  # type: ignore[attr-defined]


def _general_name(host: str) -> GeneralName:
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


class SecurityKit:
    """A CA, the broker's certificate, fixed users, and the configurations that use them."""

    def __init__(self, directory: Path, users: Mapping[str, str] = DEFAULT_USERS) -> None:
        self.authority = CertificateAuthority(Path(directory) / "tls")
        self.users = dict(users)
        self.server = self.authority.issue("broker", "localhost", hosts=("localhost", "127.0.0.1"))
        self._client_certificates: dict[str, IssuedCertificate] = {}

    def client_certificate(self, user: str) -> IssuedCertificate:
        """The certificate of ``user`` (CN=<user>, OU=clients): one per user."""
        if user not in self._client_certificates:
            self._client_certificates[user] = self.authority.issue(
                f"client-{user}", user, organizational_unit="clients"
            )
        return self._client_certificates[user]

    def broker_config(
        self,
        listeners: Iterable[str] = ("SASL_SSL", "SASL_PLAINTEXT", "SSL"),
        *,
        mechanisms: Iterable[str] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
        client_auth: str = "required",
        authorizer: bool = False,
        super_users: Iterable[str] = ("admin",),
        inter_broker_user: str = "admin",
    ) -> dict[str, str]:
        """Broker keys: each listener on 127.0.0.1 with a free port, TLS with the kit's
        server certificate, SASL with ``mechanisms`` (PLAIN's users and the broker's own
        credentials in each mechanism's JAAS entry), client certificates ``client_auth`` on
        SSL listeners (whose principal is then the CN, by a mapping rule), and, with
        ``authorizer``, ACLs enforced with ``super_users`` allowed everything."""
        names = [name.upper() for name in listeners]
        mechanisms = list(mechanisms)
        config = {
            "listeners": ",".join(f"{name}://127.0.0.1:0" for name in names),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.server.key_store),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.authority.ca_file),
            "ssl.endpoint.identification.algorithm": "https",
            "sasl.enabled.mechanisms": ",".join(mechanisms),
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),OU=clients,.*$/$1/,DEFAULT",
        }
        password = self.users[inter_broker_user]
        for name in names:
            if name == "SSL":
                config[f"listener.name.{name.lower()}.ssl.client.auth"] = client_auth
            for mechanism in mechanisms:
                module = PLAIN_LOGIN_MODULE if mechanism == "PLAIN" else SCRAM_LOGIN_MODULE
                options = f'username="{inter_broker_user}" password="{password}"'
                if mechanism == "PLAIN":
                    options += "".join(f' user_{u}="{p}"' for u, p in self.users.items())
                key = f"listener.name.{name.lower()}.{mechanism.lower()}.sasl.jaas.config"
                config[key] = f"{module} required {options};"
        if authorizer:
            config["authorizer.class.name"] = ACL_AUTHORIZER
            config["super.users"] = ";".join(f"User:{u}" for u in super_users)
        return config

    def client(
        self, protocol: str, user: str | None = None, mechanism: str | None = None
    ) -> ClientSecurity:
        """How ``user`` connects over ``protocol``: SASL with ``mechanism`` and the user's
        password, or (SSL) with the user's client certificate; PLAINTEXT: nothing."""
        protocol = protocol.upper()
        props: dict[str, str] = {"security.protocol": protocol}
        if protocol in ("SSL", "SASL_SSL"):
            props["ssl.ca.location"] = str(self.authority.ca_file)
        if protocol == "SSL" and user is not None:
            issued = self.client_certificate(user)
            props["ssl.certificate.location"] = str(issued.certificate)
            props["ssl.key.location"] = str(issued.key)
        if protocol.startswith("SASL_"):
            assert user is not None and mechanism is not None, "SASL needs a user and mechanism"
            props |= {
                "sasl.mechanism": mechanism,
                "sasl.username": user,
                "sasl.password": self.users[user],
            }
        return ClientSecurity.from_properties(props)

    def create_scram_users(
        self,
        bootstrap: str,
        admin: ClientSecurity | None = None,
        mechanisms: Iterable[str] = ("SCRAM-SHA-256", "SCRAM-SHA-512"),
    ) -> None:
        """Give every kit user SCRAM credentials (their kit password), through the broker's
        AlterUserScramCredentials, connected as ``admin`` (default: PLAINTEXT)."""
        from oncelog.client.admin import Admin
        from oncelog.client.connection import KafkaConnection

        with KafkaConnection(bootstrap, security=admin) as connection:
            Admin(connection).upsert_scram_credentials(self.users, list(mechanisms))
