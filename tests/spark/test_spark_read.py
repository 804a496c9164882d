"""Reading with Spark: only committed data, the Kafka source's schema, several triggers."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from .spark_helpers import create_topic, produce_transaction, read_all, unique

KAFKA_SCHEMA = (
    "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
    "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>"
)


def _batch(spark, bootstrap: str, topic: str, **options: str):  # type: ignore[no-untyped-def]
    reader = spark.read.format("oncelog").option("kafka.bootstrap.servers", bootstrap)
    reader = reader.option("subscribe", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_batch_read_returns_exactly_the_committed_records(spark, bootstrap: str) -> None:
    topic = create_topic(bootstrap, unique("committed"), partitions=2)
    committed: list[bytes] = []
    for round_ in range(3):
        ok = [b"ok-%d-%d" % (round_, i) for i in range(20)]
        produce_transaction(bootstrap, topic, ok)
        committed += ok
        produce_transaction(
            bootstrap, topic, [b"aborted-%d-%d" % (round_, i) for i in range(15)], commit=False
        )
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    plain.produce(topic, value=b"plain", key=None, headers=[("h1", b"x"), ("h2", None)])
    plain.flush(30)
    committed.append(b"plain")
    # an open transaction holds the LSO: neither it nor anything after it is read. It must
    # stay open across two Spark jobs, which take minutes on a loaded machine: with
    # librdkafka's default transaction.timeout.ms (60 s) the broker aborts it (and fences
    # the producer, as Kafka does) before the test ends it. The broker's maximum is 15 min.
    open_txn = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": unique("open"),
            "transaction.timeout.ms": 900_000,
        }
    )
    open_txn.init_transactions(30)
    open_txn.begin_transaction()
    open_txn.produce(topic, value=b"open-not-yet", partition=0)
    open_txn.flush(30)

    df = _batch(spark, bootstrap, topic)
    assert df.schema.simpleString() == KAFKA_SCHEMA
    rows = df.collect()
    assert sorted(r.value for r in rows) == sorted(committed)
    assert len({(r.partition, r.offset) for r in rows}) == len(rows)
    (with_headers,) = [r for r in rows if r.value == b"plain"]
    assert with_headers.key is None and with_headers.timestampType == 0
    assert [(h.key, h.value) for h in with_headers.headers] == [("h1", b"x"), ("h2", None)]
    assert abs(with_headers.timestamp.timestamp() - time.time()) < 600

    # the same test fails when aborted data leaks: read_uncommitted sees it
    dirty = _batch(
        spark, bootstrap, topic, **{"kafka.isolation.level": "read_uncommitted"}
    ).collect()
    assert sum(r.value.startswith(b"aborted") for r in dirty) == 45
    assert any(r.value == b"open-not-yet" for r in dirty)
    open_txn.abort_transaction(30)


def test_batch_read_offset_json_bounds(spark, bootstrap: str) -> None:
    topic = create_topic(bootstrap, unique("bounds"), partitions=1)
    produce_transaction(bootstrap, topic, [b"v%d" % i for i in range(10)], partition=0)
    # offsets 0..9 are records, 10 is the commit marker
    df = _batch(
        spark,
        bootstrap,
        topic,
        startingOffsets=f'{{"{topic}": {{"0": 3}}}}',
        endingOffsets=f'{{"{topic}": {{"0": 7}}}}',
    )
    assert [(r.offset, r.value) for r in df.orderBy("offset").collect()] == [
        (i, b"v%d" % i) for i in range(3, 7)
    ]


@pytest.mark.slow
def test_streaming_read_across_several_triggers(spark, bootstrap: str, tmp_path) -> None:
    topic = create_topic(bootstrap, unique("stream"), partitions=2)
    seen: dict[int, list[bytes]] = {}

    def collect(batch_df, batch_id: int) -> None:
        seen[batch_id] = [r.value for r in batch_df.collect()]

    def run_available_now() -> None:
        query = (
            spark.readStream.format("oncelog")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribePattern", topic + ".*")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "25")
            .load()
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    expected: list[bytes] = []
    for round_ in range(2):
        values = [b"r%d-%d" % (round_, i) for i in range(30)]
        produce_transaction(bootstrap, topic, values)
        produce_transaction(bootstrap, topic, [b"aborted"] * 10, commit=False)
        expected += values
        if round_ == 1:  # a new topic matching the pattern is picked up
            extra = create_topic(bootstrap, topic + "-more", partitions=1)
            produce_transaction(bootstrap, extra, [b"more-%d" % i for i in range(5)])
            expected += [b"more-%d" % i for i in range(5)]
        run_available_now()
    got = [v for batch in seen.values() for v in batch]
    assert sorted(got) == sorted(expected)
    assert len(seen) >= 4  # maxOffsetsPerTrigger split the data into several micro-batches
    assert read_all(bootstrap, topic) != []
