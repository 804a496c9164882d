"""Options of the `oncelog` data source: Spark's Kafka source and sink options, checked early.

The names and meanings are those of Spark's Kafka connector (`KafkaSourceProvider` and
the Structured Streaming + Kafka integration guide), so a job switches formats by changing
one word. Spark hands the options over lower-cased and as strings; everything here is
parsing, run on the driver before any task (librdkafka is asked which `kafka.*` keys it
knows: `oncelog.client.librdkafka_keys`), and every error names the option as Spark's
documentation spells it. An option the connector does not know is refused with the list
of the ones it knows (a misspelt option is never ignored); `kafka.*` options go to the
client, as in Spark, and one the client does not know is warned about and left out, as
Spark's Java client does.
"""

from __future__ import annotations

import difflib
import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from oncelog.client.librdkafka_keys import InvalidSetting, check_settings
from oncelog.client.security import ClientSecurityError, librdkafka_config

log = logging.getLogger(__name__)

LATEST = -1  # in offset JSON, as in Spark: -1 is the latest offset, -2 the earliest
EARLIEST = -2

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"

EXACTLY_ONCE = "exactly_once"
AT_LEAST_ONCE = "at_least_once"

DEFAULT_PROGRESS_TOPIC = "__oncelog_sink_progress"
DEFAULT_PROGRESS_PARTITIONS = 64
DEFAULT_POLL_TIMEOUT_MS = 120_000
DEFAULT_FETCH_OFFSET_RETRIES = 3
DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS = 1_000  # Spark's code; its guide says 10
DEFAULT_MAX_TRIGGER_DELAY = "15m"
# Small ranges of a batch share a Spark task up to this many offsets together (offsets.
# combine_ranges): at the log tail one task a batch instead of one per partition, while a
# batch of thousands of offsets still gets a task per partition.
DEFAULT_COMBINE_RANGES_UP_TO = 1000
DEFAULT_CLIENT_TIMEOUT_MS = 30_000  # cluster calls; kafka.socket.timeout.ms overrides it

# The options of Spark's Kafka source, spelt as Spark documents them, then the source's own.
SOURCE_OPTIONS = (
    "assign",
    "subscribe",
    "subscribePattern",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "startingOffsets",
    "startingOffsetsByTimestampStrategy",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "endingOffsets",
    "failOnDataLoss",
    "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "minPartitions",
    "maxRecordsPerPartition",
    "groupIdPrefix",
    "includeHeaders",
    "combineRangesUpTo",
)
# Spark's Kafka sink options, then the exactly-once sink's own.
SINK_OPTIONS = (
    "topic",
    "includeHeaders",
    "delivery.guarantee",
    "sink.id",
    "write.id",
    "sink.progress.topic",
    "sink.progress.partitions",
)
# Set by Spark itself on some queries; they are not options of the connector.
_SPARK_OWN = ("path", "checkpointLocation", "queryName")

_STRATEGIES = ("subscribe", "subscribePattern", "assign")
_ENDING = ("endingTimestamp", "endingOffsetsByTimestamp", "endingOffsets")
_TRIGGER_ONLY = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")

# kafka.* settings Spark's source refuses, and why; then those this connector owns.
_SOURCE_REFUSED_KAFKA = {
    "auto.offset.reset": (
        "set the source option startingOffsets to 'earliest' or 'latest' instead: the "
        "connector decides which offsets each batch reads, so that no data is missed when "
        "topics or partitions appear"
    ),
    "key.deserializer": "keys are always read as bytes; deserialize them with DataFrame operations",
    "value.deserializer": (
        "values are always read as bytes; deserialize them with DataFrame operations"
    ),
    "enable.auto.commit": "the source commits no offsets to Kafka: the checkpoint keeps them",
    "interceptor.classes": "interceptors could change the records the source returns",
    "enable.partition.eof": "the connector uses it to find the end of a range",
    "enable.auto.offset.store": "the source stores no offsets in Kafka",
}
_SINK_REFUSED_KAFKA = {
    "key.serializer": "keys are written as bytes (a string key is encoded as UTF-8)",
    "value.serializer": "values are written as bytes (a string value is encoded as UTF-8)",
}
_EXACTLY_ONCE_OWNED_KAFKA = ("transactional.id", "enable.idempotence", "acks")

