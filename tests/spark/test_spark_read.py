"""Reading with Spark: only committed data, the Kafka source's schema and options, several
triggers, and every bad option refused with a clear message."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from .spark_helpers import create_topic, produce_transaction, read_all, unique

KAFKA_SCHEMA = (
    "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
    "timestamp:timestamp,timestampType:int>"
)
WITH_HEADERS = KAFKA_SCHEMA[:-1] + ",headers:array<struct<key:string,value:binary>>>"


def _batch(spark, bootstrap: str, topic: str | None, **options: str):  # type: ignore[no-untyped-def]
    reader = spark.read.format("oncelog").option("kafka.bootstrap.servers", bootstrap)
    if topic is not None:
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
    assert df.schema.simpleString() == KAFKA_SCHEMA  # Spark's 7 columns
    rows = df.collect()
    assert sorted(r.value for r in rows) == sorted(committed)
    assert len({(r.partition, r.offset) for r in rows}) == len(rows)
    (plain_row,) = [r for r in rows if r.value == b"plain"]
    assert plain_row.key is None and plain_row.timestampType == 0
    assert abs(plain_row.timestamp.timestamp() - time.time()) < 600

    with_headers = _batch(spark, bootstrap, topic, includeHeaders="true")
    assert with_headers.schema.simpleString() == WITH_HEADERS
    (plain_row,) = with_headers.where("value = cast('plain' as binary)").collect()
    assert [(h.key, h.value) for h in plain_row.headers] == [("h1", b"x"), ("h2", None)]

    # the same test fails when aborted data leaks: read_uncommitted sees it
    dirty = _batch(
        spark, bootstrap, topic, **{"kafka.isolation.level": "read_uncommitted"}
    ).collect()
    assert sum(r.value.startswith(b"aborted") for r in dirty) == 45
    assert any(r.value == b"open-not-yet" for r in dirty)
    open_txn.abort_transaction(30)


def test_offsets_timestamps_and_split_ranges_bound_a_batch(spark, bootstrap: str) -> None:
    topic = create_topic(bootstrap, unique("bounds"), partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("ts")})
    producer.init_transactions(30)
    stamps: dict[int, int] = {}  # CreateTime of record i: increasing, and after every marker
    for txn, commit in ((range(0, 10), True), (range(10, 15), False), (range(15, 25), True)):
        producer.begin_transaction()
        for i in txn:
            stamps[i] = max(stamps.get(i - 1, 0) + 1, int(time.time() * 1000))
            producer.produce(topic, value=b"v%d" % i, partition=0, timestamp=stamps[i])
        producer.flush(30)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
        time.sleep(0.02)  # the marker's timestamp is before the next transaction's records
    # offsets: 0..9 committed, 10 marker, 11..15 aborted, 16 marker, 17..26 committed, 27 marker

    def values(**options: str) -> list[bytes]:
        return [
            r.value for r in _batch(spark, bootstrap, topic, **options).orderBy("offset").collect()
        ]

    by_offset = values(
        startingOffsets=f'{{"{topic}": {{"0": 3}}}}', endingOffsets=f'{{"{topic}": {{"0": 7}}}}'
    )
    assert by_offset == [b"v%d" % i for i in range(3, 7)]
    # a mid-log timestamp really starts (and ends) there
    by_time = values(startingTimestamp=str(stamps[5]), endingTimestamp=str(stamps[18]))
    assert by_time == [b"v%d" % i for i in (5, 6, 7, 8, 9, 15, 16, 17)]
    by_partition_time = values(startingOffsetsByTimestamp=f'{{"{topic}": {{"0": {stamps[20]}}}}}')
    assert by_partition_time == [b"v%d" % i for i in range(20, 25)]
    # no record is that late: Spark's default strategy fails, "latest" reads nothing
    with pytest.raises(Exception, match="no offset matched from request of topic-partition"):
        values(startingTimestamp=str(stamps[24] + 3_600_000))
    late = str(stamps[24] + 3_600_000)
    assert values(startingTimestamp=late, startingOffsetsByTimestampStrategy="latest") == []
    # ranges split across transaction markers and aborted records return the same records
    whole = values()
    assert whole == [b"v%d" % i for i in (*range(10), *range(15, 25))]
    split = _batch(spark, bootstrap, topic, maxRecordsPerPartition="4")
    assert split.rdd.getNumPartitions() == 7  # 28 offsets in pieces of at most 4
    assert sorted(r.value for r in split.collect()) == sorted(whole)
    assert _batch(spark, bootstrap, topic, minPartitions="3").rdd.getNumPartitions() == 3


def test_small_ranges_share_a_task_reading_each_partition_in_order(spark, bootstrap: str) -> None:
    topic = create_topic(bootstrap, unique("combined"), partitions=3)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(30):
        producer.produce(topic, value=b"v%d" % i, partition=i % 3)
    producer.flush(30)
    combined = _batch(spark, bootstrap, topic)
    assert combined.rdd.getNumPartitions() == 1  # 30 offsets: one task, not three
    rows = [(r.partition, r.offset, r.value) for r in combined.collect()]  # the task's order
    # each partition's records together and in offset order, every one once
    assert rows == sorted(rows)
    assert [v for _, _, v in sorted(rows, key=lambda r: int(r[2][1:]))] == [
        b"v%d" % i for i in range(30)
    ]
    assert _batch(spark, bootstrap, topic, combineRangesUpTo="0").rdd.getNumPartitions() == 3
    assert _batch(spark, bootstrap, topic, combineRangesUpTo="20").rdd.getNumPartitions() == 2
    assert _batch(spark, bootstrap, topic, minPartitions="2").rdd.getNumPartitions() == 3


def test_bad_options_and_missing_topics_fail_clearly(spark, bootstrap: str) -> None:
    topic = create_topic(bootstrap, unique("refuse"), partitions=1)
    with pytest.raises(Exception, match="'startingoffset': did you mean startingOffsets"):
        _batch(spark, bootstrap, topic, startingOffset="earliest")  # refused at load()
    with pytest.raises(Exception, match="starting offset can't be latest for batch queries"):
        _batch(spark, bootstrap, topic, startingOffsets="latest").collect()
    missing = unique("missing")
    with pytest.raises(Exception, match=f"subscribe={missing}: topic {missing} not found"):
        _batch(spark, bootstrap, missing).collect()
    with pytest.raises(Exception, match=f"these partitions do not exist: {topic}-3"):
        _batch(spark, bootstrap, None, assign=f'{{"{topic}": [0, 3]}}').collect()
    # a pattern that matches nothing reads nothing
    assert _batch(spark, bootstrap, None, subscribePattern=unique("nothing")).collect() == []


def test_an_unreachable_cluster_fails_once_within_the_timeout(spark) -> None:
    started = time.monotonic()
    with pytest.raises(Exception, match=r"no answer from the cluster at kafka\.bootstrap\.servers"):
        _batch(spark, "127.0.0.1:9", "t", **{"kafka.socket.timeout.ms": "1500"}).collect()
    assert time.monotonic() - started < 60  # one try of 1.5 s, not fetchOffset.numRetries


def test_a_streaming_option_error_is_reported_as_itself(spark, bootstrap: str, tmp_path) -> None:
    query = (
        spark.readStream.format("oncelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "t")
        .option("endingOffsets", "latest")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    try:
        with pytest.raises(Exception) as failed:
            query.awaitTermination(60)
    finally:
        query.stop()
    error = str(failed.value)
    assert "option endingOffsets: ending offsets are not valid in streaming queries" in error
    assert "UnboundLocalError" not in error


@pytest.mark.slow
def test_streaming_read_across_several_triggers(spark, bootstrap: str, tmp_path) -> None:
    topic = create_topic(bootstrap, unique("stream"), partitions=2)
    seen: dict[int, list[bytes]] = {}

    def collect(batch_df, batch_id: int) -> None:
        seen[batch_id] = [r.value for r in batch_df.collect()]

    def run_available_now() -> object:
        query = (
            spark.readStream.format("oncelog")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribePattern", topic)
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
        return query

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
        query = run_available_now()
    got = [v for batch in seen.values() for v in batch]
    assert sorted(got) == sorted(expected)
    assert len(seen) >= 4  # maxOffsetsPerTrigger split the data into several micro-batches
    assert read_all(bootstrap, topic) != []
    # reportLatestOffset: progress shows the latest offsets the source saw
    latest = query.lastProgress["sources"][0]["latestOffset"]  # type: ignore[attr-defined]
    assert latest is not None and topic + "-more" in latest


@pytest.mark.slow
def test_min_offsets_per_trigger_waits_for_enough_records(spark, bootstrap: str, tmp_path) -> None:
    topic = create_topic(bootstrap, unique("min"), partitions=1)
    produce_transaction(bootstrap, topic, [b"first-%d" % i for i in range(5)])
    sizes: list[int] = []
    query = (
        spark.readStream.format("oncelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("minOffsetsPerTrigger", "20")
        .option("maxTriggerDelay", "1h")
        .load()
        .writeStream.foreachBatch(lambda df, _id: sizes.append(df.count()))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )

    def wait_for(count: int) -> None:
        deadline = time.monotonic() + 60
        while len(sizes) < count:
            assert time.monotonic() < deadline, sizes
            assert query.exception() is None
            time.sleep(0.1)

    try:
        wait_for(1)  # Spark's first trigger runs at once, with what there is
        # 11 offsets (10 records and a marker) are fewer than 20: no batch, trigger after
        # trigger; the same scenario without the minimum runs a batch at once
        produce_transaction(bootstrap, topic, [b"second-%d" % i for i in range(10)])
        time.sleep(3)
        assert sizes == [5]
        produce_transaction(bootstrap, topic, [b"third-%d" % i for i in range(10)])
        wait_for(2)
    finally:
        query.stop()
    assert sizes == [5, 20]
