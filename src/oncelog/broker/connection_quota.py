"""How many connections the broker keeps, in all and per client address.

Kafka's keys: `max.connections` for the whole broker, `max.connections.per.ip` for each
address, and `max.connections.per.ip.overrides` (``host:count,host:count``) for chosen
addresses or host names. A connection beyond a limit is closed as soon as it is accepted,
with a log line naming the limit. (Kafka's acceptor instead stops accepting while the
broker-wide limit is reached, leaving new connections in the listen backlog; closing them
gives the client the same answer sooner: retry later.)
"""

from __future__ import annotations

import socket
from collections import Counter
from collections.abc import Mapping

from oncelog.broker.config import ConfigError

OVERRIDES_KEY = "max.connections.per.ip.overrides"


def parse_overrides(text: str) -> dict[str, int]:
    """``host:count,host:count`` as {host: count}; ConfigError naming the bad entry."""
    overrides: dict[str, int] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        host, colon, count = entry.rpartition(":")
        if not colon or not host or not count.isdigit():
            raise ConfigError(OVERRIDES_KEY, text, f"{entry!r} is not host:count")
        overrides[host.strip("[]")] = int(count)
    return overrides


def resolve_overrides(overrides: Mapping[str, int]) -> dict[str, int]:
    """The overrides keyed by IP address: a host name counts for each of its addresses
    (resolved once, at start, as Kafka does)."""
    by_address: dict[str, int] = {}
    for host, count in overrides.items():
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except OSError as exc:
            raise ConfigError(OVERRIDES_KEY, host, f"cannot resolve {host!r}: {exc}") from exc
        for info in infos:
            by_address[str(info[4][0])] = count
    return by_address


class ConnectionQuota:
    """Counts open connections; `admit` says whether one more may stay open."""

    def __init__(
        self, max_connections: int, max_per_ip: int, per_ip_overrides: Mapping[str, int]
    ) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.per_ip_overrides = dict(per_ip_overrides)
        self.total = 0
        self._by_ip: Counter[str] = Counter()

    def limit_for(self, ip: str) -> int:
        return self.per_ip_overrides.get(ip, self.max_per_ip)

    def admit(self, ip: str) -> str | None:
        """Count a new connection from `ip` and return None, or return why it is refused
        (then nothing is counted)."""
        if self.total >= self.max_connections:
            return f"the broker has the configured maximum of {self.max_connections} connections"
        limit = self.limit_for(ip)
        if self._by_ip[ip] >= limit:
            return f"{ip} already has the configured maximum of {limit} connections"
        self.total += 1
        self._by_ip[ip] += 1
        return None

    def release(self, ip: str) -> None:
        self.total -= 1
        self._by_ip[ip] -= 1
        if not self._by_ip[ip]:
            del self._by_ip[ip]

    def count(self, ip: str) -> int:
        return self._by_ip[ip]
