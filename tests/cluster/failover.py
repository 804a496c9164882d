"""Helpers for failover tests: numbered producers of the three real clients running in a
background thread, and reading each replica's log straight from its data directory."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from oncelog.storage import LogConfig, PartitionLog
from oncelog.testing.cluster import LocalCluster


class NumberedProducer:
    """Sends 0, 1, 2, ... (the value is the number as text) to partition 0 of ``topic``
    until stopped, and records, for each acknowledged number, the offset it was given."""

    def __init__(
        self,
        client: str,
        servers: str,
        topic: str,
        acks: str,
        idempotent: bool,
        delivery_timeout_ms: int = 120_000,
    ) -> None:
        """``delivery_timeout_ms``: how long a record may go unacknowledged before the
        client gives up on it (and ``stop`` waits for that at most)."""
        self.client = client
        self.delivery_timeout_ms = delivery_timeout_ms
        self.topic = topic
        self.servers = servers
        self.acks = acks
        self.idempotent = idempotent
        self.acked: dict[int, int] = {}  # number -> offset
        self.errors: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"producer-{client}", daemon=True)

    def start(self) -> NumberedProducer:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 120) -> None:
        self._stop.set()
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), f"{self.client} producer did not finish"

    def wait_for_progress(self, count: int, timeout_s: float = 90) -> None:
        target = len(self.acked) + count
        deadline = time.monotonic() + timeout_s
        while len(self.acked) < target:
            assert time.monotonic() < deadline, (
                f"{self.client}: only {len(self.acked)} of {target} acknowledged; errors: "
                f"{self.errors[-5:]}"
            )
            time.sleep(0.05)

    # -- one loop per client ------------------------------------------------------------

    def _run(self) -> None:
        {"confluent": self._confluent, "kafka-python": self._kafka_python, "aiokafka": self._aio}[
            self.client
        ]()

    def _ack(self, number: int, offset: int) -> None:
        self.acked[number] = offset

    def _confluent(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.servers,
                "acks": self.acks,
                "enable.idempotence": self.idempotent,
                "linger.ms": 5,
                "message.timeout.ms": self.delivery_timeout_ms,
            }
        )

        def delivered(error: Any, message: Any) -> None:
            if error is None:
                self._ack(int(message.value()), message.offset())
            else:
                self.errors.append(str(error))

        while not self._stop.is_set():
            for _ in range(50):
                producer.produce(
                    self.topic, str(self.sent).encode(), partition=0, on_delivery=delivered
                )
                self.sent += 1
            producer.poll(0.01)
        producer.flush(120)

    def _kafka_python(self) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(
            bootstrap_servers=self.servers.split(","),
            acks="all" if self.acks == "all" else int(self.acks),
            enable_idempotence=self.idempotent,
            linger_ms=5,
            retries=2**31 - 1,
            delivery_timeout_ms=self.delivery_timeout_ms,
            request_timeout_ms=30_000,
        )
        while not self._stop.is_set():
            for _ in range(50):
                number = self.sent
                future = producer.send(self.topic, str(number).encode(), partition=0)
                future.add_callback(lambda md, n=number: self._ack(n, md.offset))
                future.add_errback(lambda exc: self.errors.append(repr(exc)))
                self.sent += 1
            time.sleep(0.01)
        producer.flush(120)
        producer.close(30)

    def _aio(self) -> None:
        asyncio.run(self._aio_loop())

    async def _aio_loop(self) -> None:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(
            bootstrap_servers=self.servers.split(","),
            acks="all" if self.acks == "all" else int(self.acks),
            enable_idempotence=self.idempotent,
            linger_ms=5,
            request_timeout_ms=30_000,
        )
        await producer.start()
        pending: set[asyncio.Future[Any]] = set()

        def done(number: int, future: asyncio.Future[Any]) -> None:
            pending.discard(future)
            if future.exception() is None:
                self._ack(number, future.result().offset)
            else:
                self.errors.append(repr(future.exception()))

        try:
            while not self._stop.is_set():
                for _ in range(50):
                    number = self.sent
                    future = await producer.send(self.topic, str(number).encode(), partition=0)
                    pending.add(future)
                    future.add_done_callback(lambda f, n=number: done(n, f))
                    self.sent += 1
                await asyncio.sleep(0.01)
            if pending:
                await asyncio.wait(pending, timeout=120)
        finally:
            await producer.stop()


def replica_bytes(data_dir: Path, topic: str, end_offset: int) -> bytes:
    """The stored batches of one replica of partition 0 below ``end_offset`` (the broker
    stopped)."""
    log = PartitionLog.open(data_dir / f"{topic}-0", LogConfig(), clean_shutdown=True)
    try:
        assert log.log_end_offset >= end_offset, (data_dir, log.log_end_offset, end_offset)
        return log.read(0, 1 << 30, max_offset=end_offset)
    finally:
        log.close()


def wait_all_caught_up(cluster: LocalCluster, topic: str, timeout_s: float = 90) -> None:
    """Every broker back in the ISR of partition 0."""
    cluster.wait_for_isr(topic, 0, cluster.broker_ids, timeout_s)


def read_numbered(servers: str, topic: str, timeout_s: float = 60) -> list[int]:
    """Every number in partition 0, in offset order, read as a consumer reads (from the
    leader, up to the high watermark); offsets must be contiguous from 0."""
    partition = 0
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": servers, "group.id": "failover-check", "enable.auto.commit": False}
    )
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout_s)[1]
        consumer.assign([TopicPartition(topic, partition, 0)])
        numbers: list[int] = []
        deadline = time.monotonic() + timeout_s
        while len(numbers) < end:
            assert time.monotonic() < deadline, f"read {len(numbers)} of {end} records"
            for message in consumer.consume(num_messages=10_000, timeout=0.5):
                assert message.error() is None, message.error()
                assert message.offset() == len(numbers), "offsets must be contiguous"
                numbers.append(int(message.value()))
        return numbers
    finally:
        consumer.close()
