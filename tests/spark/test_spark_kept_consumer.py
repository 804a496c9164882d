"""A consumer kept across ranges (`consume.KeptConsumers`) returns exactly the records of
each range it is lent for: after a range that continues the last one, after one that
seeks backwards or to another partition, after a reader closed early with records still
prefetched, across aborted transactions under read_committed, after the broker restarted
under it, and after the partition's leader changed. Every range is checked against the
values produced, not against another read."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.spark import reader
from oncelog.spark.consume import (
    MAX_KEPT_CONSUMERS,
    KeptConsumers,
    consumer_settings,
    read_range,
)
from oncelog.spark.offsets import OffsetRange
from oncelog.spark.options import (
    BATCH_FETCH_DEFAULTS,
    FETCH_DEFAULTS,
    ReadOptions,
    parse_read_options,
)
from oncelog.spark.source import OncelogDataSource
from oncelog.testing.cluster import LocalCluster
from oncelog.testing.process import BrokerProcess

from .spark_helpers import committed_aborted_committed, create_topic, unique

GROUP = "kept-consumer-test"


def _options(bootstrap: str, topic: str, **extra: str) -> ReadOptions:
    """A batch read's options, its ranges read through the kept consumers (not through
    Fetch requests of the reader's own, `fetch`, which keep no consumer)."""
    options = parse_read_options(
        {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, **extra}, False
    )
    return dataclasses.replace(options, own_fetch=False)


def _read(
    pool: KeptConsumers, options: ReadOptions, topic: str, partition: int, start: int, end: int
) -> list[tuple[int, bytes]]:
    rows: list[tuple[int, bytes]] = []
    for batch in read_range(options, OffsetRange(topic, partition, start, end), GROUP, pool):
        rows.extend(
            zip(batch.column("offset").to_pylist(), batch.column("value").to_pylist(), strict=True)
        )
    return rows


def _kept(pool: KeptConsumers, options: ReadOptions) -> object:
    """The consumer the pool keeps for `options` (lent and given straight back)."""
    with pool.lend(consumer_settings(options, GROUP)) as consumer:
        return consumer


