"""Listeners: where the broker accepts connections, and with which security protocol.

Kafka's keys and rules (``KafkaConfig``, ``CoreUtils.listenerListToEndPoints``):

- ``listeners``: ``NAME://host:port`` entries, e.g.
  ``PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9093``. An empty host binds every
  interface; port 0 picks a free port. Names and ports must be unique.
- ``listener.security.protocol.map``: ``NAME:PROTOCOL`` pairs; by default each of
  PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL names its own protocol, so a listener with
  another name (``INTERNAL://...``) needs an entry.
- ``advertised.listeners``: what Metadata tells clients (a client gets the addresses of the
  listener it came in on); by default the listeners themselves. Every name must be a
  listener's; an empty host means the listener's host.
- ``inter.broker.listener.name`` (or ``security.inter.broker.protocol``, not both): the
  listener other brokers connect to; it must be advertised.

Pure: parsing and checks only. Errors are ConfigError naming the key.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from oncelog.broker.config import BrokerConfig, ConfigError

__all__ = [
    "DEFAULT_PROTOCOL_MAP",
    "Endpoint",
    "ListenerPlan",
    "SecurityProtocol",
    "listener_plan",
    "parse_endpoints",
    "parse_protocol_map",
    "plan_listeners",
]


class SecurityProtocol(enum.Enum):
    """Kafka's four security protocols, each as (uses TLS, uses SASL)."""

    PLAINTEXT = (False, False)
    SSL = (True, False)
    SASL_PLAINTEXT = (False, True)
    SASL_SSL = (True, True)

    def __init__(self, tls: bool, sasl: bool) -> None:
        self.uses_tls = tls
        self.uses_sasl = sasl

    @classmethod
    def parse(cls, text: str, key: str) -> SecurityProtocol:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            reason = "not a security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)"
            raise ConfigError(key, text, reason) from None


DEFAULT_PROTOCOL_MAP: Mapping[str, SecurityProtocol] = {p.name: p for p in SecurityProtocol}


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener address: its name (upper case, as Kafka normalises it), protocol,
    host ("" for every interface) and port (0: pick a free one)."""

    listener: str
    protocol: SecurityProtocol
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class ListenerPlan:
    """The listeners to bind, what Metadata advertises for each, and the inter-broker one."""

    listeners: tuple[Endpoint, ...]
    advertised: tuple[Endpoint, ...]  # same order as listeners where both exist
    inter_broker_listener: str

    def listener(self, name: str) -> Endpoint:
        return next(e for e in self.listeners if e.listener == name)

    def advertised_for(self, name: str) -> Endpoint | None:
        return next((e for e in self.advertised if e.listener == name), None)


def parse_protocol_map(entries: Sequence[str] | None) -> dict[str, SecurityProtocol]:
    key = "listener.security.protocol.map"
    if entries is None:
        return dict(DEFAULT_PROTOCOL_MAP)
    mapping: dict[str, SecurityProtocol] = {}
    for entry in entries:
        name, colon, protocol = entry.partition(":")
        if not colon or not name.strip():
            raise ConfigError(key, ",".join(entries), f"expected NAME:PROTOCOL, got {entry!r}")
        name = name.strip().upper()
        if name in mapping:
            raise ConfigError(key, ",".join(entries), f"{name} is mapped twice")
        mapping[name] = SecurityProtocol.parse(protocol, key)
    return mapping


def parse_endpoints(
    entries: Sequence[str], protocols: Mapping[str, SecurityProtocol], key: str
) -> tuple[Endpoint, ...]:
    """``NAME://host:port`` entries as endpoints; names and ports must be unique."""
    raw = ",".join(entries)
    endpoints: list[Endpoint] = []
    for entry in entries:
        name, sep, address = entry.strip().partition("://")
        host, colon, port_text = address.rpartition(":")
        if not sep or not name or not colon:
            raise ConfigError(key, raw, f"expected NAME://host:port, got {entry!r}")
        name = name.upper()
        if name not in protocols:
            raise ConfigError(
                key,
                raw,
                f"No security protocol defined for listener {name} "
                "(listener.security.protocol.map)",
            )
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]  # an IPv6 address
        if not (port_text.isascii() and port_text.isdigit()) or not 0 <= int(port_text) <= 65535:
            raise ConfigError(key, raw, f"the port of {entry!r} must be 0..65535")
        endpoints.append(Endpoint(name, protocols[name], host, int(port_text)))
    names = [e.listener for e in endpoints]
    if len(set(names)) != len(names):
        raise ConfigError(key, raw, "Each listener must have a different name")
    ports = [e.port for e in endpoints if e.port != 0]
    if key == "listeners" and len(set(ports)) != len(ports):
        raise ConfigError(key, raw, "Each listener must have a different port")
    return tuple(endpoints)


