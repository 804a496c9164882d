"""What each listener asks of its connections, read from Kafka's ``ssl.*`` and ``sasl.*``
keys (each also settable per listener: ``listener.name.<listener>.<key>``).

- TLS (SSL and SASL_SSL listeners) with the standard library's ``ssl``: the broker's key
  and certificate chain from a PEM key store (``ssl.keystore.type=PEM``, a file or inline
  PEM), trusted authorities from a PEM trust store, ``ssl.client.auth`` none, requested or
  required, ``ssl.enabled.protocols`` and ``ssl.cipher.suites`` (OpenSSL names).
  JKS and PKCS12 stores, ``ssl.provider``, ``ssl.engine.factory.class``, key and trust
  manager algorithms and ``ssl.secure.random.implementation`` are not supported.
- The principal of an SSL connection: the client certificate's subject, mapped by
  ``ssl.principal.mapping.rules``; ``User:ANONYMOUS`` without a certificate.
- SASL (SASL_PLAINTEXT and SASL_SSL listeners): ``sasl.enabled.mechanisms`` among PLAIN,
  SCRAM-SHA-256 and SCRAM-SHA-512; PLAIN's users from the listener's ``PlainLoginModule``
  (``listener.name.<l>.plain.sasl.jaas.config``, ``user_<name>="<password>"``); SCRAM's
  from the credential store; ``connections.max.reauth.ms`` per listener and mechanism.

- How this broker connects to the others (:func:`inter_broker_security`): as a client of
  the inter-broker listener, with that listener's keys, as Kafka's inter-broker client
  does: its trust store (and key store, as client certificate) for TLS;
  ``sasl.mechanism.inter.broker.protocol`` and the ``username``/``password`` of that
  mechanism's JAAS entry on the listener for SASL.
"""

from __future__ import annotations

import os
import secrets
import ssl
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from oncelog.broker.config import BrokerConfig, ConfigError
from oncelog.broker.listeners import Endpoint
from oncelog.client.security import ClientSecurity
from oncelog.security.jaas import (
    PLAIN_LOGIN_MODULE,
    SCRAM_LOGIN_MODULE,
    JaasConfigError,
    LoginModule,
    parse_jaas_config,
)
from oncelog.security.mechanism import MechanismServer
from oncelog.security.plain import PlainServer
from oncelog.security.principal import ANONYMOUS, KafkaPrincipal
from oncelog.security.sasl import SaslServerAuthenticator
from oncelog.security.scram import ScramCredential, ScramMechanism, ScramServer
from oncelog.security.ssl_principal import SslPrincipalMapper
from oncelog.security.x500 import subject_from_der

__all__ = [
    "SUPPORTED_MECHANISMS",
    "ListenerSecurity",
    "SaslSetup",
    "authenticator_factory",
    "inter_broker_security",
    "listener_security",
]

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_LOGIN_MODULES = {
    "PLAIN": PLAIN_LOGIN_MODULE,
    "SCRAM-SHA-256": SCRAM_LOGIN_MODULE,
    "SCRAM-SHA-512": SCRAM_LOGIN_MODULE,
}
_TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


@dataclass(frozen=True)
class SaslSetup:
    """A SASL listener's mechanisms, in the order offered, and what they need."""

    mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str]  # PLAIN: name -> password
    reauth_ms: Mapping[str, int]  # mechanism -> connections.max.reauth.ms
    max_receive_bytes: int


@dataclass(frozen=True)
class ListenerSecurity:
    """What one listener asks of its connections: TLS (a server context) and/or SASL."""

    endpoint: Endpoint
    ssl_context: ssl.SSLContext | None
    sasl: SaslSetup | None
    principal_mapper: SslPrincipalMapper | None  # SSL listeners: certificates name users
    failed_authentication_delay_ms: int

    def principal_from_certificate(self, der: bytes | None) -> KafkaPrincipal:
        """The principal of an SSL connection whose client sent ``der`` (None: no
        certificate). Raises NoMatchingRule when no mapping rule applies."""
        if der is None or self.principal_mapper is None:
            return ANONYMOUS
        return KafkaPrincipal.user(self.principal_mapper.name_for(subject_from_der(der)))


