"""Streaming queries whose offsets say records were lost, and a trigger put off by
minOffsetsPerTrigger that maxTriggerDelay fires anyway: the options in real queries.

Spark's Kafka source reports data loss when a batch is planned
(`getOffsetRangesFromResolvedOffsets`): partitions gone from the subscription, a
partition's latest offset below the batch's start (the topic deleted and made again), and
an added partition that does not start at offset 0. Under failOnDataLoss=true (the
default) the query fails, naming what was lost; under false it goes on from the new
offsets, warned.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions
from pyspark.errors import StreamingQueryException

from .spark_helpers import create_topic, unique

TIMEOUT_S = 30.0


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for value in values:
        producer.produce(topic, value=value, partition=0)
    assert producer.flush(TIMEOUT_S) == 0


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _source(spark: Any, bootstrap: str, **options: str) -> Any:
    """The oncelog stream from the earliest offsets, with `options`."""
    reader = spark.readStream.format("oncelog").option("kafka.bootstrap.servers", bootstrap)
    for name, value in {"startingOffsets": "earliest", **options}.items():
        reader = reader.option(name, value)
    return reader.load()


def _run_available_now(
    spark: Any, bootstrap: str, pattern: str, checkpoint: Path, **options: str
) -> tuple[list[bytes], BaseException | None]:
    """One availableNow run of the query over `pattern` from `checkpoint`: the values it
    wrote, and its error (None when it ended cleanly)."""
    seen: list[bytes] = []

    def collect(batch_df: Any, batch_id: int) -> None:
        seen.extend(r.value for r in batch_df.collect())

    query = (
        _source(spark, bootstrap, subscribePattern=pattern, **options)
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        ended = query.awaitTermination(120)
    except StreamingQueryException:
        ended = True  # failed: returned below
    finally:
        query.stop()
    assert ended, "the availableNow run did not end within 120 s"
    return sorted(seen), query.exception()


def test_a_topic_made_again_is_data_loss_failed_or_skipped_by_fail_on_data_loss(
    spark, bootstrap: str, tmp_path: Path
) -> None:
    topic = create_topic(bootstrap, unique("remade"), partitions=1)
    checkpoint = tmp_path / "ck"
    _produce(bootstrap, topic, [b"a%d" % i for i in range(10)])  # offsets 0..9
    seen, error = _run_available_now(spark, bootstrap, topic, checkpoint)
    assert error is None and seen == [b"a%d" % i for i in range(10)]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(TIMEOUT_S)
    _until(lambda: topic not in admin.list_topics(timeout=TIMEOUT_S).topics, "topic deleted")
    create_topic(bootstrap, topic, partitions=1)
    _produce(bootstrap, topic, [b"b0", b"b1", b"b2"])  # offsets 0..2 again

    seen, error = _run_available_now(spark, bootstrap, topic, checkpoint)
    assert seen == [] and error is not None
    assert f"partition {topic}-0's offset was changed from 10 to 3" in str(error)
    assert "failOnDataLoss=false" in str(error)

    # without failOnDataLoss the query goes on from the new offsets: b0-b2 were lost (as
    # with Spark's source), what comes after is read
    seen, error = _run_available_now(spark, bootstrap, topic, checkpoint, failOnDataLoss="false")
    assert error is None and seen == []
    _produce(bootstrap, topic, [b"b3", b"b4"])
    seen, error = _run_available_now(spark, bootstrap, topic, checkpoint, failOnDataLoss="false")
    assert error is None and seen == [b"b3", b"b4"]


def test_a_partition_gone_from_the_subscription_is_data_loss(
    spark, bootstrap: str, tmp_path: Path
) -> None:
    prefix = unique("gone")
    kept, dropped = f"{prefix}-kept", f"{prefix}-dropped"
    for topic in (kept, dropped):
        create_topic(bootstrap, topic, partitions=1)
        _produce(bootstrap, topic, [topic.encode()])
    checkpoint = tmp_path / "ck"
    seen, error = _run_available_now(spark, bootstrap, f"{prefix}-.*", checkpoint)
    assert error is None and seen == sorted([kept.encode(), dropped.encode()])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([dropped])[dropped].result(TIMEOUT_S)
    _until(lambda: dropped not in admin.list_topics(timeout=TIMEOUT_S).topics, "topic deleted")
    _produce(bootstrap, kept, [b"more"])
    seen, error = _run_available_now(spark, bootstrap, f"{prefix}-.*", checkpoint)
    assert error is not None and f"partitions gone: {dropped}-0" in str(error)
    # without failOnDataLoss the query goes on with the partitions left
    pattern = f"{prefix}-.*"
    seen, error = _run_available_now(spark, bootstrap, pattern, checkpoint, failOnDataLoss="false")
    assert error is None and seen == [b"more"]


def test_an_added_partition_that_lost_its_first_records_is_data_loss(
    spark, bootstrap: str, tmp_path: Path
) -> None:
    """failOnDataLoss's check of a partition that appears between two batches: it must
    start at offset 0, or its first records are gone (deleted by retention before the
    query saw them). The log start of the new partition is moved with DeleteRecords."""
    topic = create_topic(bootstrap, unique("added"), partitions=1)
    checkpoint = tmp_path / "ck"
    _produce(bootstrap, topic, [b"first"])
    seen, error = _run_available_now(spark, bootstrap, topic, checkpoint)
    assert error is None and seen == [b"first"]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic, 2)])[topic].result(TIMEOUT_S)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(3):
        producer.produce(topic, value=b"new-%d" % i, partition=1)
    assert producer.flush(TIMEOUT_S) == 0
    _delete_records(admin, topic, 1, before=2)  # new-0 and new-1 gone

    seen, error = _run_available_now(spark, bootstrap, topic, checkpoint)
    assert error is not None
    assert f"added partitions do not start at offset 0 ({topic}-1 starts at 2)" in str(error)
    seen, error = _run_available_now(spark, bootstrap, topic, checkpoint, failOnDataLoss="false")
    assert error is None and seen == [b"new-2"]


def _delete_records(admin: AdminClient, topic: str, partition: int, before: int) -> None:
    from confluent_kafka import TopicPartition

    (future,) = admin.delete_records([TopicPartition(topic, partition, before)]).values()
    assert future.result(TIMEOUT_S).low_watermark == before


def test_max_trigger_delay_fires_a_batch_below_min_offsets_per_trigger(
    spark, bootstrap: str, tmp_path: Path
) -> None:
    """minOffsetsPerTrigger=1000 and 5 records at a time: the first trigger is never put
    off (Spark's rule); the next batch is put off until maxTriggerDelay (10 s, longer than
    a first batch takes) has passed since the last trigger, then runs with what there is.
    The trigger times are Spark's own (the progress reports' timestamps)."""
    topic = create_topic(bootstrap, unique("delayed"), partitions=1)
    _produce(bootstrap, topic, [b"a%d" % i for i in range(5)])
    delayed = {"minOffsetsPerTrigger": "1000", "maxTriggerDelay": "10s"}
    query = (
        _source(spark, bootstrap, subscribe=topic, **delayed)
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )

    def batches() -> list[tuple[float, int]]:
        """(trigger time in s, rows) of every batch that read rows."""
        return [
            (_epoch_s(p["timestamp"]), p["numInputRows"])
            for p in query.recentProgress
            if p["numInputRows"] > 0
        ]

    try:
        _until(lambda: len(batches()) >= 1, "the first batch (never put off)")
        _produce(bootstrap, topic, [b"b%d" % i for i in range(5)])
        _until(lambda: sum(n for _, n in batches()) >= 10, "the batch maxTriggerDelay fires")
    finally:
        query.stop()
    (first, first_rows), (second, _), *_ = batches()
    assert first_rows == 5 and all(n < 1000 for _, n in batches())
    assert second - first >= 9.5  # put off until the delay passed, not run at once


def _epoch_s(timestamp: str) -> float:
    """Seconds since the epoch of a progress report's ISO 8601 UTC timestamp."""
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


@pytest.fixture(autouse=True)
def _no_stray_queries(spark) -> Any:  # type: ignore[no-untyped-def]
    yield
    for query in spark.streams.active:
        query.stop()
