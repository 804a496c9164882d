"""The reader's range reading without Spark: offsets lost to retention follow failOnDataLoss; a
range that never arrives fails after kafkaConsumer.pollTimeoutMs."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from oncelog.spark.client import Cluster
from oncelog.spark.consume import DataLossError, read_range
from oncelog.spark.offsets import OffsetRange
from oncelog.spark.options import parse_read_options
from oncelog.testing import EmbeddedBroker

from .spark_helpers import create_topic, unique


def test_range_below_the_log_start_fails_or_skips_ahead() -> None:
    with EmbeddedBroker({"log.retention.check.interval.ms": "100"}) as broker:
        bootstrap = broker.bootstrap_servers
        topic = create_topic(
            bootstrap,
            unique("retained"),
            partitions=1,
            config={"segment.bytes": "1024", "retention.bytes": "1"},
        )
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        for i in range(200):
            producer.produce(topic, value=b"value-%03d" % i + b"." * 40)
            producer.flush(10)  # one batch per record: many segments
        cluster = Cluster({"bootstrap.servers": bootstrap})
        deadline = time.monotonic() + 20
        while cluster.offsets([(topic, 0)], "earliest", True)[(topic, 0)] == 0:
            assert time.monotonic() < deadline, "retention never deleted a segment"
            time.sleep(0.2)
        log_start = cluster.offsets([(topic, 0)], "earliest", True)[(topic, 0)]
        end = cluster.offsets([(topic, 0)], "latest", True)[(topic, 0)]
        assert 0 < log_start < end == 200

        strict = parse_read_options(
            {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}, False
        )
        with pytest.raises(DataLossError, match=r"offset 0 of the range .* is below the log start"):
            list(read_range(strict, OffsetRange(topic, 0, 0, end), "data-loss-test"))
        lenient = parse_read_options(
            {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "failondataloss": "false"},
            False,
        )
        offsets = [
            o
            for batch in read_range(lenient, OffsetRange(topic, 0, 0, end), "data-loss-test")
            for o in batch.column("offset").to_pylist()
        ]
        assert offsets[0] >= log_start and offsets[-1] == end - 1
        assert offsets == list(range(offsets[0], end))


def test_a_range_that_does_not_arrive_fails_after_the_poll_timeout(bootstrap: str) -> None:
    topic = create_topic(bootstrap, unique("short"), partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(5):
        producer.produce(topic, value=b"v%d" % i)
    producer.flush(10)
    options = parse_read_options(
        {
            "kafka.bootstrap.servers": bootstrap,
            "subscribe": topic,
            "kafkaconsumer.polltimeoutms": "1000",
        },
        False,
    )
    assert [
        o
        for b in read_range(options, OffsetRange(topic, 0, 2, 5), "g")
        for o in b.column("offset").to_pylist()
    ] == [2, 3, 4]
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"kafkaConsumer\.pollTimeoutMs=1000"):
        list(read_range(options, OffsetRange(topic, 0, 2, 9), "g"))  # offsets 5..8 never come
    assert time.monotonic() - started < 30
