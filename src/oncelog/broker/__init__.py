"""The broker: an asyncio server speaking the Kafka protocol, request handlers per API
family, partitions over :mod:`oncelog.storage`, and the coordinators that wire the pure
transaction and group cores to their internal topics. ``oncelog broker`` runs one
(:func:`run_forever`); tests use :class:`oncelog.testing.EmbeddedBroker`."""

from oncelog.broker.broker import Broker
from oncelog.broker.config import BrokerConfig, ConfigError
from oncelog.broker.runner import run_forever

__all__ = ["Broker", "BrokerConfig", "ConfigError", "run_forever"]
