"""Option parsing: every option of Spark's Kafka source and sink, and every way to get one
wrong (no Spark session, no broker)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from oncelog.spark.options import (
    SINK_OPTIONS,
    SOURCE_OPTIONS,
    Earliest,
    GlobalTimestamp,
    Latest,
    OptionError,
    SpecificOffsets,
    SpecificTimestamps,
    duration_ms,
    include_headers,
    parse_read_options,
    parse_write_options,
)
from oncelog.spark.schema import spark_schema

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}
SUB = {**BOOT, "subscribe": "t"}
DOCS = Path(__file__).parents[2] / "docs" / "spark.md"


def _read(options: dict, streaming: bool | None = False):  # type: ignore[no-untyped-def]
    # as Spark hands them over: keys lower-cased
    return parse_read_options({k.lower(): v for k, v in options.items()}, streaming)


def test_defaults_follow_spark_except_the_isolation_level() -> None:
    batch = _read({**BOOT, "subscribe": "a, b", "kafka.client.id": "x"})
    assert batch.subscription.topics == ("a", "b")
    assert batch.starting == Earliest() and batch.ending == Latest()
    assert batch.read_committed and batch.fail_on_data_loss and not batch.include_headers
    assert batch.client == {
        "bootstrap.servers": "127.0.0.1:9092",
        "client.id": "x",
        "isolation.level": "read_committed",
    }
    assert (batch.poll_timeout_ms, batch.fetch_offset_retries) == (120_000, 3)
    assert batch.fetch_offset_retry_interval_ms == 1000
    assert batch.max_trigger_delay_ms == 15 * 60_000
    assert batch.min_partitions is batch.max_records_per_partition is None
    assert batch.combine_ranges_up_to == 1000
    stream = _read(SUB, streaming=True)
    assert stream.starting == Latest()


def test_every_source_option_is_read() -> None:
    options = _read(
        {
            **BOOT,
            "subscribePattern": "or.*",
            "startingOffsetsByTimestamp": '{"t": {"0": 1000}}',
            "startingOffsetsByTimestampStrategy": "latest",
            "endingTimestamp": "2000",
            "failOnDataLoss": "false",
            "kafkaConsumer.pollTimeoutMs": "5000",
            "fetchOffset.numRetries": "5",
            "fetchOffset.retryIntervalMs": "20",
            "minPartitions": "8",
            "maxRecordsPerPartition": "1000",
            "groupIdPrefix": "mine",
            "includeHeaders": "true",
            "kafka.isolation.level": "read_uncommitted",
            "combineRangesUpTo": "0",
        }
    )
    assert options.subscription.matches("orders") and options.subscription.matches("xorders")
    assert not options.subscription.matches("__orders")  # internal topics: never by pattern
    assert options.starting == SpecificTimestamps(
        "startingOffsetsByTimestamp", {("t", 0): 1000}, latest_when_none=True
    )
    assert options.ending == GlobalTimestamp("endingTimestamp", 2000, latest_when_none=True)
    assert not options.fail_on_data_loss and not options.read_committed
    assert (options.poll_timeout_ms, options.fetch_offset_retries) == (5000, 5)
    assert options.fetch_offset_retry_interval_ms == 20
    assert (options.min_partitions, options.max_records_per_partition) == (8, 1000)
    assert options.combine_ranges_up_to == 0
    assert options.group_id_prefix == "mine" and options.group_id is None
    assert options.include_headers
    stream = _read(
        {
            **BOOT,
            "assign": '{"t": [1, 0]}',
            "startingOffsets": '{"t": {"0": -2, "1": 5}}',
            "maxOffsetsPerTrigger": "100",
            "minOffsetsPerTrigger": "10",
            "maxTriggerDelay": "30s",
        },
        streaming=True,
    )
    assert stream.subscription.assign == {"t": (0, 1)}
    assert stream.starting == SpecificOffsets("startingOffsets", {("t", 0): -2, ("t", 1): 5})
    assert (stream.max_offsets_per_trigger, stream.min_offsets_per_trigger) == (100, 10)
    assert stream.max_trigger_delay_ms == 30_000
    timestamp = _read({**SUB, "startingTimestamp": "1500"})
    assert timestamp.starting == GlobalTimestamp("startingTimestamp", 1500, latest_when_none=False)


def test_kafka_group_id_is_used_with_spark_s_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="oncelog.spark.options"):
        options = _read({**SUB, "kafka.group.id": "authorised", "groupIdPrefix": "p"})
    assert options.group_id == "authorised" and "group.id" not in options.client
    assert "kafka.group.id" in caplog.text and "groupIdPrefix is ignored" in caplog.text


def test_kafka_keys_the_client_does_not_know_are_warned_about_and_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As Spark's Java client does ("supplied but isn't a known config"): a Java-only key
    and a misspelt one. Before, librdkafka refused the whole configuration at the first
    cluster call ('No such configuration property: "default.api.timeout.ms"')."""
    given = {"kafka.default.api.timeout.ms": "5000", "kafka.isolation.levl": "read_committed"}
    with caplog.at_level(logging.WARNING, logger="oncelog.spark.options"):
        source = _read({**SUB, **given, "kafka.fetch.wait.max.ms": "20"})
        sink = parse_write_options({**BOOT, **given, "topic": "t", "sink.id": "s"})
    for client in (source.client, sink.client):
        assert "default.api.timeout.ms" not in client and "isolation.levl" not in client
    assert source.client["fetch.wait.max.ms"] == "20"  # a key it knows is kept
    for key in given:
        assert f"Kafka option '{key}' is not a setting of the Kafka client" in caplog.text


