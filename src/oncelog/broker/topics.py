"""Topics: their persisted metadata (id, partition count, configs) and their partitions.

The metadata lives in one JSON file replaced atomically (write, fsync, rename), so a
crash leaves either the old or the new catalogue, never half of one.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from oncelog.broker import config as cfg
from oncelog.broker.partition import Partition, PartitionSettings, record_rules
from oncelog.broker.topic_names import find_collision, is_internal, validate_topic_name
from oncelog.producers.loader import load_producer_state
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.storage import LogConfig, PartitionLog
from oncelog.storage.atomic_file import write_atomically

log = logging.getLogger(__name__)

CATALOGUE_FILE = "topics.json"


@dataclass
class Topic:
    """A topic: its name, id, config overrides and partitions."""

    name: str
    topic_id: uuid.UUID
    configs: dict[str, str]
    partitions: list[Partition] = field(default_factory=list)

    @property
    def is_internal(self) -> bool:
        return is_internal(self.name)


class TopicRegistry:
    """Every topic of the broker: creation, deletion and lookup by name or id, and loading
    the topics found in the data directory at start."""

    def __init__(self, data_dir: Path, broker_config: cfg.BrokerConfig) -> None:
        self._data_dir = data_dir
        self._config = broker_config
        self._topics: dict[str, Topic] = {}
        self._by_id: dict[uuid.UUID, Topic] = {}

    @property
    def broker_config(self) -> cfg.BrokerConfig:
        return self._config

    # -- lookup ---------------------------------------------------------------------

    def get(self, name: str) -> Topic | None:
        return self._topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return self._by_id.get(topic_id)

    def all(self) -> list[Topic]:
        return list(self._topics.values())

    def partition(self, name: str, index: int) -> Partition:
        topic = self._topics.get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"{name}-{index} does not exist")
        return topic.partitions[index]

    def partitions(self) -> list[Partition]:
        return [p for t in self._topics.values() for p in t.partitions]

    # -- lifecycle --------------------------------------------------------------------

    def load(self, *, clean_shutdown: bool, now_ms: int) -> None:
        path = self._data_dir / CATALOGUE_FILE
        if not path.exists():
            return
        for entry in json.loads(path.read_text()):
            topic = Topic(entry["name"], uuid.UUID(entry["id"]), dict(entry["configs"]))
            self._open_partitions(topic, entry["partitions"], clean_shutdown, now_ms)
            self._register(topic)

    def create(
        self,
        name: str,
        num_partitions: int,
        configs: dict[str, str],
        now_ms: int,
        *,
        validate_only: bool = False,
        internal: bool = False,
    ) -> Topic:
        """Create a topic, or raise KafkaError with the code CreateTopics returns.

        Internal topics are created by their coordinators alone (`internal=True`), with
        their own partition counts and configs; a client cannot create one."""
        try:
            validate_topic_name(name)
        except ValueError as exc:
            raise KafkaError(ErrorCode.invalid_topic_exception, str(exc)) from exc
        if is_internal(name) and not internal:
            raise KafkaError(
                ErrorCode.invalid_request,
                f"Creation of internal topic {name} is prohibited: the broker creates it "
                "when its coordinator is first looked up",
            )
        if name in self._topics:
            raise KafkaError(ErrorCode.topic_already_exists, f"topic {name!r} already exists")
        collision = find_collision(name, self._topics)
        if collision is not None:
            raise KafkaError(
                ErrorCode.invalid_topic_exception,
                f"topic {name!r} collides with existing topic {collision!r}: "
                "'.' and '_' are interchangeable in metric names",
            )
        if num_partitions == -1:
            num_partitions = self._config.num_partitions
        if num_partitions < 1:
            raise KafkaError(
                ErrorCode.invalid_partitions,
                f"number of partitions must be at least 1, got {num_partitions}",
            )
        try:
            overrides = cfg.TopicConfig.validate(configs)
        except cfg.ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from exc
        topic = Topic(name, uuid.uuid4(), overrides)
        if validate_only:
            return topic
        self._open_partitions(topic, num_partitions, True, now_ms)
        self._register(topic)
        self._persist()
        log.info("created topic %s with %d partitions", name, num_partitions)
        return topic

    def delete(self, name: str) -> Topic:
        topic = self._topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
        if topic.is_internal:
            raise KafkaError(
                ErrorCode.invalid_request,
                f"Topic {name} is an internal topic: deleting it would lose the state of "
                "its coordinator",
            )
        del self._topics[name]
        del self._by_id[topic.topic_id]
        self._persist()
        for partition in topic.partitions:
            partition.log.delete()
        log.info("deleted topic %s", name)
        return topic

    def add_partitions(self, name: str, count: int, now_ms: int) -> Topic:
        """CreatePartitions: open partitions up to ``count`` (the caller checked it is an
        increase) and record the new count."""
        topic = self._topics[name]
        before = len(topic.partitions)
        self._open_partitions(topic, count, True, now_ms)
        self._persist()
        log.info("topic %s now has %d partitions (was %d)", name, count, before)
        return topic

    def alter_configs(self, name: str, overrides: dict[str, str]) -> None:
        """Replace a topic's overrides (already validated), persist them, and bring its
        running partitions up to date."""
        topic = self._topics[name]
        topic.configs = dict(overrides)
        self._persist()
        self.refresh_settings(topic)

    def refresh_settings(self, topic: Topic | None = None) -> None:
        """Recompute what partitions act on (after a topic's overrides or a dynamic broker
        default changed); every topic when ``topic`` is None."""
        for each in [topic] if topic is not None else list(self._topics.values()):
            apply_settings(each.partitions, self._config, each.configs)

    def close(self) -> None:
        for partition in self.partitions():
            partition.close()

    # -- internals --------------------------------------------------------------------

    def _register(self, topic: Topic) -> None:
        self._topics[topic.name] = topic
        self._by_id[topic.topic_id] = topic

    def _open_partitions(self, topic: Topic, count: int, clean_shutdown: bool, now_ms: int) -> None:
        """Open partitions up to ``count`` (a new topic's, or those CreatePartitions adds)."""
        for index in range(len(topic.partitions), count):
            topic.partitions.append(
                open_partition(
                    self._data_dir,
                    self._config,
                    topic.name,
                    topic.configs,
                    index,
                    clean_shutdown=clean_shutdown,
                    now_ms=now_ms,
                )
            )

    def _persist(self) -> None:
        entries = [
            {
                "name": t.name,
                "id": str(t.topic_id),
                "partitions": len(t.partitions),
                "configs": t.configs,
            }
            for t in self._topics.values()
        ]
        write_atomically(self._data_dir / CATALOGUE_FILE, json.dumps(entries, indent=1).encode())


def open_partition(
    data_dir: Path,
    broker_config: cfg.BrokerConfig,
    topic: str,
    overrides: dict[str, str],
    index: int,
    *,
    clean_shutdown: bool,
    now_ms: int,
) -> Partition:
    """Open (or create) ``<data_dir>/<topic>-<index>`` with its producer state, under the
    topic's configuration (also used by cluster mode for the replicas a broker hosts)."""
    log_config, settings = partition_settings(broker_config, overrides)
    directory = data_dir / f"{topic}-{index}"
    partition_log = PartitionLog.open(directory, log_config, clean_shutdown=clean_shutdown)
    producers = load_producer_state(
        directory, partition_log, now_ms, broker_config.producer_id_expiration_ms
    )
    return Partition(topic, index, partition_log, producers, settings)


def apply_settings(
    partitions: list[Partition], broker_config: cfg.BrokerConfig, overrides: dict[str, str]
) -> None:
    """Bring running partitions up to date with their topic's configuration (after its
    overrides or a dynamic broker default changed): log keys, flush keys and the record
    rules produce applies (``compression.type``, timestamps, ...)."""
    log_config, settings = partition_settings(broker_config, overrides)
    for partition in partitions:
        partition.log.config = log_config
        partition.settings = settings


def partition_settings(
    broker_config: cfg.BrokerConfig, overrides: dict[str, str]
) -> tuple[LogConfig, PartitionSettings]:
    """What a topic's partitions act on, from its overrides over the broker's keys."""
    topic_config = cfg.TopicConfig(broker_config, overrides)
    log_config = LogConfig(**topic_config.to_log_config())
    settings = PartitionSettings(
        max_message_bytes=log_config.max_message_bytes,
        log_append_time=topic_config.get("message.timestamp.type") == "LogAppendTime",
        flush_messages=int(topic_config.get("flush.messages")),
        flush_ms=int(topic_config.get("flush.ms")),
        records=record_rules(topic_config),
    )
    return log_config, settings