# librdkafka warns when a client gets a setting of the other kind; each client gets its own.
_CONSUMER_ONLY = frozenset(
    {
        "isolation.level",
        "auto.offset.reset",
        "fetch.min.bytes",
        "fetch.max.bytes",
        "max.partition.fetch.bytes",
        "fetch.wait.max.ms",
        "fetch.queue.backoff.ms",
        "fetch.error.backoff.ms",
        "queued.min.messages",
        "queued.max.messages.kbytes",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "max.poll.interval.ms",
        "group.id",
        "group.instance.id",
        "enable.auto.commit",
        "auto.commit.interval.ms",
        "enable.auto.offset.store",
        "enable.partition.eof",
        "check.crcs",
        "partition.assignment.strategy",
    }
)
_PRODUCER_ONLY = frozenset(
    {
        "transaction.timeout.ms",
        "transactional.id",
        "enable.idempotence",
        "acks",
        "request.required.acks",
        "linger.ms",
        "queue.buffering.max.ms",
        "batch.size",
        "batch.num.messages",
        "compression.type",
        "compression.codec",
        "compression.level",
        "queue.buffering.max.messages",
        "queue.buffering.max.kbytes",
        "delivery.timeout.ms",
        "message.timeout.ms",
        "request.timeout.ms",
        "retries",
        "message.send.max.retries",
        "max.in.flight.requests.per.connection",
        "max.in.flight",
        "partitioner",
        "sticky.partitioning.linger.ms",
        "delivery.report.only.error",
    }
)


class OptionError(ValueError):
    """An option is missing, unknown, badly written, or contradicts another."""


# -- reading raw options -------------------------------------------------------------------


class _Raw:
    """The options as Spark hands them over (lower-cased keys, string values), looked up by
    the names Spark documents so that every message can name the option as documented."""

    def __init__(self, options: Mapping[str, Any], known: Iterable[str], what: str) -> None:
        self.values = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
        self.spelling = {name.lower(): name for name in known}
        self.what = what

    def has(self, name: str) -> bool:
        return name.lower() in self.values

    def get(self, name: str) -> str | None:
        return self.values.get(name.lower())

    def refuse_unknown(self) -> None:
        own = {name.lower() for name in _SPARK_OWN}
        unknown = sorted(
            k
            for k in self.values
            if not k.startswith("kafka.") and k not in self.spelling and k not in own
        )
        if not unknown:
            return
        known = ", ".join(sorted(set(self.spelling.values()), key=str.lower))
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, self.spelling, n=1, cutoff=0.75)
            if close:
                hints.append(f"{key!r}: did you mean {self.spelling[close[0]]}?")
        raise OptionError(
            f"unknown option{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(repr(k) for k in unknown)} for the oncelog {self.what}"
            + (f" ({'; '.join(hints)})" if hints else "")
            + f". Known options: {known}, and kafka.* for the client."
        )

    def boolean(self, name: str, default: bool) -> bool:
        raw = self.get(name)
        if raw is None:
            return default
        value = raw.strip().lower()
        if value in ("true", "false"):
            return value == "true"
        raise OptionError(f"option {name}={raw!r}: expected true or false")

    def integer(self, name: str, default: int | None, positive: bool = False) -> int | None:
        raw = self.get(name)
        if raw is None:
            return default
        try:
            value = int(raw.strip())
        except ValueError:
            raise OptionError(f"option {name}={raw!r}: expected an integer") from None
        if positive and value <= 0:
            raise OptionError(f"option {name}={raw!r}: {name} must be positive")
        if value < 0:
            raise OptionError(f"option {name}={raw!r}: must not be negative")
        return value


_DURATION = re.compile(r"\s*(-?\d+)\s*([a-z]*)\s*")
_DURATION_MS = {
    "": 1,
    "ms": 1,
    "s": 1000,
    "sec": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
}


def duration_ms(name: str, raw: str) -> int:
    """A time string as Spark reads it (`Utils.timeStringAsMs`): a number and an optional
    unit (ms, s, m or min, h, d); no unit means milliseconds."""
    match = _DURATION.fullmatch(raw.lower())
    if match is None or match.group(2) not in _DURATION_MS:
        raise OptionError(
            f"option {name}={raw!r}: expected a time such as 500ms, 30s, 15m, 1h or 1d"
        )
    value = int(match.group(1)) * _DURATION_MS[match.group(2)]
    if value < 0:
        raise OptionError(f"option {name}={raw!r}: must not be negative")
    return value


