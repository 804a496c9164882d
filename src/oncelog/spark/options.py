"""Options of the `oncelog` Spark data source, parsed once and checked early.

The names are those of Spark's Kafka source and sink so a job can switch formats by
changing one word. Spark hands them over lower-cased and as strings; every value is
validated here, on the driver, so a typo fails the query before any task runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from oncelog.client.security import ClientSecurityError, librdkafka_config

LATEST = -1
EARLIEST = -2

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"

EXACTLY_ONCE = "exactly_once"
AT_LEAST_ONCE = "at_least_once"

DEFAULT_PROGRESS_TOPIC = "__oncelog_sink_progress"
DEFAULT_PROGRESS_PARTITIONS = 64
DEFAULT_POLL_TIMEOUT_MS = 120_000
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000

# Client settings the connector owns: a user value would silently break it.
_READER_OWNED = {
    "group.id",
    "enable.auto.commit",
    "auto.offset.reset",
    "enable.partition.eof",
    "enable.auto.offset.store",
}
_WRITER_OWNED = {"transactional.id", "enable.idempotence", "acks"}
# librdkafka warns when a client gets a setting of the other kind; drop them quietly.
_CONSUMER_ONLY = {
    "isolation.level",
    "auto.offset.reset",
    "fetch.min.bytes",
    "fetch.max.bytes",
    "max.partition.fetch.bytes",
    "fetch.wait.max.ms",
    "session.timeout.ms",
    "max.poll.interval.ms",
    "group.id",
    "enable.auto.commit",
    "check.crcs",
}
_PRODUCER_ONLY = {
    "transaction.timeout.ms",
    "linger.ms",
    "batch.size",
    "batch.num.messages",
    "compression.type",
    "compression.codec",
    "queue.buffering.max.messages",
    "queue.buffering.max.kbytes",
    "delivery.timeout.ms",
    "message.timeout.ms",
    "retries",
    "max.in.flight.requests.per.connection",
}


class OptionError(ValueError):
    """An option is missing, unknown in value, or contradicts another."""


def _bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    raw = options.get(key)
    if raw is None:
        return default
    value = str(raw).strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise OptionError(f"option {key}={raw!r}: expected true or false")


def _int(options: Mapping[str, str], key: str, default: int | None, minimum: int = 0) -> int | None:
    raw = options.get(key)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"option {key}={raw!r}: expected an integer") from None
    if value < minimum:
        raise OptionError(f"option {key}={raw!r}: must be at least {minimum}")
    return value


def kafka_config(options: Mapping[str, Any]) -> dict[str, str]:
    """Every `kafka.*` option, prefix removed: the client configuration, its security
    settings (`kafka.security.protocol`, `kafka.sasl.*`, `kafka.ssl.*`, in Kafka's Java
    names as Spark's Kafka connector takes them, or librdkafka's) in librdkafka's names."""
    config = {
        k[len("kafka.") :]: str(v) for k, v in options.items() if k.lower().startswith("kafka.")
    }
    if "bootstrap.servers" not in config:
        raise OptionError("option kafka.bootstrap.servers is required")
    try:
        return librdkafka_config(config)
    except ClientSecurityError as exc:
        raise OptionError(f"kafka.* security options: {exc}") from None


ClientConfig = dict[str, str | int | float | bool]  # what confluent-kafka's clients take


def consumer_config(config: Mapping[str, str]) -> ClientConfig:
    return {k: v for k, v in config.items() if k not in _PRODUCER_ONLY}


def producer_config(config: Mapping[str, str]) -> ClientConfig:
    return {k: v for k, v in config.items() if k not in _CONSUMER_ONLY}


def admin_config(config: Mapping[str, str]) -> ClientConfig:
    return {k: v for k, v in config.items() if k not in _CONSUMER_ONLY and k not in _PRODUCER_ONLY}


# --- offsets as written by users: "earliest", "latest" or JSON -------------------------

OffsetSpec = str | dict[str, dict[int, int]]  # "earliest" | "latest" | {topic: {partition: offset}}


def parse_offset_spec(
    key: str, raw: str | None, default: str, allow_earliest: bool = True
) -> OffsetSpec:
    if raw is None:
        return default
    text = str(raw).strip()
    if text.lower() == "latest":
        return "latest"
    if text.lower() == "earliest":
        if not allow_earliest:
            raise OptionError(f"option {key}: earliest is not allowed here")
        return "earliest"
    try:
        decoded = json.loads(text)
    except json.JSONDecodeError:
        raise OptionError(
            f'option {key}={raw!r}: expected earliest, latest or JSON {{"topic": {{"0": offset}}}}'
        ) from None
    if not isinstance(decoded, dict):
        raise OptionError(f"option {key}: the JSON must be an object of topics")
    spec: dict[str, dict[int, int]] = {}
    for topic, partitions in decoded.items():
        if not isinstance(partitions, dict):
            raise OptionError(f"option {key}: topic {topic!r} needs an object of partitions")
        per: dict[int, int] = {}
        for p, offset in partitions.items():
            try:
                per[int(p)] = int(offset)
            except (TypeError, ValueError):
                raise OptionError(
                    f"option {key}: bad partition or offset {p!r}: {offset!r}"
                ) from None
            if per[int(p)] < EARLIEST or (per[int(p)] == EARLIEST and not allow_earliest):
                raise OptionError(f"option {key}: bad offset {offset!r} for {topic}-{p}")
        spec[topic] = per
    return spec


