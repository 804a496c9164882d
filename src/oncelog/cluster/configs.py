"""Configuration in a cluster: topic overrides and dynamic broker configuration kept in
ZooKeeper, and every broker told of changes, as Kafka's ZooKeeper mode does it.

- A topic's overrides live in ``/config/topics/<t>``; the dynamic broker layers (KIP-226)
  in ``/config/brokers/<id>`` (one broker) and ``/config/brokers/<default>`` (all).
- Whoever changes one (AlterConfigs and IncrementalAlterConfigs on any broker; a broker's
  own layer on that broker only, as Kafka routes it) writes the new overrides and a
  notification ``/config/changes/config_change_<seq>`` naming the entity, in one
  transaction (``ZooKeeperSession.change_entity_config``).
- Every broker watches ``/config/changes`` (Kafka's ``ZkConfigManager``, through
  :class:`ChangeNotifications`), reads the entity the notifications name, in sequence
  order, and applies it: a topic's overrides go into the metadata cache (the replicas of
  that topic then act on them), a broker layer that concerns this broker into its
  ``BrokerConfig``, a user's SCRAM credentials into the credential store
  (``on_entity_change``).
- At start a broker reads its two layers before it opens any replica, so a broker
  restarted after a change starts with it.

Reads of the same znode may finish out of order; each applied value carries the zxid of
its write and an older one never replaces a newer one.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from oncelog.broker import config as cfg
from oncelog.broker.dynamic_config import Plan
from oncelog.cluster.metadata import Change, MetadataCache
from oncelog.cluster.notifications import ChangeNotifications
from oncelog.cluster.zookeeper import (
    CONFIG_CHANGE_PREFIX,
    CONFIG_CHANGES,
    DEFAULT_BROKER_ENTITY,
    EntityConfig,
    NoSuchNode,
    broker_config_path,
    decode_config_change,
    topic_path,
)
from oncelog.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from oncelog.cluster.zookeeper import ZooKeeperSession

log = logging.getLogger(__name__)

# Told after a change is applied: the topics whose overrides changed, or None for a
# broker layer (every topic's defaults may have moved).
ConfigListener = Callable[[frozenset[str] | None], None]


class ClusterConfigs:
    """One broker's view of the cluster's configuration in ZooKeeper: it writes changes with
    their notification, applies the notifications every broker writes, and tells its
    listeners which topics (or broker layers) changed (see the module docstring)."""

    def __init__(
        self,
        zk: ZooKeeperSession,
        cache: MetadataCache,
        config: cfg.BrokerConfig,
        broker_id: int,
    ) -> None:
        self._zk = zk
        self._cache = cache
        self._config = config
        self._entity = str(broker_id)
        self._listeners: list[ConfigListener] = []
        self._layer_zxids = {True: -1, False: -1}  # per broker?
        self._entity_listeners: dict[str, Callable[[str], Awaitable[None]]] = {}
        self._notifications = ChangeNotifications(
            zk, CONFIG_CHANGES, CONFIG_CHANGE_PREFIX, self._apply
        )

    def on_change(self, listener: ConfigListener) -> None:
        self._listeners.append(listener)

    # -- lifecycle ------------------------------------------------------------------------

    async def load_broker_layers(self) -> None:
        """Apply this broker's dynamic layers as ZooKeeper has them (at start, before any
        replica opens with the defaults they set)."""
        for per_broker in (False, True):
            found = await self._zk.entity_config(broker_config_path(self._layer_name(per_broker)))
            self._apply_layer(per_broker, found, notify=False)

    def start(self) -> None:
        self._notifications.start()

    async def stop(self) -> None:
        await self._notifications.stop()

    # -- reading --------------------------------------------------------------------------

    async def topic_overrides(self, topic: str) -> dict[str, str] | None:
        """A topic's overrides as ZooKeeper holds them now; None for a topic this broker does
        not know. DescribeConfigs answers from here, as Kafka's ZkConfigRepository does: the
        cache takes a change made through another broker only once its notification is
        applied, and a client that changed a topic and then asks any broker must see it."""
        if topic not in self._cache.topics:
            return None
        return dict((await self._zk.topic_config(topic)).configs)

    # -- changing -------------------------------------------------------------------------

    async def alter_topic(self, topic: str, plan: Plan, *, validate_only: bool) -> None:
        """Replace a topic's overrides by ``plan(current)`` (KafkaError
        UNKNOWN_TOPIC_OR_PARTITION if the topic does not exist, or what ``plan`` raises)."""
        if topic not in self._cache.topics:
            raise _unknown_topic(topic)
        if validate_only:
            plan(dict((await self._zk.topic_config(topic)).configs))
            return
        try:
            written = await self._zk.change_entity_config(
                f"topics/{topic}", plan, exists=topic_path(topic)
            )
        except NoSuchNode:
            raise _unknown_topic(topic) from None
        log.info("topic %s configuration now %s", topic, dict(written.configs) or "the defaults")
        self._apply_topic(topic, written)

    async def update(self, plan: Plan, *, per_broker: bool, validate_only: bool) -> None:
        """Replace this broker's own dynamic layer, or the cluster-wide one, by
        ``plan(current)`` (the same interface as the single node's DynamicConfigs)."""
        entity = self._layer_name(per_broker)
        if validate_only:
            plan(dict((await self._zk.entity_config(broker_config_path(entity))).configs))
            return
        written = await self._zk.change_entity_config(f"brokers/{entity}", plan)
        log.info("dynamic configuration of brokers/%s now %s", entity, dict(written.configs))
        self._apply_layer(per_broker, written, notify=True)

    # -- applying what others changed -----------------------------------------------------

    def on_entity_change(self, kind: str, reload: Callable[[str], Awaitable[None]]) -> None:
        """Call ``reload(name)`` for each notification about a ``kind/<name>`` entity that
        is not a topic or broker layer (``users``: SCRAM credentials)."""
        self._entity_listeners[kind] = reload

    async def _apply(self, notification: bytes) -> None:
        kind, _, name = decode_config_change(notification).partition("/")
        if kind == "topics":
            self._apply_topic(name, await self._zk.topic_config(name))
        elif kind == "brokers" and name in (self._entity, DEFAULT_BROKER_ENTITY):
            per_broker = name == self._entity
            found = await self._zk.entity_config(broker_config_path(name))
            self._apply_layer(per_broker, found, notify=True)
        elif kind in self._entity_listeners:
            await self._entity_listeners[kind](name)
        # Other entities (other brokers, clients) are not this broker's to apply.

    def _apply_topic(self, topic: str, found: EntityConfig) -> None:
        if self._cache.set_topic_config(topic, found):
            log.info("applying topic %s configuration %s", topic, dict(found.configs))
            self._cache._notify(Change(configs=frozenset({topic})))
            self._tell(frozenset({topic}))

    def _apply_layer(self, per_broker: bool, found: EntityConfig, *, notify: bool) -> None:
        if found.modified_zxid < self._layer_zxids[per_broker]:
            return  # a read that finished after a newer one
        self._layer_zxids[per_broker] = found.modified_zxid
        name = self._layer_name(per_broker)
        layer: dict[str, str] = {}
        for key, value in found.configs.items():
            try:
                layer |= cfg.validate_dynamic({key: value})
            except cfg.ConfigError as exc:
                log.warning("ignoring dynamic config of brokers/%s in ZooKeeper: %s", name, exc)
        if layer == self._config.dynamic(per_broker=per_broker):
            return
        self._config.set_dynamic(layer, per_broker=per_broker)
        log.info("dynamic configuration of brokers/%s applied: %s", name, layer or "empty")
        if notify:
            self._tell(None)

    def _tell(self, topics: frozenset[str] | None) -> None:
        for listener in list(self._listeners):
            try:
                listener(topics)
            except Exception:
                log.exception("configuration listener %r failed", listener)

    def _layer_name(self, per_broker: bool) -> str:
        return self._entity if per_broker else DEFAULT_BROKER_ENTITY


def _unknown_topic(topic: str) -> KafkaError:
    return KafkaError(ErrorCode.unknown_topic_or_partition, f"The topic '{topic}' does not exist.")
