import logging
from pathlib import Path

import pytest

from oncelog.broker.config import (
    BROKER_DEFS,
    LONG_MAX,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    ConfigType,
    TopicConfig,
    describe_broker,
    effective,
    parse_properties,
    to_log_config,
)

DEFAULT = ConfigSource.DEFAULT_CONFIG
STATIC = ConfigSource.STATIC_BROKER_CONFIG
TOPIC = ConfigSource.TOPIC_CONFIG


def cfg(**overrides: str) -> BrokerConfig:
    return BrokerConfig.load(None, {k.replace("_", "."): v for k, v in overrides.items()})


# --- defaults and resolution -------------------------------------------------------------


def test_defaults_follow_kafka() -> None:
    c = BrokerConfig.load()
    assert c.auto_create_topics_enable is True
    assert c.num_partitions == 1
    assert c.default_replication_factor == 1
    assert c.delete_topic_enable is True
    assert c.socket_request_max_bytes == 104_857_600
    assert c.message_max_bytes == 1_048_588
    assert c.log_segment_bytes == 1_073_741_824
    assert c.log_roll_ms == 168 * 3_600_000
    assert c.log_retention_ms == 168 * 3_600_000
    assert c.log_retention_bytes == -1
    assert c.log_retention_check_interval_ms == 300_000
    assert c.log_index_interval_bytes == 4096
    assert c.log_message_timestamp_type == "CreateTime"
    assert c.log_cleanup_policy == ["delete"]
    assert c.min_insync_replicas == 1
    assert c.offsets_topic_num_partitions == 50
    assert c.transaction_state_log_num_partitions == 50
    assert c.transaction_max_timeout_ms == 900_000
    assert c.transactional_id_expiration_ms == 604_800_000
    assert c.producer_id_expiration_ms == 86_400_000
    assert c.group_min_session_timeout_ms == 6000
    assert c.group_max_session_timeout_ms == 1_800_000
    assert c.log_dirs == ["/tmp/kafka-logs"]
    assert c.source("num.partitions") is DEFAULT


def test_flush_defaults_are_the_oncelog_deviation() -> None:
    c = BrokerConfig.load()
    assert c.log_flush_interval_messages == 1
    assert c.log_flush_interval_ms == LONG_MAX  # falls back to the scheduler interval
    assert cfg(log_flush_scheduler_interval_ms="1000").log_flush_interval_ms == 1000
    both = cfg(log_flush_interval_ms="50", log_flush_scheduler_interval_ms="1000")
    assert both.log_flush_interval_ms == 50
    doc = next(d.doc for d in BROKER_DEFS if d.key == "log.flush.interval.messages")
    assert "9223372036854775807" in doc and "acks=-1" in doc and "fsync" in doc
    assert cfg(log_flush_interval_messages=str(LONG_MAX)).log_flush_interval_messages == LONG_MAX


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({}, 168 * 3_600_000),
        ({"log.retention.hours": "1"}, 3_600_000),
        ({"log.retention.hours": "1", "log.retention.minutes": "2"}, 120_000),
        ({"log.retention.hours": "1", "log.retention.minutes": "2", "log.retention.ms": "7"}, 7),
        ({"log.retention.minutes": "2", "log.retention.ms": "7"}, 7),
        ({"log.retention.ms": "-1"}, -1),
        ({"log.retention.ms": "-5"}, -1),  # any negative means unlimited, shown as -1
        ({"log.retention.hours": "-1"}, -1),
        ({"log.retention.ms": "0"}, 0),
    ],
)
def test_retention_precedence(settings: dict[str, str], expected: int) -> None:
    assert BrokerConfig.load(None, settings).log_retention_ms == expected


def test_roll_precedence() -> None:
    assert cfg(log_roll_hours="2").log_roll_ms == 7_200_000
    assert cfg(log_roll_hours="2", log_roll_ms="500").log_roll_ms == 500


def test_log_dirs_prefers_log_dirs() -> None:
    assert cfg(log_dir="/d").log_dirs == ["/d"]
    assert cfg(log_dir="/d", log_dirs="/a, /b").log_dirs == ["/a", "/b"]


# --- properties files ------------------------------------------------------------------------


