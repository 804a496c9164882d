"""Which settings of a client configuration librdkafka takes, asked of librdkafka itself.

Spark's Kafka connector hands its `kafka.*` options to Kafka's Java client, which warns
about a key it does not know ("supplied but isn't a known config") and goes on; a bad
value of a known key fails the query. librdkafka instead refuses the whole configuration
when a client is made, so a Java-only key common in Spark jobs (`default.api.timeout.ms`)
or a misspelt one failed the first cluster call, with librdkafka's words and without the
option's name. This module finds both kinds before any client is made for real: a
producer without bootstrap servers opens no connection and is made in about 2 ms, and
librdkafka names the first key it refuses, so each refused key is taken out and the rest
tried again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

# Settings that need files or a cluster to be checked (certificates, keys, a SASL library):
# known by construction (oncelog.client.security translates and checks them), and a probe
# with them would read those files here.
_NOT_PROBED = ("ssl.", "sasl.", "security.protocol")

_UNKNOWN = re.compile(r'No such configuration property: "([^"]+)"')
_INVALID = re.compile(r'configuration property "([^"]+)"')


class InvalidSetting(ValueError):
    """librdkafka refuses the configuration: ``key``'s value where it names one (its own
    message in ``reason``)."""

    def __init__(self, key: str | None, reason: str) -> None:
        super().__init__(reason if key is None else f"{key}: {reason}")
        self.key = key
        self.reason = reason


@dataclass(frozen=True)
class Checked:
    """A configuration as librdkafka takes it: ``known`` (the settings kept) and
    ``unknown`` (the keys it does not know, in the order it named them)."""

    known: dict[str, str]
    unknown: tuple[str, ...]


def check_settings(config: Mapping[str, str]) -> Checked:
    """Split ``config`` into the settings librdkafka knows and the keys it does not;
    InvalidSetting for a known key whose value it refuses."""
    from confluent_kafka import KafkaException, Producer

    probed = {k: v for k, v in config.items() if not k.startswith(_NOT_PROBED)}
    probed.pop("bootstrap.servers", None)  # no connection from the probe
    unknown: list[str] = []
    while True:
        try:
            Producer({**probed, "log_level": 0}).close()  # 0: its warnings are not ours
        except KafkaException as exc:
            reason = exc.args[0].str()
            named = _UNKNOWN.search(reason)
            if named is not None and named.group(1) in probed:
                unknown.append(named.group(1))
                del probed[named.group(1)]
                continue
            invalid = _INVALID.search(reason)
            raise InvalidSetting(invalid.group(1) if invalid else None, reason) from None
        return Checked({k: v for k, v in config.items() if k not in unknown}, tuple(unknown))