def plan_listeners(
    listeners: Sequence[str],
    advertised: Sequence[str] | None,
    protocol_map: Sequence[str] | None,
    inter_broker_listener: str | None,
    inter_broker_protocol: str | None,
) -> ListenerPlan:
    """Check the listener keys together (values as BrokerConfig parsed them; the two
    inter-broker keys None when unset)."""
    protocols = parse_protocol_map(protocol_map)
    bound = parse_endpoints(listeners, protocols, "listeners")
    if not bound:
        raise ConfigError("listeners", "", "at least one listener is needed")
    if advertised is None:
        shown = bound
    else:
        shown = parse_endpoints(advertised, protocols, "advertised.listeners")
        for endpoint in shown:
            if endpoint.listener not in {e.listener for e in bound}:
                raise ConfigError(
                    "advertised.listeners",
                    ",".join(advertised),
                    f"{endpoint.listener} is not a listener: advertised listeners must be a "
                    "subset of listeners",
                )
            if endpoint.port == 0:
                raise ConfigError(
                    "advertised.listeners", ",".join(advertised), "the port must be 1..65535"
                )
    inter_broker = _inter_broker_listener(inter_broker_listener, inter_broker_protocol, shown)
    return ListenerPlan(bound, shown, inter_broker)


def _inter_broker_listener(
    name: str | None, protocol: str | None, advertised: Sequence[Endpoint]
) -> str:
    names = {e.listener for e in advertised}
    if name is not None and protocol is not None:
        raise ConfigError(
            "inter.broker.listener.name",
            name,
            "Only one of inter.broker.listener.name and security.inter.broker.protocol "
            "should be set.",
        )
    if name is not None:
        chosen, key = name.strip().upper(), "inter.broker.listener.name"
    elif protocol is not None:
        key = "security.inter.broker.protocol"
        chosen = SecurityProtocol.parse(protocol, key).name
    elif "PLAINTEXT" in names:
        return "PLAINTEXT"  # Kafka's default (security.inter.broker.protocol=PLAINTEXT)
    else:
        # Kafka refuses to start here; oncelog takes the first advertised listener, so a
        # single node with, say, only a SASL_SSL listener needs no inter-broker setting.
        return advertised[0].listener
    if chosen not in names:
        raise ConfigError(key, chosen, "must name a listener in advertised.listeners")
    return chosen


def listener_plan(config: BrokerConfig, host: str | None, port: int | None) -> ListenerPlan:
    """The broker's listeners from its configuration. Without ``listeners``, one PLAINTEXT
    listener at ``host``:``port`` (127.0.0.1:9092 by default: oncelog listens on loopback
    unless told otherwise); with it, ``host`` and ``port`` must not be given too."""
    if config.is_set("listeners"):
        if host is not None or port is not None:
            raise ConfigError(
                "listeners",
                ",".join(config.listeners),
                "give the addresses either in listeners or as --host/--port, not both",
            )
        entries = list(config.listeners)
    else:
        default = Endpoint(
            "PLAINTEXT",
            SecurityProtocol.PLAINTEXT,
            host or "127.0.0.1",
            9092 if port is None else port,
        )
        entries = [str(default)]
    inter_protocol = "security.inter.broker.protocol"
    return plan_listeners(
        entries,
        config.advertised_listeners,
        config.get("listener.security.protocol.map"),
        config.get("inter.broker.listener.name"),
        config.get(inter_protocol) if config.is_set(inter_protocol) else None,
    )
