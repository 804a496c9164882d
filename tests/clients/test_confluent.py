"""confluent-kafka (librdkafka) against oncelog."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from oncelog.testing import EmbeddedBroker

TIMEOUT_S = 20


def create_topic(bootstrap: str, name: str, partitions: int, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, config=configs)])[name].result(TIMEOUT_S)


def produce(
    bootstrap: str, topic: str, count: int, partitions: int, **conf: object
) -> list[tuple[int, int]]:
    """Send `count` numbered records round-robin; return (partition, offset) of each ack."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    acked: list[tuple[int, int]] = []
    errors: list[object] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.partition(), msg.offset()))  # type: ignore[attr-defined]

    for i in range(count):
        producer.produce(
            topic,
            key=b"k%d" % i,
            value=b"value-%d" % i,
            partition=i % partitions,
            on_delivery=on_delivery,
            timestamp=1_700_000_000_000 + i,
        )
    assert producer.flush(TIMEOUT_S) == 0
    assert errors == []
    return acked


def consume_all(
    bootstrap: str, topic: str, partitions: int, expected: int, **conf: object
) -> list[tuple[int, int, bytes]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False, **conf}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(got) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.partition(), msg.offset(), msg.value()))
        extra = consumer.poll(0.5)  # nothing beyond what was produced
        assert extra is None or extra.error() is not None
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_produce_with_each_acks_then_consume_from_beginning(
    oncelog_session_broker: EmbeddedBroker, topic_name: str, acks: str
) -> None:
    bootstrap = oncelog_session_broker.bootstrap_servers
    create_topic(bootstrap, topic_name, 3)
    acked = produce(bootstrap, topic_name, 3000, 3, acks=acks)
    assert len(acked) == 3000
    got = consume_all(bootstrap, topic_name, 3, 3000)
    assert sorted(v for _, _, v in got) == sorted(b"value-%d" % i for i in range(3000))
    for partition in range(3):
        offsets = [o for p, o, _ in got if p == partition]
        assert offsets == list(range(1000)), (
            "each partition holds its records once, in offset order"
        )
        values = [int(v.split(b"-")[1]) for p, _, v in got if p == partition]
        assert values == sorted(values), "records keep their send order within a partition"
    if acks != "0":  # acks=0 gets no offsets back
        assert sorted(acked) == sorted((p, o) for p, o, _ in got)


def test_list_offsets_by_timestamp(oncelog_session_broker: EmbeddedBroker, topic_name: str) -> None:
    bootstrap = oncelog_session_broker.bootstrap_servers
    create_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, 500, 1, acks="all", **{"batch.num.messages": 50})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        base = 1_700_000_000_000
        # one query per call: librdkafka merges queries for the same partition
        for timestamp, offset in [
            (base + 123, 123),
            (base, 0),
            (base - 5, 0),
            (base + 499, 499),
            (base + 10_000, -1),
        ]:
            (found,) = consumer.offsets_for_times(
                [TopicPartition(topic_name, 0, timestamp)], timeout=TIMEOUT_S
            )
            assert found.offset == offset, timestamp
        low, high = consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=TIMEOUT_S)
        assert (low, high) == (0, 500)
    finally:
        consumer.close()


def test_topic_create_describe_delete(
    oncelog_session_broker: EmbeddedBroker, topic_name: str
) -> None:
    bootstrap = oncelog_session_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    create_topic(bootstrap, topic_name, 4, **{"retention.ms": "3600000"})
    with pytest.raises(KafkaException) as exists:
        create_topic(bootstrap, topic_name, 4)
    assert exists.value.args[0].name() == "TOPIC_ALREADY_EXISTS"

    metadata = admin.list_topics(topic_name, timeout=TIMEOUT_S)
    assert sorted(metadata.topics[topic_name].partitions) == [0, 1, 2, 3]
    assert metadata.topics[topic_name].error is None

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
    configs = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == 1  # TOPIC_CONFIG
    assert configs["segment.bytes"].source != 1

    admin.delete_topics([topic_name])[topic_name].result(TIMEOUT_S)
    assert topic_name not in admin.list_topics(timeout=TIMEOUT_S).topics
    assert not (oncelog_session_broker.data_dir / f"{topic_name}-0").exists()


def test_invalid_topic_is_refused_with_a_clear_error(
    oncelog_session_broker: EmbeddedBroker,
) -> None:
    admin = AdminClient({"bootstrap.servers": oncelog_session_broker.bootstrap_servers})
    with pytest.raises(KafkaException) as refused:
        admin.create_topics([NewTopic("bad/name", 1)])["bad/name"].result(TIMEOUT_S)
    assert (
        refused.value.args[0].code() == 17
    )  # INVALID_TOPIC_EXCEPTION (librdkafka: TOPIC_EXCEPTION)
    assert "bad/name" in refused.value.args[0].str()
    with pytest.raises(KafkaException) as refused:
        admin.create_topics([NewTopic("rf-three", 1, replication_factor=3)])["rf-three"].result(
            TIMEOUT_S
        )
    assert refused.value.args[0].name() == "INVALID_REPLICATION_FACTOR"


def test_auto_creation_on_produce(topic_name: str) -> None:
    with EmbeddedBroker({"num.partitions": "2"}) as broker:
        acked = produce(broker.bootstrap_servers, topic_name, 10, 2, acks="all")
        assert len(acked) == 10
        topic = broker.broker.topics.get(topic_name)  # type: ignore[union-attr]
        assert topic is not None and len(topic.partitions) == 2


def test_auto_creation_disabled(topic_name: str) -> None:
    with EmbeddedBroker({"auto.create.topics.enable": "false"}) as broker:
        producer = Producer(
            {"bootstrap.servers": broker.bootstrap_servers, "message.timeout.ms": 3000}
        )
        failures: list[object] = []
        producer.produce(topic_name, b"x", on_delivery=lambda err, msg: failures.append(err))
        producer.flush(10)
        assert len(failures) == 1 and failures[0] is not None
        assert broker.broker.topics.get(topic_name) is None  # type: ignore[union-attr]