def test_parse_properties_syntax() -> None:
    text = (
        "# a comment\n"
        "! another comment\n"
        "\n"
        "   num.partitions = 3  \n"
        "log.dirs:/var/a,/var/b\n"
        "node.id 7\n"
        "key.with\\=equals=v\n"
        "empty=\n"
        "long.value = one, \\\n"
        "      two\n"
        "tab\\tescaped=\\u0041\n"
        "inline=has # no comment\n"
        "num.partitions=4\n"
    )
    props = parse_properties(text)
    assert props == {
        "num.partitions": "4",  # the later line wins
        "log.dirs": "/var/a,/var/b",
        "node.id": "7",
        "key.with=equals": "v",
        "empty": "",
        "long.value": "one, two",
        "tab\tescaped": "A",
        "inline": "has # no comment",
    }


def test_parse_properties_trailing_backslash_pairs_do_not_continue() -> None:
    assert parse_properties("a=x\\\\\nb=y") == {"a": "x\\", "b": "y"}
    assert parse_properties("a=x\\") == {"a": "x"}  # continuation at end of file


def test_load_file_and_overrides_beat_file(tmp_path: Path) -> None:
    f = tmp_path / "server.properties"
    f.write_text("num.partitions: 3\nauto.create.topics.enable = FALSE\nlog.retention.hours=1\n")
    c = BrokerConfig.load(f, {"num.partitions": "5"})
    assert c.num_partitions == 5
    assert c.auto_create_topics_enable is False
    assert c.log_retention_ms == 3_600_000
    assert c.source("num.partitions") is STATIC
    assert c.source("log.retention.hours") is STATIC
    assert c.source("log.retention.ms") is DEFAULT
    assert BrokerConfig.load(f).num_partitions == 3


def test_unknown_key_warns_and_is_kept(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="oncelog.config"):
        c = BrokerConfig.load(None, {"controller.quorum.voters": "1@x:9093", "num.partitions": "2"})
    assert c.num_partitions == 2
    assert c.get("controller.quorum.voters") == "1@x:9093"
    assert c.source("controller.quorum.voters") is STATIC
    assert [r.name for r in caplog.records] == ["oncelog.config"]
    assert "controller.quorum.voters" in caplog.text
    assert "controller.quorum.voters" not in {e.name for e in describe_broker(c)}
    with pytest.raises(KeyError):
        c.get("never.set")


# --- parsing and validators ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("num.partitions", "0", "at least 1"),
        ("num.partitions", "abc", "32-bit integer"),
        ("num.partitions", "1.5", "32-bit integer"),
        ("num.partitions", "1_000", "32-bit integer"),
        ("num.partitions", "2147483648", "32-bit integer"),
        ("log.retention.ms", "9223372036854775808", "64-bit integer"),
        ("log.segment.bytes", "1048575", "at least 1048576"),
        ("log.roll.hours", "0", "at least 1"),
        ("fetch.max.bytes", "1023", "at least 1024"),
        ("auto.create.topics.enable", "yes", "true or false"),
        ("log.message.timestamp.type", "createtime", "not one of CreateTime, LogAppendTime"),
        ("log.cleanup.policy", "delete,archive", "'archive' is not one of compact, delete"),
        ("compression.type", "brotli", "not one of"),
        ("log.cleaner.min.cleanable.ratio", "1.5", "between 0 and 1"),
        ("log.cleaner.min.cleanable.ratio", "NaN", "between 0 and 1"),
        ("log.cleaner.min.cleanable.ratio", "half", "a number"),
        ("log.flush.interval.messages", "0", "at least 1"),
        ("transaction.max.timeout.ms", "0", "at least 1"),
        ("node.id", "-1", "at least 0"),
    ],
)
def test_invalid_values_raise(key: str, value: str, reason: str) -> None:
    with pytest.raises(ConfigError) as e:
        BrokerConfig.load(None, {key: value})
    assert e.value.key == key
    assert e.value.value == value
    assert key in str(e.value) and repr(value) in str(e.value) and reason in str(e.value)


