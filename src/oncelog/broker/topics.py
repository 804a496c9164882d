"""Topics: their persisted metadata (id, partition count, configs) and their partitions.

`TopicRegistry.create` is the one place where topics come into being: CreateTopics,
Metadata's auto-creation and the coordinators' internal topics all go through it. Work
that grows with a request never runs on the event loop: the partition directories and
their empty logs, and the topic's catalogue entry (topic_catalogue.py), are made by one
"topic-admin" worker thread, all or nothing (a failure removes what was made and the
request gets an error). The event loop only validates the request, reserves the name and,
once everything is on disk, makes the topic visible. Deletion works the same way in
reverse: the topic disappears at once, its files go in the worker thread.

One CreateTopics request may ask for at most MAX_PARTITIONS_PER_REQUEST partitions in all,
as Kafka's controller allows (`QuorumController.MAX_PARTITIONS_PER_BATCH`).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from oncelog.broker import config as cfg
from oncelog.broker.partition import Partition, PartitionSettings, record_rules
from oncelog.broker.topic_catalogue import TopicCatalogue, TopicEntry
from oncelog.broker.topic_names import check_creatable, is_internal, metric_name
from oncelog.producers.loader import load_producer_state
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.storage import LogConfig, PartitionLog
from oncelog.storage.checkpoint import fsync_directory

log = logging.getLogger(__name__)

T = TypeVar("T")

# Kafka's QuorumController.MAX_PARTITIONS_PER_BATCH: partitions one request may create.
MAX_PARTITIONS_PER_REQUEST = 10_000


def check_partitions_per_request(total: int) -> None:
    """Refuse a request that would create more than MAX_PARTITIONS_PER_REQUEST partitions
    (Kafka's POLICY_VIOLATION, with its message)."""
    if total > MAX_PARTITIONS_PER_REQUEST:
        raise KafkaError(
            ErrorCode.policy_violation,
            f"Excessively large number of partitions per request: {total} requested, "
            f"limit {MAX_PARTITIONS_PER_REQUEST}.",
        )


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

    def entry(self, partition_count: int) -> TopicEntry:
        return TopicEntry(self.name, self.topic_id, partition_count, self.configs)


class TopicRegistry:
    """Every topic of the broker: creation, deletion and lookup by name or id, and loading
    the topics found in the data directory at start."""

    def __init__(self, data_dir: Path, broker_config: cfg.BrokerConfig) -> None:
        self._data_dir = data_dir
        self._config = broker_config
        self._catalogue = TopicCatalogue(data_dir)
        self._topics: dict[str, Topic] = {}
        self._by_id: dict[uuid.UUID, Topic] = {}
        # metric name -> topic, for the topics that exist and those being created
        self._metric_names: dict[str, str] = {}
        self._admin = ThreadPoolExecutor(1, thread_name_prefix="topic-admin")
        self._changing = asyncio.Lock()  # one creation, deletion or change at a time

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

    def in_use(self) -> bool:
        """Whether this data directory has held topics (a start after a crash must
        recover them)."""
        return self._catalogue.exists()

    def load(self, *, clean_shutdown: bool, now_ms: int) -> None:
        """Open every topic of the catalogue (at start, before anything is served)."""
        for entry in self._catalogue.load():
            topic = Topic(entry.name, entry.topic_id, entry.configs)
            topic.partitions = [
                self._open_partition(topic, index, clean_shutdown=clean_shutdown, now_ms=now_ms)
                for index in range(entry.partitions)
            ]
            self._register(topic)

    async def create(
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
        topic, count = self._validate_creation(name, num_partitions, configs, internal)
        if validate_only:
            return topic
        self._metric_names[metric_name(name)] = name  # reserved while the files are made
        try:
            async with self._changing:
                topic.partitions = await self._storage_work(
                    f"create topic {name!r}", self._make_partitions, topic, 0, count, now_ms
                )
        finally:
            del self._metric_names[metric_name(name)]
        self._register(topic)
        log.info("created topic %s with %d partitions", name, count)
        return topic

    def _validate_creation(
        self, name: str, num_partitions: int, configs: dict[str, str], internal: bool
    ) -> tuple[Topic, int]:
        check_creatable(name, internal=internal)
        holder = self._metric_names.get(metric_name(name))
        if holder == name:
            raise KafkaError(ErrorCode.topic_already_exists, f"topic {name!r} already exists")
        if holder is not None:
            raise KafkaError(
                ErrorCode.invalid_topic_exception,
                f"topic {name!r} collides with existing topic {holder!r}: "
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
        return Topic(name, uuid.uuid4(), overrides), num_partitions

    async def delete(self, name: str) -> Topic:
        """Delete a topic: it is gone at once for every request; its files are removed
        in the worker thread before this returns."""
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
        # The name stays taken until its directories are gone.
        try:
            async with self._changing:
                await self._storage_work(f"delete topic {name!r}", self._remove_topic, topic)
        finally:
            del self._metric_names[metric_name(name)]
        log.info("deleted topic %s", name)
        return topic

    async def add_partitions(self, name: str, count: int, now_ms: int) -> Topic:
        """CreatePartitions: partitions up to ``count`` (the caller checked it is an
        increase), made off the event loop like a new topic's, all or nothing."""
        async with self._changing:
            topic = self._topics.get(name)
            if topic is None:
                raise KafkaError(
                    ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist."
                )
            before = len(topic.partitions)
            if count <= before:
                raise KafkaError(
                    ErrorCode.invalid_partitions, f"Topic already has {before} partition(s)."
                )
            topic.partitions += await self._storage_work(
                f"add partitions to {name!r}",
                self._make_partitions,
                topic,
                before,
                count,
                now_ms,
            )
        log.info("topic %s now has %d partitions (was %d)", name, count, before)
        return topic

    async def alter_configs(self, name: str, overrides: dict[str, str]) -> None:
        """Replace a topic's overrides (already validated), persist them, and bring its
        running partitions up to date."""
        async with self._changing:
            topic = self._topics[name]
            entry = replace(topic.entry(len(topic.partitions)), configs=dict(overrides))
            await self._storage_work(f"alter the configs of {name!r}", self._catalogue.write, entry)
            topic.configs = dict(overrides)
        self.refresh_settings(topic)

    def refresh_settings(self, topic: Topic | None = None) -> None:
        """Recompute what partitions act on (after a topic's overrides or a dynamic broker
        default changed); every topic when ``topic`` is None."""
        for each in [topic] if topic is not None else list(self._topics.values()):
            apply_settings(each.partitions, self._config, each.configs)

    def close(self) -> None:
        self._admin.shutdown(wait=True)
        for partition in self.partitions():
            partition.close()

    # -- internals --------------------------------------------------------------------

    def _register(self, topic: Topic) -> None:
        self._topics[topic.name] = topic
        self._by_id[topic.topic_id] = topic
        self._metric_names[metric_name(topic.name)] = topic.name

    async def _storage_work(self, what: str, work: Callable[..., T], *args: object) -> T:
        """Run `work` in the topic-admin thread; a disk failure is KAFKA_STORAGE_ERROR."""
        try:
            return await asyncio.get_running_loop().run_in_executor(self._admin, work, *args)
        except OSError as exc:
            log.error("could not %s: %s", what, exc)
            raise KafkaError(ErrorCode.kafka_storage_error, f"could not {what}: {exc}") from exc

    def _open_partition(
        self, topic: Topic, index: int, *, clean_shutdown: bool, now_ms: int
    ) -> Partition:
        return open_partition(
            self._data_dir,
            self._config,
            topic.name,
            topic.configs,
            index,
            clean_shutdown=clean_shutdown,
            now_ms=now_ms,
        )

    def _partition_dir(self, topic: str, index: int) -> Path:
        return self._data_dir / f"{topic}-{index}"

    def _make_partitions(
        self, topic: Topic, start: int, count: int, now_ms: int
    ) -> list[Partition]:
        """(Worker thread.) Partitions `start`..`count`-1 of `topic`: their directories and
        empty logs, then the topic's catalogue entry with `count` partitions; all or
        nothing."""
        made: list[Partition] = []
        try:
            for index in range(start, count):
                self._set_aside_stray(topic.name, index)
                made.append(self._open_partition(topic, index, clean_shutdown=True, now_ms=now_ms))
            fsync_directory(self._data_dir)
            self._catalogue.write(topic.entry(count))
        except BaseException:
            for partition in made:
                partition.log.delete()
            shutil.rmtree(self._partition_dir(topic.name, start + len(made)), ignore_errors=True)
            raise
        return made

    def _set_aside_stray(self, topic: str, index: int) -> None:
        """A directory left by a topic of the same name that a crash interrupted while it
        was created or deleted is not in the catalogue: it must not lend its data to the
        new topic. It is renamed, as Kafka renames stray logs, and left for the operator."""
        directory = self._partition_dir(topic, index)
        if directory.exists():
            stray = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}-stray")
            directory.rename(stray)
            log.warning("set aside %s, left by an earlier topic %s, as %s", directory, topic, stray)

    def _remove_topic(self, topic: Topic) -> None:
        """(Worker thread.) The catalogue entry first: a crash after it leaves directories
        the catalogue does not list, which a new topic of the same name sets aside."""
        self._catalogue.remove(topic.name)
        for partition in topic.partitions:
            partition.log.delete()


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
