"""Option parsing, offset planning and the replay digest: no Spark session needed."""

from __future__ import annotations

import pytest

from oncelog.spark import offsets as off
from oncelog.spark.options import (
    OptionError,
    parse_read_options,
    parse_write_options,
)

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_read_options_defaults_and_kafka_names() -> None:
    batch = parse_read_options(
        {**BOOT, "subscribe": "a, b", "kafka.client.id": "x"}, streaming=False
    )
    assert batch.subscription.topics == ("a", "b")
    assert batch.starting == "earliest" and batch.ending == "latest"
    assert batch.read_committed and batch.fail_on_data_loss
    assert batch.client == {"bootstrap.servers": "127.0.0.1:9092", "client.id": "x"}
    stream = parse_read_options(
        {
            **BOOT,
            "subscribepattern": "or.*",
            "maxoffsetspertrigger": "10",
            "kafka.isolation.level": "read_uncommitted",
            "failondataloss": "false",
        },
        streaming=True,
    )
    assert stream.starting == "latest" and stream.max_offsets_per_trigger == 10
    assert not stream.read_committed and not stream.fail_on_data_loss
    assert stream.subscription.matches("orders") and not stream.subscription.matches("xorders")
    assigned = parse_read_options(
        {**BOOT, "assign": '{"t": [1, 0]}', "startingoffsets": '{"t": {"0": -2, "1": 5}}'},
        streaming=False,
    )
    assert assigned.subscription.assign == {"t": (0, 1)}
    assert assigned.starting == {"t": {0: -2, 1: 5}}


@pytest.mark.parametrize(
    "options, message",
    [
        ({"subscribe": "a"}, "bootstrap.servers"),
        ({**BOOT}, "exactly one of"),
        ({**BOOT, "subscribe": "a", "assign": '{"a": [0]}'}, "exactly one of"),
        ({**BOOT, "subscribe": "a", "startingoffsets": "soon"}, "startingOffsets"),
        ({**BOOT, "subscribe": "a", "endingoffsets": "earliest"}, "earliest is not allowed"),
        ({**BOOT, "subscribe": "a", "kafka.group.id": "g"}, "kafka.group.id"),
        ({**BOOT, "subscribe": "a", "kafka.isolation.level": "dirty"}, "isolation.level"),
        ({**BOOT, "subscribe": "a", "failondataloss": "maybe"}, "failOnDataLoss".lower()),
    ],
)
def test_bad_read_options_are_refused_with_the_option_named(options: dict, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_read_options(options, streaming=False)


def test_write_options() -> None:
    eos = parse_write_options({**BOOT, "sink.id": "s1", "topic": "out"})
    assert eos.exactly_once and eos.progress_group == "oncelog-sink-s1"
    assert eos.transactional_id(3) == "oncelog-sink-s1-3" and eos.write_id == 0
    alo = parse_write_options({**BOOT, "delivery.guarantee": "at_least_once"})
    assert not alo.exactly_once
    with pytest.raises(OptionError, match=r"sink\.id is required"):
        parse_write_options({**BOOT})
    with pytest.raises(OptionError, match=r"transactional\.id"):
        parse_write_options({**BOOT, "sink.id": "s", "kafka.transactional.id": "x"})
    with pytest.raises(OptionError, match=r"delivery\.guarantee"):
        parse_write_options({**BOOT, "delivery.guarantee": "twice"})


def test_offsets_json_round_trip() -> None:
    offsets = {("b", 1): 7, ("a", 0): 3, ("a", 10): 0}
    encoded = off.to_json(offsets)
    assert encoded == {"a": {"0": 3, "10": 0}, "b": {"1": 7}}
    assert off.from_json(encoded) == offsets


def test_plan_ranges_starts_new_partitions_at_their_earliest() -> None:
    ranges = off.plan_ranges({("t", 0): 5}, {("t", 0): 9, ("t", 1): 4}, {("t", 1): 2})
    assert ranges == [off.OffsetRange("t", 0, 5, 9), off.OffsetRange("t", 1, 2, 4)]


def test_rate_limit_shares_in_proportion_and_exactly() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 10}
    available = {("t", 0): 30, ("t", 1): 10, ("t", 2): 10}
    capped = off.rate_limit(start, available, 8)
    assert sum(capped[tp] - start[tp] for tp in start) == 8
    assert capped[("t", 0)] == 6 and capped[("t", 1)] == 2 and capped[("t", 2)] == 10
    assert off.rate_limit(start, available, 1000) == available


def test_replay_digest_ignores_order_but_not_content() -> None:
    from oncelog.spark.writer import _Digest

    rows = [("t", -1, b"k%d" % i, b"v%d" % i, None) for i in range(5)]
    a, b, c = _Digest(), _Digest(), _Digest()
    for row in rows:
        a.add(*row)
    for row in reversed(rows):
        b.add(*row)
    for row in [*rows[:-1], ("t", -1, b"k4", b"changed", None)]:
        c.add(*row)
    assert a.hex == b.hex and a.hex != c.hex and a.count == 5


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
