"""Every codec, written by real clients (confluent-kafka, kafka-python, aiokafka): stored
as sent, read back by the same client, and found by timestamp inside a compressed batch.
Then the topic's compression.type rewrites what a client sends, and the client still
reads it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator

import confluent_kafka
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from oncelog.client.connection import KafkaConnection
from oncelog.protocol.compression import CODEC_IDS
from oncelog.protocol.record_batch import iter_stored_batches, parse_header
from oncelog.testing import EmbeddedBroker

from .wire import fetch_batches

CODECS = ["gzip", "snappy", "lz4", "zstd"]
COUNT = 300
BASE_TS = 1_700_000_000_000
TIMEOUT_S = 30
# Record i has timestamp BASE_TS + 10 i; asking for BASE_TS + 1505 must find record 151.
PROBE_TS, PROBE_OFFSET = BASE_TS + 1505, 151


def value(i: int) -> bytes:
    return b"record %05d " % i + b"compressible " * 8


def expected_values() -> list[bytes]:
    return [value(i) for i in range(COUNT)]


# -- one produce, consume and offsets_for_times per client ------------------------------------


def confluent_round_trip(servers: str, topic: str, codec: str) -> tuple[list[bytes], int]:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": servers, "compression.type": codec, "linger.ms": 100}
    )
    for i in range(COUNT):
        producer.produce(topic, value(i), partition=0, timestamp=BASE_TS + 10 * i)
    assert producer.flush(TIMEOUT_S) == 0
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": servers, "group.id": f"g-{uuid.uuid4().hex}"}
    )
    try:
        consumer.assign(
            [confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)]
        )
        got: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < COUNT and time.monotonic() < deadline:
            for msg in consumer.consume(COUNT, timeout=1.0):
                assert msg.error() is None, msg.error()
                got.append(msg.value())
        (found,) = consumer.offsets_for_times(
            [confluent_kafka.TopicPartition(topic, 0, PROBE_TS)], timeout=TIMEOUT_S
        )
    finally:
        consumer.close()
    return got, found.offset


def kafka_python_round_trip(servers: str, topic: str, codec: str) -> tuple[list[bytes], int]:
    producer = KafkaProducer(bootstrap_servers=servers, compression_type=codec, linger_ms=100)
    try:
        futures = [
            producer.send(topic, value(i), partition=0, timestamp_ms=BASE_TS + 10 * i)
            for i in range(COUNT)
        ]
        producer.flush(TIMEOUT_S)
        for future in futures:
            future.get(TIMEOUT_S)
    finally:
        producer.close(TIMEOUT_S)
    consumer = KafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False)
    try:
        tp = KpTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning()
        got: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < COUNT and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(r.value for r in records)
        found = consumer.offsets_for_times({tp: PROBE_TS})[tp]
    finally:
        consumer.close()
    return got, found.offset


def aiokafka_round_trip(servers: str, topic: str, codec: str) -> tuple[list[bytes], int]:
    async def run() -> tuple[list[bytes], int]:
        producer = AIOKafkaProducer(
            bootstrap_servers=servers, compression_type=codec, linger_ms=100
        )
        await producer.start()
        try:
            futures = [
                await producer.send(topic, value(i), partition=0, timestamp_ms=BASE_TS + 10 * i)
                for i in range(COUNT)
            ]
            await asyncio.gather(*futures)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = AioTopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got: list[bytes] = []
            async with asyncio.timeout(TIMEOUT_S):
                while len(got) < COUNT:
                    batch = await consumer.getmany(tp, timeout_ms=500)
                    got.extend(r.value for r in batch.get(tp, []))
            found = await consumer.offsets_for_times({tp: PROBE_TS})
        finally:
            await consumer.stop()
        return got, found[tp].offset

    return asyncio.run(run())


CLIENTS: dict[str, Callable[[str, str, str], tuple[list[bytes], int]]] = {
    "confluent-kafka": confluent_round_trip,
    "kafka-python": kafka_python_round_trip,
    "aiokafka": aiokafka_round_trip,
}


@pytest.fixture
def conn(oncelog_session_broker: EmbeddedBroker) -> Iterator[KafkaConnection]:
    with KafkaConnection(
        oncelog_session_broker.bootstrap_servers, client_id="codec-tests", timeout_s=TIMEOUT_S
    ) as connection:
        yield connection


def stored_batches(conn: KafkaConnection, topic: str) -> list[tuple[int, int, int]]:
    """(base offset, last offset, codec) of each stored batch."""
    out = []
    for batch in fetch_batches(conn, topic):
        header = parse_header(batch)
        out.append((header.base_offset, header.last_offset, header.compression))
    return out


def create(servers: str, topic: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": servers})
    (future,) = admin.create_topics([NewTopic(topic, 1, 1, config=configs)]).values()
    future.result(TIMEOUT_S)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_each_codec_is_stored_readable_and_searchable_by_timestamp(
    oncelog_session_broker: EmbeddedBroker, conn: KafkaConnection, client: str, codec: str
) -> None:
    servers = oncelog_session_broker.bootstrap_servers
    topic = f"codec-{client}-{codec}-{uuid.uuid4().hex[:8]}"
    create(servers, topic, {})
    got, found = CLIENTS[client](servers, topic, codec)
    assert got == expected_values()
    batches = stored_batches(conn, topic)
    assert {c for _, _, c in batches} == {CODEC_IDS[codec]}, "stored as the client sent it"
    holder = next(b for b in batches if b[0] <= PROBE_OFFSET <= b[1])
    assert holder[0] < PROBE_OFFSET, "the probe must fall inside a compressed batch"
    assert found == PROBE_OFFSET


@pytest.mark.parametrize(
    ("client", "sent", "topic_codec"),
    [
        ("confluent-kafka", "gzip", "zstd"),
        ("kafka-python", "lz4", "uncompressed"),
        ("aiokafka", "zstd", "snappy"),
        ("kafka-python", "snappy", "gzip"),
        ("confluent-kafka", "none", "lz4"),
    ],
)
def test_topic_compression_type_recompresses_for_real_clients(
    oncelog_session_broker: EmbeddedBroker,
    conn: KafkaConnection,
    client: str,
    sent: str,
    topic_codec: str,
) -> None:
    servers = oncelog_session_broker.bootstrap_servers
    topic = f"recompress-{client}-{uuid.uuid4().hex[:8]}"
    create(servers, topic, {"compression.type": topic_codec})
    got, found = CLIENTS[client](servers, topic, sent)
    assert got == expected_values()
    stored = "none" if topic_codec == "uncompressed" else topic_codec
    assert {c for _, _, c in stored_batches(conn, topic)} == {CODEC_IDS[stored]}
    assert found == PROBE_OFFSET


def test_stored_batches_are_whole(
    conn: KafkaConnection, oncelog_session_broker: EmbeddedBroker
) -> None:
    """The helper reads what the broker serves (guards the tests above against an empty
    fetch passing vacuously)."""
    servers = oncelog_session_broker.bootstrap_servers
    topic = f"whole-{uuid.uuid4().hex[:8]}"
    create(servers, topic, {})
    confluent_round_trip(servers, topic, "zstd")
    batches = fetch_batches(conn, topic)
    assert sum(parse_header(b).record_count for b in batches) == COUNT
    assert all(len(list(iter_stored_batches(b))) == 1 for b in batches)
