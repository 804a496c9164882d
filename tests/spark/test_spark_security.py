"""The exactly-once sink and the source against a SASL_SSL broker (SCRAM-SHA-512), with the
security settings given as Spark's Kafka connector takes them: `kafka.security.protocol`,
`kafka.sasl.mechanism`, `kafka.sasl.jaas.config`, `kafka.ssl.truststore.*`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.security.jaas import SCRAM_LOGIN_MODULE
from oncelog.spark.options import EXACTLY_ONCE
from oncelog.testing import EmbeddedBroker
from oncelog.testing.security import SecurityKit

from .spark_helpers import unique

FAIL_AFTER = 30
ROWS = 200
TIMEOUT_S = 30


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> SecurityKit:
    return SecurityKit(tmp_path_factory.mktemp("spark-security-kit"))


@pytest.fixture(scope="module")
def sasl_ssl_broker(kit: SecurityKit) -> Iterator[EmbeddedBroker]:
    """One SASL_SSL listener; the kit's users get SCRAM credentials over PLAIN as admin."""
    config = kit.broker_config(["SASL_SSL"], mechanisms=["PLAIN", "SCRAM-SHA-512"])
    with EmbeddedBroker(config=config) as broker:
        kit.create_scram_users(
            broker.bootstrap_servers_for("SASL_SSL"),
            kit.client("SASL_SSL", "admin", "PLAIN"),
            mechanisms=["SCRAM-SHA-512"],
        )
        yield broker


def spark_options(broker: EmbeddedBroker, kit: SecurityKit, user: str) -> dict[str, str]:
    """The `kafka.*` options in Kafka's Java names, as a job written for Spark's Kafka
    connector would have them."""
    return {
        "kafka.bootstrap.servers": broker.bootstrap_servers_for("SASL_SSL"),
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": (
            f'{SCRAM_LOGIN_MODULE} required username="{user}" password="{kit.users[user]}";'
        ),
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(kit.authority.ca_file),
    }


def read_committed(broker: EmbeddedBroker, kit: SecurityKit, topic: str) -> list[bytes]:
    """Every committed value of ``topic``, read by a plain confluent-kafka consumer as bob."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers_for("SASL_SSL"),
            **kit.client("SASL_SSL", "bob", "SCRAM-SHA-512").librdkafka(),
            "group.id": unique("verify"),
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        values: list[bytes] = []
        at_end: set[int] = set()
        for _ in range(400):  # bounded: at most 100 s of polling
            if len(at_end) == len(partitions):
                return values
            message = consumer.poll(0.25)
            if message is None:
                continue
            if message.error():
                if message.error().code() != KafkaError._PARTITION_EOF:
                    raise AssertionError(message.error())
                at_end.add(message.partition())
                continue
            at_end.discard(message.partition())
            values.append(message.value())
        raise AssertionError(f"{topic} not read to its end: {len(values)} values so far")
    finally:
        consumer.close()


def test_exactly_once_write_and_read_over_sasl_ssl(
    spark,  # type: ignore[no-untyped-def]
    sasl_ssl_broker: EmbeddedBroker,
    kit: SecurityKit,
    tmp_path: Path,
) -> None:
    """Two write tasks each fail once after FAIL_AFTER records: the records written twice
    are in aborted transactions, so read_committed sees each row once, and so does the
    oncelog source."""
    admin = AdminClient(
        {
            "bootstrap.servers": sasl_ssl_broker.bootstrap_servers_for("SASL_SSL"),
            **kit.client("SASL_SSL", "admin", "PLAIN").librdkafka(),
        }
    )
    topic = unique("secured-out")
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(TIMEOUT_S)
    options = spark_options(sasl_ssl_broker, kit, "alice")

    frame = spark.range(0, ROWS, 1, 2).selectExpr(  # two partitions: two write tasks
        "cast(id as string) as key", "concat('v', id) as value"
    )
    # the sink with failAfter (oncelog.testing.spark): every task's first attempt dies
    writer = frame.write.format("oncelog_faults").mode("append")
    write_options = options | {
        "topic": topic,
        "delivery.guarantee": EXACTLY_ONCE,
        "sink.id": unique("sink"),
        "failAfter": str(FAIL_AFTER),
    }
    for key, value in write_options.items():
        writer = writer.option(key, value)
    writer.save()

    expected = {b"v%d" % i for i in range(ROWS)}
    counts = Counter(read_committed(sasl_ssl_broker, kit, topic))
    assert set(counts) == expected and sum(counts.values()) == ROWS

    reader = spark.read.format("oncelog").option("subscribe", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    values = [row.value for row in reader.load().collect()]
    assert sorted(values) == sorted(expected)