# -- the client configuration --------------------------------------------------------------


def kafka_config(raw: _Raw) -> dict[str, str]:
    """Every `kafka.*` option, prefix removed: the client configuration, its security
    settings (`kafka.security.protocol`, `kafka.sasl.*`, `kafka.ssl.*`, in Kafka's Java
    names as Spark's Kafka connector takes them, or librdkafka's) in librdkafka's names."""
    config = {k[len("kafka.") :]: v for k, v in raw.values.items() if k.startswith("kafka.")}
    if "bootstrap.servers" not in config:
        raise OptionError(
            "option kafka.bootstrap.servers must be specified for configuring the Kafka client"
        )
    try:
        return librdkafka_config(config)
    except ClientSecurityError as exc:
        raise OptionError(f"kafka.* security options: {exc}") from None


def _known_to_the_client(client: Mapping[str, str]) -> dict[str, str]:
    """``client`` without the keys librdkafka does not know, each warned about, as Spark's
    Java client warns about one and goes on (librdkafka would refuse the whole
    configuration at the first cluster call); OptionError for a value it refuses. Asked
    after the connector's own checks, whose messages say more than librdkafka's."""
    try:
        checked = check_settings(client)
    except InvalidSetting as exc:
        option = "kafka.* options" if exc.key is None else f"option kafka.{exc.key}"
        raise OptionError(f"{option}: {exc.reason}") from None
    for key in checked.unknown:
        log.warning(
            "Kafka option 'kafka.%s' is not a setting of the Kafka client (librdkafka): ignored",
            key,
        )
    return checked.known


def _refuse_kafka(config: Mapping[str, str], refused: Mapping[str, str]) -> None:
    for key in sorted(config):
        if key in refused:
            raise OptionError(f"Kafka option 'kafka.{key}' is not supported: {refused[key]}")


def consumer_config(config: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in config.items() if k not in _PRODUCER_ONLY}


def producer_config(config: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in config.items() if k not in _CONSUMER_ONLY}


def admin_config(config: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in config.items() if k not in _CONSUMER_ONLY and k not in _PRODUCER_ONLY}


def client_timeout_s(config: Mapping[str, str]) -> float:
    """How long one cluster call may take: `kafka.socket.timeout.ms` when given."""
    raw = config.get("socket.timeout.ms")
    try:
        return (int(raw) if raw is not None else DEFAULT_CLIENT_TIMEOUT_MS) / 1000
    except ValueError:
        raise OptionError(f"option kafka.socket.timeout.ms={raw!r}: expected an integer") from None


# -- where reading starts and ends ---------------------------------------------------------

TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True)
class Earliest:
    """The log start offset of every partition."""


@dataclass(frozen=True)
class Latest:
    """The last stable offset (read_committed) or high watermark of every partition."""


@dataclass(frozen=True)
class SpecificOffsets:
    """An offset per partition; LATEST (-1) and EARLIEST (-2) stand for those offsets."""

    option: str
    offsets: Mapping[TopicPartitionKey, int]


@dataclass(frozen=True)
class SpecificTimestamps:
    """A timestamp per partition: the first offset whose timestamp is at or after it."""

    option: str
    timestamps: Mapping[TopicPartitionKey, int]
    latest_when_none: bool  # startingOffsetsByTimestampStrategy=latest (or an ending option)


@dataclass(frozen=True)
class GlobalTimestamp:
    """One timestamp for every partition (startingTimestamp, endingTimestamp)."""

    option: str
    timestamp: int
    latest_when_none: bool


OffsetLimit = Earliest | Latest | SpecificOffsets | SpecificTimestamps | GlobalTimestamp

_OFFSETS_EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
_TIMESTAMPS_EXAMPLE = '{"topicA":{"0":1000,"1":1000},"topicB":{"0":2000}}'
_ASSIGN_EXAMPLE = '{"topicA":[0,1],"topicB":[2,4]}'