def listener_security(config: BrokerConfig, endpoint: Endpoint) -> ListenerSecurity:
    """Everything a listener needs to accept connections; ConfigError when a key is
    missing or wrong for its protocol."""
    name, protocol = endpoint.listener, endpoint.protocol
    context = server_ssl_context(config, name) if protocol.uses_tls else None
    mapper = None
    if protocol.uses_tls and not protocol.uses_sasl:
        rules = config.listener_value(name, "ssl.principal.mapping.rules")
        try:
            mapper = SslPrincipalMapper(rules)
        except ValueError as exc:
            raise ConfigError("ssl.principal.mapping.rules", rules, str(exc)) from None
    return ListenerSecurity(
        endpoint=endpoint,
        ssl_context=context,
        sasl=_sasl_setup(config, name) if protocol.uses_sasl else None,
        principal_mapper=mapper,
        failed_authentication_delay_ms=config.get("connection.failed.authentication.delay.ms"),
    )


def inter_broker_security(config: BrokerConfig, endpoint: Endpoint) -> ClientSecurity:
    """How this broker connects to the inter-broker listener ``endpoint`` of the others;
    ConfigError when its keys cannot say (no mechanism, no credentials)."""
    name, protocol = endpoint.listener, endpoint.protocol
    mechanism = username = password = None
    if protocol.uses_sasl:
        key = "sasl.mechanism.inter.broker.protocol"
        mechanism = str(config.get(key)).upper()
        offered = config.listener_value(name, "sasl.enabled.mechanisms")
        if mechanism not in offered:
            raise ConfigError(
                key,
                mechanism,
                f"the inter-broker listener {name} offers {', '.join(offered)}: set {key} to "
                "one of them",
            )
        module = login_module(config, name, mechanism)
        options = {} if module is None else module.options
        username, password = options.get("username"), options.get("password")
        if not username or password is None:
            raise ConfigError(
                f"listener.name.{name.lower()}.{mechanism.lower()}.sasl.jaas.config",
                None,
                f"the broker connects to the others' {name} listener with {mechanism}: its "
                'JAAS entry needs the broker\'s own username="..." password="..."',
            )
    identification = config.listener_value(name, "ssl.endpoint.identification.algorithm")
    return ClientSecurity(
        protocol=protocol.name,
        mechanism=mechanism,
        username=username,
        password=password,
        ca_file=config.listener_value(name, "ssl.truststore.location"),
        ca_pem=config.listener_value(name, "ssl.truststore.certificates"),
        certificate_file=config.listener_value(name, "ssl.keystore.location"),
        key_password=config.listener_value(name, "ssl.key.password"),
        check_hostname=(identification or "").lower() == "https",
    )


ScramLookup = Callable[[str, ScramMechanism], ScramCredential | None]


def authenticator_factory(
    setup: SaslSetup, scram_credential: ScramLookup
) -> Callable[[], SaslServerAuthenticator]:
    """What makes the SASL state of each new connection of a listener. SCRAM looks its
    users up in ``scram_credential`` (the credential store, read at each attempt)."""

    def mechanism(name: str) -> Callable[[], MechanismServer]:
        scram = ScramMechanism.by_name(name)
        if scram is None:
            return lambda: PlainServer(setup.plain_users)
        return lambda: ScramServer(
            scram, lambda user: scram_credential(user, scram), secrets.token_urlsafe(24)
        )

    mechanisms = {name: mechanism(name) for name in setup.mechanisms}
    return lambda: SaslServerAuthenticator(
        mechanisms, reauth_ms=setup.reauth_ms, max_receive_bytes=setup.max_receive_bytes
    )


def _sasl_setup(config: BrokerConfig, listener: str) -> SaslSetup:
    key = "sasl.enabled.mechanisms"
    mechanisms = tuple(config.listener_value(listener, key))
    unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
    if not mechanisms or unsupported:
        raise ConfigError(
            key,
            ",".join(mechanisms),
            f"listener {listener} offers {', '.join(unsupported) or 'no mechanism'}: oncelog "
            f"supports {', '.join(SUPPORTED_MECHANISMS)}",
        )
    plain_users: dict[str, str] = {}
    if "PLAIN" in mechanisms:
        module = login_module(config, listener, "PLAIN")
        if module is None:
            raise ConfigError(
                "sasl.jaas.config",
                None,
                f"PLAIN on listener {listener} needs listener.name.{listener.lower()}.plain."
                f'sasl.jaas.config: {PLAIN_LOGIN_MODULE} required user_<name>="<password>";',
            )
        plain_users = module.users()
    for mechanism in mechanisms:
        login_module(config, listener, mechanism)  # checked at start, not at first use
    reauth = {
        m: config.listener_value(listener, "connections.max.reauth.ms", m) for m in mechanisms
    }
    return SaslSetup(
        mechanisms=mechanisms,
        plain_users=MappingProxyType(plain_users),
        reauth_ms=MappingProxyType(reauth),
        max_receive_bytes=config.listener_value(listener, "sasl.server.max.receive.size"),
    )