@pytest.mark.parametrize("write", [False, True])
def test_a_kafka_value_the_client_refuses_names_the_option(write: bool) -> None:
    bad = {"kafka.fetch.wait.max.ms": "soon"}
    with pytest.raises(OptionError, match=r"option kafka\.fetch\.wait\.max\.ms: Invalid value"):
        if write:
            parse_write_options({**BOOT, **bad, "topic": "t", "sink.id": "s"})
        else:
            _read({**SUB, **bad})


def test_trigger_options_are_ignored_with_a_warning_in_batch_queries(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="oncelog.spark.options"):
        _read({**SUB, "maxOffsetsPerTrigger": "5"})
    assert "maxOffsetsPerTrigger is ignored in batch queries" in caplog.text


@pytest.mark.parametrize(
    "options, streaming, message",
    [
        ({"subscribe": "a"}, False, "kafka.bootstrap.servers must be specified"),
        (BOOT, False, "one of the options subscribe, subscribePattern or assign must be"),
        ({**SUB, "assign": '{"a": [0]}'}, False, r"only one of .* \(got subscribe, assign\)"),
        ({**BOOT, "subscribe": " , "}, False, "option subscribe=' , ': no topics"),
        ({**BOOT, "subscribePattern": " "}, False, "subscribePattern=' ': the pattern is empty"),
        ({**BOOT, "subscribePattern": "(a"}, False, "option subscribePattern='\\(a'"),
        ({**BOOT, "assign": "t"}, False, "option assign: no topic-partitions to assign"),
        ({**BOOT, "assign": '{"t": [0, "x"]}'}, False, "option assign"),
        ({**SUB, "startingOffsets": "soon"}, False, "option startingOffsets: expected e.g."),
        ({**SUB, "startingOffsets": '{"t": {"0": -3}}'}, False, "startingOffsets: offset -3"),
        ({**SUB, "startingOffsets": "latest"}, False, "can't be latest for batch queries"),
        ({**SUB, "startingOffsets": '{"t": {"0": -1}}'}, False, "for t-0 can't be latest"),
        ({**SUB, "endingOffsets": "earliest"}, False, "can't be earliest for batch queries"),
        ({**SUB, "endingOffsets": '{"t": {"0": -2}}'}, False, "for t-0 can't be earliest"),
        (
            {**SUB, "startingOffsets": '{"t": {"0": 5}}', "endingOffsets": '{"t": {"1": 9}}'},
            False,
            "name different partitions",
        ),
        (
            {**SUB, "startingOffsets": '{"t": {"0": 9}}', "endingOffsets": '{"t": {"0": 5}}'},
            False,
            "startingOffsets 9 is after endingOffsets 5 for t-0",
        ),
        ({**SUB, "startingTimestamp": "noon"}, False, "startingTimestamp: expected a single long"),
        ({**SUB, "startingOffsetsByTimestamp": "[]"}, False, "startingOffsetsByTimestamp: exp"),
        ({**SUB, "startingOffsetsByTimestampStrategy": "x"}, False, "Strategy='x': 'error' or"),
        ({**SUB, "endingOffsets": '{"t": {"0": 5}}'}, True, "endingOffsets: ending offsets are"),
        ({**SUB, "endingTimestamp": "5"}, True, "endingTimestamp: ending offsets are not valid"),
        ({**SUB, "endingOffsetsByTimestamp": "{}"}, True, "endingOffsetsByTimestamp: ending"),
        ({**SUB, "failOnDataLoss": "maybe"}, False, "failOnDataLoss='maybe': expected true"),
        ({**SUB, "includeHeaders": "yes"}, False, "includeHeaders='yes': expected true or false"),
        ({**SUB, "minPartitions": "0"}, False, "minPartitions='0': minPartitions must be pos"),
        ({**SUB, "maxRecordsPerPartition": "-5"}, False, "maxRecordsPerPartition must be pos"),
        ({**SUB, "combineRangesUpTo": "-1"}, False, "combineRangesUpTo='-1': must not be neg"),
        (
            {**SUB, "combineRangesUpTo": "500", "minPartitions": "4"},
            False,
            "combineRangesUpTo cannot be combined with minPartitions",
        ),
        ({**SUB, "maxOffsetsPerTrigger": "lots"}, True, "maxOffsetsPerTrigger='lots': expected"),
        (
            {**SUB, "maxOffsetsPerTrigger": "10", "minOffsetsPerTrigger": "20"},
            True,
            r"minOffsetsPerTrigger \(20\) is higher than maxOffsetsPerTrigger \(10\)",
        ),
        ({**SUB, "maxTriggerDelay": "soon"}, True, "maxTriggerDelay='soon': expected a time"),
        ({**SUB, "kafkaConsumer.pollTimeoutMs": "0"}, False, "pollTimeoutMs must be positive"),
        ({**SUB, "fetchOffset.numRetries": "x"}, False, "fetchOffset.numRetries='x'"),
        ({**SUB, "kafka.isolation.level": "dirty"}, False, "kafka.isolation.level='dirty'"),
        ({**SUB, "kafka.auto.offset.reset": "earliest"}, False, "'kafka.auto.offset.reset' is"),
        ({**SUB, "kafka.enable.auto.commit": "true"}, False, "'kafka.enable.auto.commit' is not"),
        ({**SUB, "kafka.key.deserializer": "x"}, False, "'kafka.key.deserializer' is not"),
        ({**SUB, "kafka.interceptor.classes": "x"}, False, "'kafka.interceptor.classes' is"),
        ({**SUB, "kafka.socket.timeout.ms": "x"}, False, "kafka.socket.timeout.ms='x'"),
    ],
)
def test_bad_source_options_are_refused_naming_the_option(
    options: dict, streaming: bool, message: str
) -> None:
    with pytest.raises(OptionError, match=message):
        _read(options, streaming)