def _partition_json(name: str, raw: str, example: str) -> dict[TopicPartitionKey, int]:
    """`{"topic": {"0": n}}` as Spark's JsonUtils reads it."""
    try:
        decoded = json.loads(raw)
        if not isinstance(decoded, dict):
            raise TypeError
        out: dict[TopicPartitionKey, int] = {}
        for topic, per in decoded.items():
            if not isinstance(per, dict):
                raise TypeError
            for partition, value in per.items():
                if isinstance(value, bool) or not isinstance(value, int):
                    raise TypeError
                out[(str(topic), int(partition))] = value
    except (json.JSONDecodeError, TypeError, ValueError):
        raise OptionError(f"option {name}: expected e.g. {example}, got {raw}") from None
    return out


def _parse_limit(
    raw: _Raw, timestamp_key: str, by_timestamp_key: str, offsets_key: str, default: OffsetLimit
) -> OffsetLimit:
    """One end of the range, by the preference Spark gives the three options: a global
    timestamp, then timestamps per partition, then offsets."""
    starting = offsets_key == "startingOffsets"
    strategy = (raw.get("startingOffsetsByTimestampStrategy") or "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(
            f"option startingOffsetsByTimestampStrategy={strategy!r}: 'error' or 'latest'"
        )
    latest_when_none = strategy == "latest" or not starting
    if raw.has(timestamp_key):
        text = (raw.get(timestamp_key) or "").strip()
        try:
            return GlobalTimestamp(timestamp_key, int(text), latest_when_none)
        except ValueError:
            raise OptionError(
                f"option {timestamp_key}: expected a single long value, got {text}"
            ) from None
    if raw.has(by_timestamp_key):
        text = (raw.get(by_timestamp_key) or "").strip()
        return SpecificTimestamps(
            by_timestamp_key,
            _partition_json(by_timestamp_key, text, _TIMESTAMPS_EXAMPLE),
            latest_when_none,
        )
    given = raw.get(offsets_key)
    if given is None:
        return default
    text = given.strip()
    if text.lower() == "latest":
        return Latest()
    if text.lower() == "earliest":
        return Earliest()
    offsets = _partition_json(offsets_key, text, _OFFSETS_EXAMPLE)
    for tp, offset in offsets.items():
        if offset < EARLIEST:
            raise OptionError(f"option {offsets_key}: offset {offset} for {tp[0]}-{tp[1]}")
    return SpecificOffsets(offsets_key, offsets)


def _check_batch_limits(start: OffsetLimit, end: OffsetLimit) -> None:
    """What Spark refuses in a batch query (`validateBatchOptions`, `checkOffsetLimitValidity`)."""
    if isinstance(start, Latest):
        raise OptionError(
            "option startingOffsets: starting offset can't be latest for batch queries"
        )
    if isinstance(start, SpecificOffsets):
        for (topic, partition), offset in sorted(start.offsets.items()):
            if offset == LATEST:
                raise OptionError(
                    f"option startingOffsets for {topic}-{partition} can't be latest (-1) "
                    "for batch queries"
                )
    if isinstance(end, Earliest):
        raise OptionError("option endingOffsets: ending offset can't be earliest for batch queries")
    if isinstance(end, SpecificOffsets):
        for (topic, partition), offset in sorted(end.offsets.items()):
            if offset == EARLIEST:
                raise OptionError(
                    f"option endingOffsets for {topic}-{partition} can't be earliest (-2) "
                    "for batch queries"
                )
    pairs: list[tuple[str, str, Mapping[TopicPartitionKey, int], Mapping[TopicPartitionKey, int]]]
    pairs = []
    if isinstance(start, SpecificOffsets) and isinstance(end, SpecificOffsets):
        pairs.append((start.option, end.option, start.offsets, end.offsets))
    if isinstance(start, SpecificTimestamps) and isinstance(end, SpecificTimestamps):
        pairs.append((start.option, end.option, start.timestamps, end.timestamps))
    for start_name, end_name, begin, finish in pairs:
        if set(begin) != set(finish):
            raise OptionError(
                f"options {start_name} and {end_name} name different partitions: "
                f"{sorted(begin)} and {sorted(finish)}"
            )
        for tp in sorted(begin):
            if begin[tp] >= 0 and finish[tp] >= 0 and begin[tp] > finish[tp]:
                raise OptionError(
                    f"{start_name} {begin[tp]} is after {end_name} {finish[tp]} for {tp[0]}-{tp[1]}"
                )


# -- which partitions ----------------------------------------------------------------------