def login_module(config: BrokerConfig, listener: str, mechanism: str) -> LoginModule | None:
    """The listener's JAAS login module for ``mechanism``, if configured."""
    text = config.listener_value(listener, "sasl.jaas.config", mechanism)
    if text is None:
        return None
    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    try:
        module = parse_jaas_config(text)
    except JaasConfigError as exc:
        raise ConfigError(key, "[hidden]", str(exc)) from None
    if module.class_name != _LOGIN_MODULES[mechanism]:
        raise ConfigError(
            key,
            "[hidden]",
            f"{mechanism} needs {_LOGIN_MODULES[mechanism]}, not {module.class_name}",
        )
    return module


def _store_type(config: BrokerConfig, listener: str, key: str, needed: bool) -> None:
    value = config.listener_value(listener, key)
    if needed and value != "PEM":
        raise ConfigError(key, value, f"listener {listener}: oncelog reads PEM stores only")


def _tls_versions(context: ssl.SSLContext, config: BrokerConfig, listener: str) -> None:
    versions = sorted(
        _TLS_VERSIONS[v] for v in config.listener_value(listener, "ssl.enabled.protocols")
    )
    if not versions:
        raise ConfigError("ssl.enabled.protocols", "", "at least one TLS version is needed")
    context.minimum_version, context.maximum_version = versions[0], versions[-1]
    ciphers = config.listener_value(listener, "ssl.cipher.suites")
    if ciphers:
        try:
            context.set_ciphers(":".join(ciphers))
        except ssl.SSLError as exc:
            raise ConfigError("ssl.cipher.suites", ",".join(ciphers), str(exc)) from None


def _load_trust(context: ssl.SSLContext, config: BrokerConfig, listener: str) -> bool:
    """Load the trust store, if any; True when one was loaded."""
    location = config.listener_value(listener, "ssl.truststore.location")
    inline = config.listener_value(listener, "ssl.truststore.certificates")
    if location is None and inline is None:
        return False
    _store_type(config, listener, "ssl.truststore.type", True)
    try:
        if location is not None:
            context.load_verify_locations(cafile=location)
        else:
            context.load_verify_locations(cadata=inline)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError("ssl.truststore.location", location, f"cannot load: {exc}") from None
    return True


def _load_key_store(context: ssl.SSLContext, config: BrokerConfig, listener: str) -> None:
    location = config.listener_value(listener, "ssl.keystore.location")
    key = config.listener_value(listener, "ssl.keystore.key")
    chain = config.listener_value(listener, "ssl.keystore.certificate.chain")
    password = config.listener_value(listener, "ssl.key.password")
    if location is None and (key is None or chain is None):
        raise ConfigError(
            "ssl.keystore.location",
            None,
            f"TLS on listener {listener} needs a key store: ssl.keystore.location, or "
            "ssl.keystore.key with ssl.keystore.certificate.chain",
        )
    _store_type(config, listener, "ssl.keystore.type", True)
    try:
        if location is not None:
            context.load_cert_chain(location, password=password)
        else:
            _load_inline_chain(context, key, chain, password)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError("ssl.keystore.location", location, f"cannot load: {exc}") from None


def _load_inline_chain(context: ssl.SSLContext, key: str, chain: str, password: str | None) -> None:
    """The ssl module loads key stores from files only: a private temporary file holds
    the inline PEM for the moment it is read."""
    fd, path = tempfile.mkstemp(prefix="oncelog-keystore-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(f"{key.strip()}\n{chain.strip()}\n")
        context.load_cert_chain(path, password=password)
    finally:
        os.unlink(path)


def server_ssl_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _tls_versions(context, config, listener)
    _load_key_store(context, config, listener)
    client_auth = config.listener_value(listener, "ssl.client.auth")
    trusted = _load_trust(context, config, listener)
    if client_auth != "none" and not trusted:
        raise ConfigError(
            "ssl.client.auth",
            client_auth,
            f"listener {listener} checks client certificates: it needs a trust store "
            "(ssl.truststore.location or ssl.truststore.certificates)",
        )
    context.verify_mode = _CLIENT_AUTH[client_auth]
    return context
