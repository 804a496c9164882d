"""The cluster questions the driver asks, through one confluent-kafka AdminClient.

Only public Kafka APIs are used (Metadata, ListOffsets with an isolation level and by
timestamp, CreateTopics), so the same code works against oncelog and against any Kafka
cluster. One `Cluster` lives as long as the reader or writer that made it: the admin
client is built on first use, never pickled, and reused by every later call of the query.

Failures follow Spark's `fetchOffset.numRetries` and `fetchOffset.retryIntervalMs` (a
read's; the sink's calls take Spark's defaults) for errors Kafka calls retriable (Spark
tries every error again); a cluster that cannot be reached fails once, after the client
timeout (`kafka.socket.timeout.ms`), with a message that says so.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec, ResourceType

from oncelog.spark.offsets import Offsets, TopicPartitionKey
from oncelog.spark.options import (
    DEFAULT_FETCH_OFFSET_RETRIES,
    DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS,
    Subscription,
    admin_config,
    client_timeout_s,
)

T = TypeVar("T")
log = logging.getLogger(__name__)

_UNREACHABLE = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT}
TOPIC_METADATA_POLL_S = 0.1  # while a created topic's partitions are not in the metadata


class _OncePerMessage(logging.Filter):
    """librdkafka logs a failed connection on every reconnect attempt (about 20 lines a
    second to an unreachable host): let each distinct message through once."""

    _DIGITS = re.compile(r"\d+")

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = self._DIGITS.sub("#", record.getMessage())
        if key in self._seen:
            return False
        if len(self._seen) > 10_000:
            self._seen.clear()
        self._seen.add(key)
        return True


KAFKA_LOG = logging.getLogger("oncelog.spark.kafka")
KAFKA_LOG.addFilter(_OncePerMessage())


def with_logger(config: Mapping[str, Any]) -> dict[str, Any]:
    """A client configuration whose librdkafka log goes to `oncelog.spark.kafka`."""
    return {"logger": KAFKA_LOG, **config}


class ClusterError(RuntimeError):
    """The cluster could not answer a question the query needs answered."""


class TopicNotFoundError(ClusterError):
    """A topic or partition the options name does not exist."""


def is_retriable(exc: KafkaException) -> bool:
    """Whether Kafka calls the error retriable: librdkafka's flag, or, for an error code a
    broker answered, Kafka's own table. confluent-kafka leaves the flag unset on the
    per-partition errors of `list_offsets` (NOT_LEADER_FOR_PARTITION, LEADER_NOT_AVAILABLE
    and REQUEST_TIMED_OUT probed, through tests' fault-injection proxy): with the flag
    alone no offset lookup was ever retried. Every call of a `Cluster` follows this rule:
    the reader's lookups, and the sink's topic creation and checks."""
    error = exc.args[0] if exc.args else None
    if not isinstance(error, KafkaError) or error.code() in _UNREACHABLE:
        return False
    return error.retriable() or _retriable_broker_error(error.code())


def _retriable_broker_error(code: int) -> bool:
    if code <= 0:  # librdkafka's own errors (negative) are flagged by librdkafka
        return False
    from oncelog.protocol.errors import ErrorCode  # kio: imported on this failure path only

    try:
        return bool(ErrorCode(code).retriable)
    except ValueError:  # a code newer than kio's table
        return False


class Cluster:
    """The driver's questions to the cluster, with Spark's retry options."""

    def __init__(
        self,
        client_config: Mapping[str, str],
        retries: int = DEFAULT_FETCH_OFFSET_RETRIES,
        retry_interval_ms: int = DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS,
        retries_option: str | None = None,
    ) -> None:
        """`retries_option`: the option that set `retries` (a read's
        `fetchOffset.numRetries`), named in the error after the last attempt; the sink's
        calls try Spark's default number of times and name none."""
        self._config = dict(client_config)
        self._timeout_s = client_timeout_s(client_config)
        self._retries = retries
        self._retries_option = retries_option
        self._retry_interval_s = retry_interval_ms / 1000
        self._admin: AdminClient | None = None

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(with_logger(admin_config(self._config)))
        return self._admin

    def _call(self, what: str, call: Callable[[], T]) -> T:
        """`call`, tried again on retriable errors; unreachable is reported once, clearly."""
        attempt = 1
        while True:
            try:
                return call()
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                code = error.code() if isinstance(error, KafkaError) else None
                if code in _UNREACHABLE:
                    raise ClusterError(
                        f"{what}: no answer from the cluster at kafka.bootstrap.servers="
                        f"{self._config.get('bootstrap.servers')} within {self._timeout_s:g} s "
                        f"(kafka.socket.timeout.ms): {error.str() if error else exc}"
                    ) from None
                if not is_retriable(exc):
                    raise ClusterError(f"{what}: {error.str() if error else exc}") from exc
                if attempt >= self._retries:
                    option = self._retries_option
                    named = f": {option}={self._retries}" if option else ""
                    raise ClusterError(
                        f"{what}: {error.str() if error else exc} (tried {attempt} "
                        f"time{'s' if attempt > 1 else ''}{named})"
                    ) from exc
                log.warning("%s, attempt %d: %s; trying again", what, attempt, error or exc)
            attempt += 1
            time.sleep(self._retry_interval_s)

    def partitions(self, subscription: Subscription) -> list[TopicPartitionKey]:
        """The topic-partitions the subscription names, as the cluster knows them now.
        Topics or partitions named by `subscribe` or `assign` must exist."""
        metadata = self._call(
            "listing topics", lambda: self.admin.list_topics(timeout=self._timeout_s)
        )
        found: list[TopicPartitionKey] = []
        for name, topic in metadata.topics.items():
            if topic.error is not None or not subscription.matches(name):
                continue
            wanted = subscription.assign.get(name) if subscription.assign is not None else None
            found.extend((name, p) for p in topic.partitions if wanted is None or p in wanted)
        named: set[TopicPartitionKey] | set[str]
        if subscription.assign is not None:
            named = {(t, p) for t, ps in subscription.assign.items() for p in ps}
            missing = sorted(named - set(found))
            if missing:
                raise TopicNotFoundError(
                    f"{subscription.describe()}: these partitions do not exist: "
                    + ", ".join(f"{t}-{p}" for t, p in missing)
                )
        elif subscription.topics:
            missing_topics = sorted(set(subscription.topics) - {t for t, _ in found})
            if missing_topics:
                raise TopicNotFoundError(
                    f"{subscription.describe()}: topic{'s' if len(missing_topics) > 1 else ''} "
                    f"{', '.join(missing_topics)} not found. Create "
                    f"{'them' if len(missing_topics) > 1 else 'it'} first, or use "
                    "subscribePattern to pick topics up as they appear."
                )
        return sorted(found)

    def offsets(
        self, tps: Iterable[TopicPartitionKey], which: str, read_committed: bool
    ) -> Offsets:
        """`which` = "earliest" (log start offset) or "latest": the last stable offset under
        read_committed, the high watermark otherwise."""
        spec = OffsetSpec.earliest() if which == "earliest" else OffsetSpec.latest()
        return self._list_offsets(dict.fromkeys(tps, spec), read_committed, f"{which} offsets")

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartitionKey, int], read_committed: bool
    ) -> dict[TopicPartitionKey, int | None]:
        """The first offset whose timestamp is at or after the given one, per partition;
        None where the broker found none (no record that late below the last stable offset
        under read_committed, the high watermark otherwise, as Kafka answers)."""
        found = self._list_offsets(
            {tp: OffsetSpec.for_timestamp(ts) for tp, ts in timestamps.items()},
            read_committed,
            "offsets by timestamp",
        )
        return {tp: (offset if offset >= 0 else None) for tp, offset in found.items()}

    def _list_offsets(
        self, specs: Mapping[TopicPartitionKey, Any], read_committed: bool, what: str
    ) -> dict[TopicPartitionKey, int]:
        if not specs:
            return {}
        level = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED

        def call() -> dict[TopicPartitionKey, int]:
            futures = self.admin.list_offsets(
                {TopicPartition(t, p): spec for (t, p), spec in specs.items()},
                isolation_level=level,
                request_timeout=self._timeout_s,
            )
            return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}

        return self._call(f"listing {what}", call)

    def ensure_topic(
        self, name: str, partitions: int, config: Mapping[str, str] | None = None
    ) -> int:
        """Create `name` if missing (with the topic `config` given); return its partition
        count."""

        def count() -> int | None:
            # all topics: a Metadata request naming the topic could auto-create it with defaults
            metadata = self.admin.list_topics(timeout=self._timeout_s)
            topic = metadata.topics.get(name)
            if topic is not None and topic.error is None and topic.partitions:
                return len(topic.partitions)
            return None

        existing = self._call(f"describing topic {name}", count)
        if existing is not None:
            return existing

        def create() -> None:
            futures = self.admin.create_topics(
                [
                    NewTopic(
                        name,
                        num_partitions=partitions,
                        replication_factor=-1,
                        config=dict(config or {}),
                    )
                ],
                request_timeout=self._timeout_s,
            )
            try:
                futures[name].result()
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise

        self._call(f"creating topic {name}", create)
        # Partitions can show in the metadata later than CreateTopics answers: always on a
        # Kafka cluster (brokers learn of them asynchronously), and when another task
        # created the topic a moment ago (TOPIC_ALREADY_EXISTS while it is being made).
        deadline = time.monotonic() + self._timeout_s
        while (created := self._call(f"describing topic {name}", count)) is None:
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"topic {name} was created but has no partitions after {self._timeout_s:g} s"
                )
            time.sleep(TOPIC_METADATA_POLL_S)
        return created

    def topic_config(self, name: str) -> dict[str, str]:
        """The topic's configuration as the cluster applies it (DescribeConfigs)."""

        def describe() -> dict[str, str]:
            futures = self.admin.describe_configs(
                [ConfigResource(ResourceType.TOPIC, name)], request_timeout=self._timeout_s
            )
            (entries,) = (f.result() for f in futures.values())
            return {key: entry.value for key, entry in entries.items() if entry.value is not None}

        return self._call(f"describing the configuration of topic {name}", describe)