@dataclass(frozen=True)
class Subscription:
    """Which topic-partitions to read: exactly one of the three strategies of Spark's source.
    A pattern matches topics as Spark's does (a Java regular expression found anywhere in
    the name, `Matcher.find`); topics starting with `__` are never matched by a pattern."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assign: Mapping[str, tuple[int, ...]] | None = None

    def matches(self, topic: str) -> bool:
        if self.assign is not None:
            return topic in self.assign
        if self.pattern is not None:
            return not topic.startswith("__") and re.search(self.pattern, topic) is not None
        return topic in self.topics

    def describe(self) -> str:
        if self.assign is not None:
            return f"assign={json.dumps({t: list(p) for t, p in self.assign.items()})}"
        if self.pattern is not None:
            return f"subscribePattern={self.pattern}"
        return f"subscribe={','.join(self.topics)}"


def parse_subscription(raw: _Raw) -> Subscription:
    given = [name for name in _STRATEGIES if raw.has(name)]
    if not given:
        raise OptionError(
            "one of the options subscribe, subscribePattern or assign must be specified "
            "for the oncelog source"
        )
    if len(given) > 1:
        raise OptionError(
            "only one of the options subscribe, subscribePattern or assign can be specified "
            f"for the oncelog source (got {', '.join(given)})"
        )
    kind = given[0]
    value = raw.get(kind) or ""
    if kind == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise OptionError(f"option subscribe={value!r}: no topics to subscribe to")
        return Subscription(topics=topics)
    if kind == "subscribePattern":
        pattern = value.strip()
        if not pattern:
            raise OptionError(f"option subscribePattern={value!r}: the pattern is empty")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"option subscribePattern={value!r}: {exc}") from None
        return Subscription(pattern=pattern)
    try:
        decoded = json.loads(value)
        if not isinstance(decoded, dict) or not decoded:
            raise TypeError
        assign = {}
        for topic, partitions in decoded.items():
            if not isinstance(partitions, list) or not all(
                isinstance(p, int) and not isinstance(p, bool) for p in partitions
            ):
                raise TypeError
            assign[str(topic)] = tuple(sorted(set(partitions)))
    except (json.JSONDecodeError, TypeError):
        raise OptionError(
            f"option assign: no topic-partitions to assign; expected e.g. {_ASSIGN_EXAMPLE}, "
            f"got {value}"
        ) from None
    return Subscription(assign=assign)


# -- the source ----------------------------------------------------------------------------


# librdkafka's defaults suit a consumer that waits for new data; a range reader never does.
# fetch.queue.backoff.ms (1000 by default) idles the fetcher for a second once
# queued.min.messages are queued. fetch.wait.max.ms (500) is how long the broker holds a
# fetch at the end of the log: a range below the LSO never waits for new data, but the
# client has sent the next fetch by the time a range's last record is read, and the kept
# consumer's next range (another partition: the next range of a task, or of the worker's
# next task) waits for that held fetch to come back before its own is sent: with 10 ms such
# a range took 11.7 ms, with 1 ms 2.0 (medians, bench/tail_ranges.py, load 2.4-2.7).
FETCH_DEFAULTS = {
    "fetch.queue.backoff.ms": "10",
    "fetch.wait.max.ms": "1",
    "max.partition.fetch.bytes": str(8 << 20),
    "queued.min.messages": "200000",
}
# A batch read's ranges are large and end at the LSO or below: once the fetcher reaches the
# end of the log, while the reader still drains what is queued (up to queued.min.messages
# plus a fetch), it asks again every fetch.wait.max.ms, and each empty fetch costs the
# broker. With 1 ms, three range readers of 1,000,000 records cost the broker 0.39-0.47 s of
# CPU a read against 0.27-0.35 s with 10 ms (bench/spark.py's read, 06:30 UTC, load 5.5): CPU
# that the two cores of a read then lack. A batch task pays the held fetch at most once,
# when its worker's kept consumer starts its next range: 10 ms at most.
BATCH_FETCH_DEFAULTS = {**FETCH_DEFAULTS, "fetch.wait.max.ms": "10"}


@dataclass(frozen=True)
class ReadOptions:
    """The source's options, parsed and checked."""

    client: dict[str, str]  # kafka.*, prefix removed, without a group.id
    subscription: Subscription
    starting: OffsetLimit
    ending: OffsetLimit  # batch queries only
    isolation_level: str
    fail_on_data_loss: bool
    poll_timeout_ms: int
    fetch_offset_retries: int
    fetch_offset_retry_interval_ms: int
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    min_partitions: int | None
    max_records_per_partition: int | None
    combine_ranges_up_to: int  # small ranges share a task up to this many offsets; 0: never
    group_id: str | None  # kafka.group.id: the executors' consumers use it as it is
    group_id_prefix: str | None
    include_headers: bool
    # the range consumers' fetch settings (`kafka.*` options override them): a batch
    # read's or a streaming read's
    fetch_defaults: Mapping[str, str]
    # a batch query's ranges may be read by Fetch requests of its own (`fetch`); a streaming
    # query's small ranges at the tail are read through its kept consumers
    own_fetch: bool = False

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == READ_COMMITTED