def test_values_are_trimmed_and_typed() -> None:
    c = BrokerConfig.load(
        None,
        {
            "num.partitions": " +3 ",
            "delete.topic.enable": " False",
            "log.cleanup.policy": " compact , delete ",
            "log.cleaner.min.cleanable.ratio": "1",
            "log.retention.ms": "9223372036854775807",
            "log.message.timestamp.type": " LogAppendTime ",
        },
    )
    assert c.num_partitions == 3
    assert c.delete_topic_enable is False
    assert c.log_cleanup_policy == ["compact", "delete"]
    assert c.get("log.cleaner.min.cleanable.ratio") == 1.0
    assert c.log_retention_ms == LONG_MAX
    assert c.log_message_timestamp_type == "LogAppendTime"
    assert cfg(log_cleanup_policy="").log_cleanup_policy == []


def test_every_default_passes_its_own_validator() -> None:
    for d in BROKER_DEFS:
        if d.default is not None and d.validator is not None:
            assert d.validator.check(d.default) is None, d.key


# --- topic configs ---------------------------------------------------------------------------


def test_topic_validate_canonicalises() -> None:
    got = TopicConfig.validate(
        {"segment.bytes": " 14 ", "cleanup.policy": "compact ,delete", "preallocate": "TRUE"}
    )
    assert got == {"segment.bytes": "14", "cleanup.policy": "compact,delete", "preallocate": "true"}


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("segment.bytes", "13", "at least 14"),
        ("segment.ms", "0", "at least 1"),
        ("retention.ms", "-2", "at least -1"),
        ("max.message.bytes", "-1", "at least 0"),
        ("message.timestamp.type", "Now", "not one of"),
        ("cleanup.policy", "remove", "not one of"),
        ("min.insync.replicas", "0", "at least 1"),
        ("flush.messages", "0", "at least 1"),
        ("flush.ms", "-1", "at least 0"),
        ("index.interval.bytes", "x", "32-bit integer"),
        ("retention.bytes", "1e3", "64-bit integer"),
        ("log.retention.ms", "1", "unknown topic configuration"),  # broker key, not a topic key
        ("segment.bytes", None, "cannot be null"),
    ],
)
def test_topic_validate_rejects(key: str, value: str | None, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason) as e:
        TopicConfig.validate({key: value})
    assert e.value.key == key


def test_topic_validate_accepts_retention_unlimited() -> None:
    assert TopicConfig.validate({"retention.ms": "-1", "retention.bytes": "-1"}) == {
        "retention.ms": "-1",
        "retention.bytes": "-1",
    }


def by_name(entries: list) -> dict:
    return {e.name: e for e in entries}


def test_effective_defaults_and_synonyms() -> None:
    entries = by_name(effective(BrokerConfig.load(), {}))
    assert len(entries) == len(set(entries))  # one entry per key
    r = entries["retention.ms"]
    assert (r.value, r.source, r.type, r.read_only, r.sensitive) == (
        "604800000",
        DEFAULT,
        ConfigType.LONG,
        False,
        False,
    )
    assert [(s.name, s.value, s.source) for s in r.synonyms] == [
        ("log.retention.hours", "168", DEFAULT)
    ]
    assert r.doc
    m = entries["max.message.bytes"]
    assert (m.value, m.type) == ("1048588", ConfigType.INT)
    assert [(s.name, s.source) for s in m.synonyms] == [("message.max.bytes", DEFAULT)]
    assert entries["cleanup.policy"].type is ConfigType.LIST
    assert entries["flush.messages"].value == "1"
    assert entries["flush.ms"].value == str(LONG_MAX)
    assert [s.name for s in entries["flush.ms"].synonyms] == ["log.flush.scheduler.interval.ms"]


def test_effective_with_broker_settings_and_overrides() -> None:
    broker = cfg(log_retention_hours="24", log_retention_minutes="30", message_max_bytes="2000")
    entries = by_name(effective(broker, {"max.message.bytes": "500", "segment.ms": "1000"}))

    r = entries["retention.ms"]
    assert (r.value, r.source) == ("1800000", STATIC)  # minutes beat hours
    assert [(s.name, s.value, s.source) for s in r.synonyms] == [
        ("log.retention.minutes", "30", STATIC),
        ("log.retention.hours", "24", STATIC),
        ("log.retention.hours", "168", DEFAULT),
    ]
    m = entries["max.message.bytes"]
    assert (m.value, m.source) == ("500", TOPIC)
    assert [(s.name, s.value, s.source) for s in m.synonyms] == [
        ("max.message.bytes", "500", TOPIC),
        ("message.max.bytes", "2000", STATIC),
        ("message.max.bytes", "1048588", DEFAULT),
    ]
    s = entries["segment.ms"]
    assert (s.value, s.source) == ("1000", TOPIC)