def _plain_topic(bootstrap: str, per_partition: int) -> str:
    topic = create_topic(bootstrap, unique("kept"), partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition in (0, 1):
        for i in range(per_partition):
            producer.produce(topic, value=b"p%d-%05d" % (partition, i), partition=partition)
    assert producer.flush(30) == 0
    return topic


def _expected(partition: int, start: int, end: int) -> list[tuple[int, bytes]]:
    return [(i, b"p%d-%05d" % (partition, i)) for i in range(start, end)]


def test_a_kept_consumer_returns_exactly_each_range(bootstrap: str) -> None:
    topic = _plain_topic(bootstrap, 5_000)
    options = _options(bootstrap, topic)
    pool = KeptConsumers()
    try:
        first = _kept(pool, options)
        for partition, start, end in [
            (0, 0, 1_000),
            (0, 1_000, 1_010),  # starts where the last one ended
            (0, 500, 510),  # backwards, inside what was read
            (1, 0, 10),  # another partition
            (0, 4_990, 5_000),  # forwards, to the end of the partition
            (0, 1_010, 1_011),
        ]:
            assert _read(pool, options, topic, partition, start, end) == _expected(
                partition, start, end
            ), (partition, start, end)
            assert len(pool) == 1
        # a reader closed after its first batch leaves thousands of records prefetched
        early = read_range(options, OffsetRange(topic, 0, 10, 4_000), GROUP, pool)
        assert next(early).num_rows > 0
        early.close()
        assert _read(pool, options, topic, 0, 20, 25) == _expected(0, 20, 25)
        assert _read(pool, options, topic, 0, 4_000, 4_003) == _expected(0, 4_000, 4_003)
        assert _kept(pool, options) is first  # one consumer did all of it
    finally:
        pool.close()


def test_without_a_new_assignment_a_kept_consumer_returns_the_wrong_records(
    bootstrap: str,
) -> None:
    """The control: a consumer reused by simply consuming on (no assign at the range's
    start) returns what it prefetched for the previous range, not offsets 20..24."""
    topic = _plain_topic(bootstrap, 2_000)
    consumer = Consumer(consumer_settings(_options(bootstrap, topic), GROUP))
    try:
        consumer.assign([TopicPartition(topic, 0, 10)])
        assert consumer.consume(100, 30)
        offsets = [m.offset() for m in consumer.consume(5, 30) if m.error() is None]
        assert offsets and offsets != list(range(20, 25))
    finally:
        consumer.close()


def test_a_failed_range_closes_its_consumer(bootstrap: str) -> None:
    topic = create_topic(bootstrap, unique("kept-fail"), partitions=1)
    options = _options(bootstrap, topic, **{"kafkaConsumer.pollTimeoutMs": "500"})
    pool = KeptConsumers()
    with pytest.raises(TimeoutError):  # offsets 0..4 never come
        _read(pool, options, topic, 0, 0, 5)
    assert len(pool) == 0


def test_a_worker_keeps_at_most_a_few_consumers_the_least_recently_used_closed(
    bootstrap: str,
) -> None:
    """Every batch read has its own group id, hence its own kept consumer."""
    options = _options(bootstrap, "any-topic")
    pool = KeptConsumers()
    lent = []
    try:
        for i in range(MAX_KEPT_CONSUMERS + 2):
            with pool.lend(consumer_settings(options, f"{GROUP}-{i}")) as consumer:
                lent.append(consumer)
            assert len(pool) == min(i + 1, MAX_KEPT_CONSUMERS)
        with pool.lend(consumer_settings(options, f"{GROUP}-{MAX_KEPT_CONSUMERS + 1}")) as last:
            assert last is lent[-1]
        with pool.lend(consumer_settings(options, f"{GROUP}-0")) as first:
            assert first is not lent[0]  # closed as the least recently used
        with pytest.raises(RuntimeError):  # confluent-kafka: the consumer is closed
            lent[0].assignment()
    finally:
        pool.close()


def test_a_kept_consumer_skips_aborted_transactions_in_every_range(bootstrap: str) -> None:
    """Offsets 0-9 committed (marker 10), 11-20 aborted (marker 21), 22-31 committed
    (marker 32), read with one kept consumer under read_committed."""
    topic, values = committed_aborted_committed(bootstrap, "kept-txn")
    committed = dict(
        zip(list(range(10)) + list(range(22, 32)), values[:10] + values[20:], strict=True)
    )

    def wanted(start: int, end: int) -> list[tuple[int, bytes]]:
        return [(o, v) for o, v in sorted(committed.items()) if start <= o < end]

    options = _options(bootstrap, topic)
    pool = KeptConsumers()
    try:
        for start, end in [
            (0, 33),
            (15, 25),  # starts inside the aborted transaction
            (5, 12),  # backwards, across the commit marker
            (11, 22),  # nothing but the aborted transaction and its marker: no rows
            (22, 33),  # right after a range that returned nothing
            (0, 33),
        ]:
            assert _read(pool, options, topic, 0, start, end) == wanted(start, end), (start, end)
        assert len(pool) == 1
        # the control: read_uncommitted does return the aborted records
        uncommitted = _options(bootstrap, topic, **{"kafka.isolation.level": "read_uncommitted"})
        assert [v for _, v in _read(pool, uncommitted, topic, 0, 0, 33)] == values
    finally:
        pool.close()


@pytest.mark.slow
def test_a_kept_consumer_reads_exact_ranges_after_the_broker_restarts(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "broker", {"num.partitions": "1"}) as broker:
        bootstrap = broker.bootstrap_servers
        topic = _plain_topic(bootstrap, 1_000)
        options = _options(bootstrap, topic)
        pool = KeptConsumers()
        try:
            assert _read(pool, options, topic, 0, 0, 600) == _expected(0, 0, 600)
            first = _kept(pool, options)
            broker.restart()  # same port: the kept consumer's connections all break
            assert _read(pool, options, topic, 0, 600, 1_000) == _expected(0, 600, 1_000)
            assert _read(pool, options, topic, 1, 100, 200) == _expected(1, 100, 200)
            assert _read(pool, options, topic, 0, 300, 310) == _expected(0, 300, 310)
            assert _kept(pool, options) is first
        finally:
            pool.close()


@pytest.mark.slow
def test_a_kept_consumer_reads_exact_ranges_after_the_leader_changed(tmp_path: Path) -> None:
    """Two brokers, the partition led by broker 1 and replicated to 2 (acks=all); broker 1
    is killed between two ranges and the kept consumer must find the new leader itself."""
    with LocalCluster(tmp_path / "cluster", brokers=2) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        topic = unique("kept-leader")
        admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2]])])[topic].result(60)
        assert cluster.wait_for_leader(topic, 0) == 1
        cluster.wait_for_isr(topic, 0, {1, 2})
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
        for i in range(1_000):
            producer.produce(topic, value=b"p0-%05d" % i, partition=0)
        assert producer.flush(60) == 0
        options = _options(cluster.address(2), topic)
        pool = KeptConsumers()
        try:
            assert _read(pool, options, topic, 0, 0, 600) == _expected(0, 0, 600)
            first = _kept(pool, options)
            cluster.kill(1)
            assert cluster.wait_for_leader(topic, 0, not_in={1}) == 2
            assert _read(pool, options, topic, 0, 600, 1_000) == _expected(0, 600, 1_000)
            assert _read(pool, options, topic, 0, 100, 110) == _expected(0, 100, 110)
            assert _kept(pool, options) is first
        finally:
            pool.close()