def parse_read_options(options: Mapping[str, Any], streaming: bool | None) -> ReadOptions:
    """The source's options, or an OptionError naming the first bad one. `streaming=None`
    checks what holds for both kinds of query (before Spark says which one it is)."""
    raw = _Raw(options, SOURCE_OPTIONS, "source")
    raw.refuse_unknown()
    subscription = parse_subscription(raw)
    client = kafka_config(raw)
    _refuse_kafka(client, _SOURCE_REFUSED_KAFKA)
    group_id = client.pop("group.id", None)
    if group_id is not None:
        log.warning(
            "Kafka option 'kafka.group.id' is set: the source's consumers use group %r as it "
            "is (they never join the group nor commit offsets; the group matters for "
            "authorization only)%s",
            group_id,
            "; option groupIdPrefix is ignored" if raw.has("groupIdPrefix") else "",
        )
    level = client.get("isolation.level", READ_COMMITTED).strip().lower()
    if level not in (READ_COMMITTED, READ_UNCOMMITTED):
        raise OptionError(
            f"option kafka.isolation.level={level!r}: read_committed or read_uncommitted"
        )
    client["isolation.level"] = level
    if streaming:
        given = [name for name in _ENDING if raw.has(name)]
        if given:
            raise OptionError(
                f"option {given[0]}: ending offsets are not valid in streaming queries"
            )
    elif streaming is False:
        for name in _TRIGGER_ONLY:
            if raw.has(name):
                log.warning("option %s is ignored in batch queries", name)
    starting = _parse_limit(
        raw,
        "startingTimestamp",
        "startingOffsetsByTimestamp",
        "startingOffsets",
        Latest() if streaming else Earliest(),
    )
    ending = _parse_limit(
        raw, "endingTimestamp", "endingOffsetsByTimestamp", "endingOffsets", Latest()
    )
    if streaming is False:
        _check_batch_limits(starting, ending)
    max_per_trigger = raw.integer("maxOffsetsPerTrigger", None, positive=True)
    min_per_trigger = raw.integer("minOffsetsPerTrigger", None, positive=True)
    if (
        max_per_trigger is not None
        and min_per_trigger is not None
        and min_per_trigger > max_per_trigger
    ):
        raise OptionError(
            f"option minOffsetsPerTrigger ({min_per_trigger}) is higher than "
            f"maxOffsetsPerTrigger ({max_per_trigger})"
        )
    split_by = [name for name in ("minPartitions", "maxRecordsPerPartition") if raw.get(name)]
    combine = raw.integer("combineRangesUpTo", None)
    if split_by and combine:
        raise OptionError(
            f"option combineRangesUpTo cannot be combined with {' and '.join(split_by)}, "
            "which ask for Spark's plan of a task per range (set combineRangesUpTo=0 or leave "
            "it out)"
        )
    delay = raw.get("maxTriggerDelay")
    client_timeout_s(client)  # a bad kafka.socket.timeout.ms fails here, not in a task
    client = _known_to_the_client(client)
    return ReadOptions(
        client=client,
        subscription=subscription,
        starting=starting,
        ending=ending,
        isolation_level=level,
        fail_on_data_loss=raw.boolean("failOnDataLoss", True),
        poll_timeout_ms=_required(
            raw.integer("kafkaConsumer.pollTimeoutMs", DEFAULT_POLL_TIMEOUT_MS, positive=True)
        ),
        fetch_offset_retries=_required(
            raw.integer("fetchOffset.numRetries", DEFAULT_FETCH_OFFSET_RETRIES, positive=True)
        ),
        fetch_offset_retry_interval_ms=_required(
            raw.integer("fetchOffset.retryIntervalMs", DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS)
        ),
        max_offsets_per_trigger=max_per_trigger,
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=duration_ms(
            "maxTriggerDelay", delay if delay is not None else DEFAULT_MAX_TRIGGER_DELAY
        ),
        min_partitions=raw.integer("minPartitions", None, positive=True),
        max_records_per_partition=raw.integer("maxRecordsPerPartition", None, positive=True),
        combine_ranges_up_to=(
            combine if combine is not None else (0 if split_by else DEFAULT_COMBINE_RANGES_UP_TO)
        ),
        group_id=group_id,
        group_id_prefix=raw.get("groupIdPrefix"),
        include_headers=raw.boolean("includeHeaders", False),
        # streaming=None (`schema()`, which reads nothing) takes the streaming ones only
        # because the field needs a value
        fetch_defaults=BATCH_FETCH_DEFAULTS if streaming is False else FETCH_DEFAULTS,
        own_fetch=streaming is False,
    )