def test_effective_rejects_bad_overrides() -> None:
    with pytest.raises(ConfigError):
        effective(BrokerConfig.load(), {"segment.bytes": "1"})


def test_to_log_config() -> None:
    broker = cfg(log_segment_bytes="2097152", log_roll_hours="1", log_retention_bytes="1000")
    assert to_log_config(broker, {"retention.ms": "60000", "segment.bytes": "1024"}) == {
        "segment_bytes": 1024,  # a topic may go below the broker minimum (Kafka 4.0)
        "segment_ms": 3_600_000,
        "retention_ms": 60_000,
        "retention_bytes": 1000,
        "index_interval_bytes": 4096,
        "max_message_bytes": 1_048_588,
        "compact": False,
        "delete": True,
        "delete_retention_ms": 86_400_000,
        "min_cleanable_dirty_ratio": 0.5,
        "min_compaction_lag_ms": 0,
        "max_compaction_lag_ms": 2**63 - 1,
    }
    assert to_log_config(BrokerConfig.load())["segment_bytes"] == 1_073_741_824
    compacted = to_log_config(BrokerConfig.load(), {"cleanup.policy": "compact,delete"})
    assert compacted["compact"] and compacted["delete"]


def test_topic_config_get() -> None:
    t = TopicConfig(cfg(log_message_timestamp_type="LogAppendTime"), {"flush.messages": "100"})
    assert t.get("message.timestamp.type") == "LogAppendTime"
    assert t.get("flush.messages") == 100
    assert t.get("cleanup.policy") == ["delete"]


# --- broker DescribeConfigs ------------------------------------------------------------------


def test_describe_broker() -> None:
    entries = by_name(describe_broker(cfg(num_partitions="3", log_retention_minutes="10")))
    assert set(entries) == {d.key for d in BROKER_DEFS}
    n = entries["num.partitions"]
    assert (n.value, n.source, n.read_only, n.type) == ("3", STATIC, True, ConfigType.INT)
    assert [(s.name, s.value, s.source) for s in n.synonyms] == [
        ("num.partitions", "3", STATIC),
        ("num.partitions", "1", DEFAULT),
    ]
    ms = entries["log.retention.ms"]
    assert (ms.value, ms.source) == (None, DEFAULT)
    assert [(s.name, s.source) for s in ms.synonyms] == [
        ("log.retention.minutes", STATIC),
        ("log.retention.hours", DEFAULT),
    ]
    hours = entries["log.retention.hours"]
    assert [(s.name, s.source) for s in hours.synonyms] == [("log.retention.hours", DEFAULT)]
    assert entries["auto.create.topics.enable"].value == "true"
    assert entries["listeners"].value == "PLAINTEXT://:9092"
    assert all(e.doc for e in entries.values())


def test_broker_id_and_node_id() -> None:
    assert BrokerConfig().broker_id == 0  # a single node keeps its default
    assert BrokerConfig({"broker.id": "4"}).broker_id == 4
    assert BrokerConfig({"node.id": "4", "broker.id": "4"}).broker_id == 4
    with pytest.raises(ConfigError, match=r"node\.id is 3: set one, or both to the same id"):
        BrokerConfig({"node.id": "3", "broker.id": "4"}).broker_id  # noqa: B018
    cluster = {"zookeeper.connect": "127.0.0.1:2181"}
    with pytest.raises(ConfigError, match=r"a cluster broker needs broker\.id"):
        BrokerConfig(cluster).broker_id  # noqa: B018
    assert BrokerConfig({**cluster, "node.id": "2"}).broker_id == 2
    assert BrokerConfig(cluster).cluster_mode and not BrokerConfig().cluster_mode
