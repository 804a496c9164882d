"""The Prometheus endpoint, scraped while records flow: counters move with the traffic,
gauges tell the partition offsets, and the names are Kafka's."""

from __future__ import annotations

import urllib.request
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from oncelog.testing import EmbeddedBroker

TIMEOUT_S = 30.0


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=TIMEOUT_S) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    for i in range(count):
        producer.produce(topic, value=b"x" * 100, key=b"%d" % i, partition=0)
    assert producer.flush(TIMEOUT_S) == 0


def consume(bootstrap: str, topic: str, count: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"m-{topic}"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    read = 0
    try:
        while read < count:
            read += sum(1 for m in consumer.consume(500, 1.0) if m.error() is None)
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def test_counters_move_with_the_traffic() -> None:
    topic = f"metrics-{uuid.uuid4().hex[:6]}"
    with EmbeddedBroker({"offsets.topic.num.partitions": "1"}, metrics_port=0) as broker:
        port = broker.broker.metrics_port  # type: ignore[union-attr]
        assert port
        produce(broker.bootstrap_servers, topic, 1000)
        first = scrape(port)
        consume(broker.bootstrap_servers, topic, 1000)
        produce(broker.bootstrap_servers, topic, 500)
        second = scrape(port)

    bytes_in = "kafka_server_brokertopicmetrics_bytesin_total"
    messages_in = "kafka_server_brokertopicmetrics_messagesin_total"
    assert value(first, messages_in, topic=topic) == 1000
    assert value(second, messages_in, topic=topic) == 1500
    assert value(second, bytes_in, topic=topic) > value(first, bytes_in, topic=topic) > 100_000
    assert value(second, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) > 100_000
    produce_requests = "kafka_network_requestmetrics_requests_total"
    assert value(second, produce_requests, request="Produce") > value(
        first, produce_requests, request="Produce"
    )
    assert value(second, produce_requests, request="Fetch") > 0
    assert (
        value(second, "kafka_network_requestmetrics_totaltime_seconds_count", request="Produce") > 0
    )
    assert value(second, "kafka_log_logflushstats_logflush_seconds_count") > value(
        first, "kafka_log_logflushstats_logflush_seconds_count"
    )
    for gauge in (
        "kafka_log_log_logendoffset",
        "kafka_cluster_partition_highwatermark",
        "kafka_cluster_partition_laststableoffset",
    ):
        assert value(second, gauge, topic=topic, partition="0") == 1500
    assert value(second, "oncelog_log_producer_state_entries", topic=topic, partition="0") >= 1
    loaded = [k for k in second if k[0] == "kafka_coordinator_partition_load_time_seconds"]
    assert loaded, "the group coordinator's load time is reported"
    assert ("kafka_log_logcleanermanager_max_dirty_percent", ()) in second


def test_bytes_in_counts_what_was_received_not_what_was_stored() -> None:
    """Kafka marks BytesIn with the request's records (appendToLocalLog), before a topic's
    compression.type recompresses them: 1,000 plain 100-byte values are over 100 KB
    received, and a few KB once the broker has gzipped them."""
    topic = f"metrics-gzip-{uuid.uuid4().hex[:6]}"
    with EmbeddedBroker({"offsets.topic.num.partitions": "1"}, metrics_port=0) as broker:
        port = broker.broker.metrics_port  # type: ignore[union-attr]
        assert port
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        wanted = NewTopic(topic, 1, 1, config={"compression.type": "gzip"})
        admin.create_topics([wanted])[topic].result(TIMEOUT_S)
        produce(broker.bootstrap_servers, topic, 1000)
        samples = scrape(port)
        stored = value(samples, "kafka_log_log_size", topic=topic, partition="0")
    assert value(samples, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic) > 100_000
    assert 0 < stored < 20_000