@dataclass(frozen=True)
class Subscription:
    """Which topic-partitions to read: exactly one of the three Kafka-source options."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None

    def matches(self, topic: str) -> bool:
        if self.assign is not None:
            return topic in self.assign
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics


def parse_subscription(options: Mapping[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if options.get(k)]
    if len(given) != 1:
        raise OptionError(
            "exactly one of the options subscribe, subscribePattern or assign is "
            f"required (got {', '.join(given) or 'none'})"
        )
    kind = given[0]
    raw = str(options[kind])
    if kind == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise OptionError("option subscribe: no topic named")
        return Subscription(topics=topics)
    if kind == "subscribepattern":
        try:
            re.compile(raw)
        except re.error as exc:
            raise OptionError(f"option subscribePattern={raw!r}: {exc}") from None
        return Subscription(pattern=raw)
    try:
        decoded = json.loads(raw)
        assign = {str(t): tuple(sorted(int(p) for p in ps)) for t, ps in decoded.items()}
    except (json.JSONDecodeError, AttributeError, TypeError, ValueError):
        raise OptionError(f'option assign={raw!r}: expected JSON {{"topic": [0, 1]}}') from None
    return Subscription(assign=assign)


@dataclass(frozen=True)
class ReadOptions:
    """The source's options, parsed and checked."""

    client: dict[str, str]
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    isolation_level: str
    fail_on_data_loss: bool
    max_offsets_per_trigger: int | None
    poll_timeout_ms: int

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == READ_COMMITTED


def parse_read_options(options: Mapping[str, str], streaming: bool) -> ReadOptions:
    client = kafka_config(options)
    owned = sorted(k for k in client if k in _READER_OWNED)
    if owned:
        raise OptionError(
            f"options {', '.join('kafka.' + k for k in owned)} are set by the "
            "connector and cannot be given"
        )
    level = str(options.get("kafka.isolation.level", READ_COMMITTED)).strip().lower()
    if level not in (READ_COMMITTED, READ_UNCOMMITTED):
        raise OptionError(
            f"option kafka.isolation.level={level!r}: read_committed or read_uncommitted"
        )
    if streaming and options.get("endingoffsets") is not None:
        raise OptionError("option endingOffsets is for batch queries only")
    return ReadOptions(
        client=client,
        subscription=parse_subscription(options),
        starting=parse_offset_spec(
            "startingOffsets", options.get("startingoffsets"), "latest" if streaming else "earliest"
        ),
        ending=parse_offset_spec(
            "endingOffsets", options.get("endingoffsets"), "latest", allow_earliest=False
        ),
        isolation_level=level,
        fail_on_data_loss=_bool(options, "failondataloss", True),
        max_offsets_per_trigger=_int(options, "maxoffsetspertrigger", None, minimum=1),
        poll_timeout_ms=_int(options, "kafkaconsumer.polltimeoutms", DEFAULT_POLL_TIMEOUT_MS, 1)
        or DEFAULT_POLL_TIMEOUT_MS,
    )


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
    fail_after: int | None = field(default=None)  # tests only: raise on attempt 0 after N records

    @property
    def exactly_once(self) -> bool:
        return self.guarantee == EXACTLY_ONCE

    @property
    def progress_group(self) -> str:
        return f"oncelog-sink-{self.sink_id}"

    def transactional_id(self, task: int) -> str:
        return f"oncelog-sink-{self.sink_id}-{task}"


_SINK_ID = re.compile(r"[A-Za-z0-9._-]{1,200}")


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    client = kafka_config(options)
    guarantee = str(options.get("delivery.guarantee", EXACTLY_ONCE)).strip().lower()
    if guarantee not in (EXACTLY_ONCE, AT_LEAST_ONCE):
        raise OptionError(f"option delivery.guarantee={guarantee!r}: exactly_once or at_least_once")
    sink_id = options.get("sink.id")
    if guarantee == EXACTLY_ONCE:
        if not sink_id:
            raise OptionError(
                "option sink.id is required with delivery.guarantee=exactly_once: a "
                "stable name for this sink, the same across restarts of the query"
            )
        if not _SINK_ID.fullmatch(str(sink_id)):
            raise OptionError(f"option sink.id={sink_id!r}: letters, digits, '.', '_' and '-' only")
        owned = sorted(k for k in client if k in _WRITER_OWNED)
        if owned:
            raise OptionError(
                f"options {', '.join('kafka.' + k for k in owned)} are set by the "
                "exactly-once sink and cannot be given"
            )
    return WriteOptions(
        client=client,
        topic=options.get("topic") or None,
        guarantee=guarantee,
        sink_id=str(sink_id) if sink_id else None,
        write_id=_int(options, "write.id", 0) or 0,
        progress_topic=str(options.get("sink.progress.topic", DEFAULT_PROGRESS_TOPIC)),
        progress_partitions=_int(
            options, "sink.progress.partitions", DEFAULT_PROGRESS_PARTITIONS, 1
        )
        or DEFAULT_PROGRESS_PARTITIONS,
        fail_after=_int(options, "oncelog.test.fail_after", None),
    )