def _required(value: int | None) -> int:
    assert value is not None  # the option has a default
    return value


def include_headers(options: Mapping[str, Any]) -> bool:
    """`includeHeaders` alone, for the schema (asked before it is known whether the query
    is a batch or a stream)."""
    return _Raw(options, SOURCE_OPTIONS, "source").boolean("includeHeaders", False)


# -- the sink ------------------------------------------------------------------------------

_SINK_ID = re.compile(r"[A-Za-z0-9._-]{1,200}")


@dataclass(frozen=True)
class WriteOptions:
    """The sink's options, parsed and checked."""

    client: dict[str, str]
    topic: str | None
    guarantee: str
    sink_id: str | None
    write_id: int
    progress_topic: str
    progress_partitions: int

    @property
    def exactly_once(self) -> bool:
        return self.guarantee == EXACTLY_ONCE

    @property
    def progress_group(self) -> str:
        return progress_group(str(self.sink_id))


def progress_group(sink_id: str) -> str:
    """The consumer group whose offsets are the exactly-once sink's progress."""
    return f"oncelog-sink-{sink_id}"


def parse_write_options(options: Mapping[str, Any], extra: Iterable[str] = ()) -> WriteOptions:
    """The sink's options, or an OptionError naming the first bad one. `extra` names options
    a subclass of the data source reads itself (the testing one's fault injection)."""
    raw = _Raw(options, (*SINK_OPTIONS, *extra), "sink")
    raw.refuse_unknown()
    client = kafka_config(raw)
    _refuse_kafka(client, _SINK_REFUSED_KAFKA)
    guarantee = (raw.get("delivery.guarantee") or EXACTLY_ONCE).strip().lower()
    if guarantee not in (EXACTLY_ONCE, AT_LEAST_ONCE):
        raise OptionError(f"option delivery.guarantee={guarantee!r}: exactly_once or at_least_once")
    sink_id = raw.get("sink.id")
    if guarantee == EXACTLY_ONCE:
        if not sink_id:
            raise OptionError(
                "option sink.id is required with delivery.guarantee=exactly_once: a "
                "stable name for this sink, the same across restarts of the query"
            )
        if not _SINK_ID.fullmatch(sink_id):
            raise OptionError(f"option sink.id={sink_id!r}: letters, digits, '.', '_' and '-' only")
        owned = [k for k in _EXACTLY_ONCE_OWNED_KAFKA if k in client]
        if owned:
            raise OptionError(
                f"options {', '.join('kafka.' + k for k in owned)} are set by the "
                "exactly-once sink and cannot be given"
            )
    raw.boolean("includeHeaders", False)  # accepted as Spark's sink does; headers are written
    # whenever the data has a headers column
    client_timeout_s(client)
    client = _known_to_the_client(client)
    topic = (raw.get("topic") or "").strip() or None
    return WriteOptions(
        client=client,
        topic=topic,
        guarantee=guarantee,
        sink_id=sink_id or None,
        write_id=_required(raw.integer("write.id", 0)),
        progress_topic=raw.get("sink.progress.topic") or DEFAULT_PROGRESS_TOPIC,
        progress_partitions=_required(
            raw.integer("sink.progress.partitions", DEFAULT_PROGRESS_PARTITIONS, positive=True)
        ),
    )