def test_the_range_consumer_has_the_fetch_settings_of_a_range_reader_unless_overridden() -> None:
    def streaming(**extra: str) -> ReadOptions:
        return parse_read_options(
            {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t", **extra}, True
        )

    settings = consumer_settings(streaming(), GROUP)
    # a held fetch at a range's end delays the kept consumer's next range (bench/tail_ranges.py)
    assert settings["fetch.wait.max.ms"] == "1" and settings["fetch.queue.backoff.ms"] == "10"
    mine = consumer_settings(streaming(**{"kafka.fetch.wait.max.ms": "50"}), GROUP)
    assert mine["fetch.wait.max.ms"] == "50"
    # a batch read's large ranges: fewer empty fetches while the reader drains its queue
    batch = consumer_settings(_options("127.0.0.1:9", "t"), GROUP)
    assert batch["fetch.wait.max.ms"] == "10" and batch["queued.min.messages"] == "200000"
    overridden = consumer_settings(
        _options("127.0.0.1:9", "t", **{"kafka.fetch.wait.max.ms": "2"}), GROUP
    )
    assert overridden["fetch.wait.max.ms"] == "2"


def test_batch_reads_wait_longer_for_an_empty_fetch_than_streaming_reads(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """From the data source to the range reader: the batch reader's ranges are read with
    the batch read's fetch settings, the stream reader's with the streaming ones."""
    asked: list[object] = []

    def read_range_spy(options, rng, group_id, consumers=None):  # type: ignore[no-untyped-def]
        asked.append(options.fetch_defaults)
        return iter(())

    monkeypatch.setattr(reader, "read_range", read_range_spy)
    task = reader.OffsetRangePartition(0, (OffsetRange("t", 0, 0, 5),))
    source = OncelogDataSource({"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t"})
    schema = source.schema()
    list(source.reader(schema).read(task))
    list(source.streamReader(schema).read(task))
    assert asked == [BATCH_FETCH_DEFAULTS, FETCH_DEFAULTS]