def test_unknown_options_are_refused_with_the_known_ones() -> None:
    with pytest.raises(OptionError) as refused:
        _read({**SUB, "startingOffset": "earliest", "colour": "blue"})
    text = str(refused.value)
    assert "unknown options 'colour', 'startingoffset' for the oncelog source" in text
    assert "'startingoffset': did you mean startingOffsets?" in text
    for name in SOURCE_OPTIONS:
        assert name in text
    # Spark sets these on some queries itself; kafka.* goes to the client
    _read({**SUB, "path": "/x", "checkpointLocation": "/y", "kafka.linger.ms": "5"})
    with pytest.raises(OptionError, match="unknown option 'subscribe' for the oncelog sink"):
        parse_write_options({**BOOT, "topic": "t", "sink.id": "s", "subscribe": "t"})


def test_streaming_only_and_batch_only_checks_wait_until_the_kind_is_known() -> None:
    # schema() runs before Spark says batch or stream: only the common checks apply
    _read({**SUB, "endingOffsets": "latest", "startingOffsets": "latest"}, streaming=None)
    with pytest.raises(OptionError):
        _read({**SUB, "colour": "blue"}, streaming=None)


def test_include_headers_decides_the_schema() -> None:
    assert include_headers({"includeheaders": "true"}) and not include_headers({})
    assert [f.name for f in spark_schema(False).fields] == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
    ]
    assert (
        spark_schema(True)
        .simpleString()
        .endswith("timestampType:int,headers:array<struct<key:string,value:binary>>>")
    )


