"""aiokafka (asyncio client, non-flexible API versions only) against oncelog."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from oncelog.testing import EmbeddedBroker

BASE_TIMESTAMP = 1_700_000_000_000


async def produce_and_consume(bootstrap: str, topic: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        sent = [
            await producer.send_and_wait(
                topic, b"value-%d" % i, partition=0, timestamp_ms=BASE_TIMESTAMP + i
            )
            for i in range(200)
        ]
    finally:
        await producer.stop()
    assert [m.offset for m in sent] == list(range(200))

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got: list[bytes] = []
        async with asyncio.timeout(20):
            while len(got) < 200:
                batch = await consumer.getmany(tp, timeout_ms=500)
                got.extend(r.value for r in batch.get(tp, []))
        assert got == [b"value-%d" % i for i in range(200)]
        found = await consumer.offsets_for_times({tp: BASE_TIMESTAMP + 150})
        assert found[tp].offset == 150
        assert await consumer.end_offsets([tp]) == {tp: 200}
    finally:
        await consumer.stop()


def test_produce_consume_and_offsets_for_times(
    oncelog_session_broker: EmbeddedBroker, topic_name: str
) -> None:
    asyncio.run(produce_and_consume(oncelog_session_broker.bootstrap_servers, topic_name))