def test_durations_as_spark_reads_them() -> None:
    assert duration_ms("d", "250") == 250
    assert duration_ms("d", "250ms") == 250
    assert duration_ms("d", "2s") == 2000
    assert duration_ms("d", "15m") == duration_ms("d", "15min") == 900_000
    assert duration_ms("d", "1h") == 3_600_000 and duration_ms("d", "1d") == 86_400_000
    for bad in ("", "5 parsecs", "-1s", "1.5s"):
        with pytest.raises(OptionError):
            duration_ms("d", bad)


def test_write_options() -> None:
    eos = parse_write_options({**BOOT, "sink.id": "s1", "topic": " out "})
    assert eos.exactly_once and eos.progress_group == "oncelog-sink-s1" and eos.topic == "out"
    assert eos.write_id == 0
    alo = parse_write_options({**BOOT, "delivery.guarantee": "at_least_once"})
    assert not alo.exactly_once and alo.sink_id is None
    assert parse_write_options({**BOOT, "sink.id": "s", "includeheaders": "true"}).sink_id == "s"


@pytest.mark.parametrize(
    "options, message",
    [
        ({}, "kafka.bootstrap.servers must be specified"),
        (BOOT, r"sink\.id is required"),
        ({**BOOT, "sink.id": "a b"}, r"sink\.id='a b': letters"),
        ({**BOOT, "sink.id": "s", "kafka.transactional.id": "x"}, r"kafka\.transactional\.id"),
        ({**BOOT, "sink.id": "s", "kafka.acks": "1"}, r"kafka\.acks are set by the exactly-once"),
        ({**BOOT, "delivery.guarantee": "twice"}, r"delivery\.guarantee='twice'"),
        ({**BOOT, "sink.id": "s", "kafka.value.serializer": "x"}, "'kafka.value.serializer'"),
        ({**BOOT, "sink.id": "s", "write.id": "-1"}, r"write\.id='-1': must not be negative"),
        ({**BOOT, "sink.id": "s", "sink.progress.partitions": "0"}, "must be positive"),
        ({**BOOT, "sink.id": "s", "includeheaders": "1"}, "includeHeaders='1'"),
        ({**BOOT, "sink.id": "s", "sinkid": "x"}, "did you mean sink.id"),
    ],
)
def test_bad_sink_options_are_refused_naming_the_option(options: dict, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_write_options(options)


def test_the_docs_list_every_option() -> None:
    """docs/spark.md has one table row per option of Spark's Kafka connector."""
    text = DOCS.read_text()
    for name in (*SOURCE_OPTIONS, *SINK_OPTIONS, "kafka.bootstrap.servers", "kafka.group.id"):
        assert f"| `{name}` |" in text, name


def test_security_options_in_kafkas_java_names_reach_librdkafka() -> None:
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="a-secret";'
    )
    options = parse_read_options(
        {
            **BOOT,
            "subscribe": "t",
            "kafka.client.id": "x",
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": jaas,
            "kafka.ssl.truststore.type": "PEM",
            "kafka.ssl.truststore.location": "/etc/ca.pem",
        },
        streaming=False,
    )
    assert options.client == {
        "bootstrap.servers": "127.0.0.1:9092",
        "isolation.level": "read_committed",  # the source's default, Spark's too
        "client.id": "x",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "a-secret",
        "ssl.ca.location": "/etc/ca.pem",
        "ssl.endpoint.identification.algorithm": "https",
    }


@pytest.mark.parametrize(
    ("security", "message"),
    [
        ({"kafka.security.protocol": "SASL_SSL"}, "GSSAPI"),
        ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN"}, "password"),
        ({"kafka.security.protocol": "SSL", "kafka.ssl.truststore.type": "JKS"}, "PEM"),
    ],
)
def test_incomplete_security_options_are_refused_on_the_driver(
    security: dict[str, str], message: str
) -> None:
    with pytest.raises(OptionError, match=message):
        parse_write_options({**BOOT, "topic": "t", "sink.id": "s", **security})
