"""The sink: exactly-once under task failures and replays; at_least_once shows the
duplicates the same scenarios produce without the protocol (so these tests can fail)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from oncelog.spark.options import AT_LEAST_ONCE, EXACTLY_ONCE

from .spark_helpers import create_topic, produce_transaction, read_all, unique

FAIL_AFTER = 30


def _frame(spark, n: int, tag: str = "v"):  # type: ignore[no-untyped-def]
    # two partitions, so two write tasks, each failing once when asked to
    return spark.range(0, n, 1, 2).selectExpr(
        "cast(id as string) as key", f"concat('{tag}', id) as value"
    )


def _write(df, bootstrap: str, topic: str, guarantee: str, sink_id: str, **options: object) -> None:  # type: ignore[no-untyped-def]
    writer = (
        df.write.format("oncelog_faults" if "failAfter" in options else "oncelog")
        .mode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("delivery.guarantee", guarantee)
        .option("sink.id", sink_id)
    )
    for k, v in options.items():
        writer = writer.option(k, str(v))
    writer.save()


@pytest.mark.parametrize("guarantee", [EXACTLY_ONCE, AT_LEAST_ONCE])
def test_batch_write_when_a_task_fails_after_part_of_its_output(
    spark, bootstrap: str, guarantee: str
) -> None:
    topic = create_topic(bootstrap, unique("out-fail"), partitions=2)
    _write(
        _frame(spark, 200),
        bootstrap,
        topic,
        guarantee,
        unique("sink"),
        failAfter=FAIL_AFTER,
    )
    counts = Counter(read_all(bootstrap, topic))
    assert set(counts) == {b"v%d" % i for i in range(200)}
    duplicates = sum(c - 1 for c in counts.values())
    if guarantee == EXACTLY_ONCE:
        assert duplicates == 0
        # the failed attempts' records did reach the log, inside transactions that were aborted
        assert len(read_all(bootstrap, topic, "read_uncommitted")) == 200 + 2 * FAIL_AFTER
    else:
        assert duplicates == 2 * FAIL_AFTER  # each task's first attempt, written again


@pytest.mark.parametrize("guarantee", [EXACTLY_ONCE, AT_LEAST_ONCE])
def test_batch_write_replayed_writes_nothing_again(spark, bootstrap: str, guarantee: str) -> None:
    topic = create_topic(bootstrap, unique("out-replay"), partitions=2)
    sink = unique("sink")
    df = _frame(spark, 100)
    _write(df, bootstrap, topic, guarantee, sink)
    _write(df, bootstrap, topic, guarantee, sink)  # the same write (same sink.id, write.id 0)
    counts = Counter(read_all(bootstrap, topic))
    assert set(counts) == {b"v%d" % i for i in range(100)}
    assert sum(counts.values()) == (100 if guarantee == EXACTLY_ONCE else 200)


def test_replay_with_different_input_is_refused_and_a_new_write_id_writes(
    spark, bootstrap: str
) -> None:
    topic = create_topic(bootstrap, unique("out-refuse"), partitions=2)
    sink = unique("sink")
    _write(_frame(spark, 50), bootstrap, topic, EXACTLY_ONCE, sink)
    with pytest.raises(Exception, match="already written with 25 rows and its replay has 30"):
        _write(_frame(spark, 60), bootstrap, topic, EXACTLY_ONCE, sink)
    _write(_frame(spark, 10, "w"), bootstrap, topic, EXACTLY_ONCE, sink, **{"write.id": 1})
    assert sorted(read_all(bootstrap, topic)) == sorted(
        [b"v%d" % i for i in range(50)] + [b"w%d" % i for i in range(10)]
    )
    with pytest.raises(Exception, match="ahead of batch 0"):  # write ids only move forward
        _write(_frame(spark, 10, "x"), bootstrap, topic, EXACTLY_ONCE, sink, **{"write.id": 0})


def test_missing_sink_id_and_topic_are_refused_before_any_task(spark, bootstrap: str) -> None:
    df = _frame(spark, 1)
    with pytest.raises(Exception, match=r"sink\.id is required"):
        df.write.format("oncelog").mode("append").option(
            "kafka.bootstrap.servers", bootstrap
        ).option("topic", "t").save()
    with pytest.raises(Exception, match="no topic to write to"):
        df.write.format("oncelog").mode("append").option(
            "kafka.bootstrap.servers", bootstrap
        ).option("sink.id", "x").save()


def _stream_copy(
    spark,
    bootstrap: str,
    source: str,
    target: str,
    guarantee: str,
    sink: str,  # type: ignore[no-untyped-def]
    checkpoint: Path,
    combine: str = "1000",
    **options: object,
) -> None:
    stream = (
        spark.readStream.format("oncelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "60")
        .option("combineRangesUpTo", combine)  # 60 offsets of 2 partitions: 1 task or 2
        .load()
        .selectExpr("key", "upper(cast(value as string)) as value", "partition")
        .writeStream.format("oncelog_faults" if "failAfter" in options else "oncelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", target)
        .option("delivery.guarantee", guarantee)
        .option("sink.id", sink)
        .option("checkpointLocation", str(checkpoint))
    )
    for k, v in options.items():
        stream = stream.option(k, str(v))
    query = stream.trigger(availableNow=True).start()
    try:
        query.awaitTermination(180)
    finally:
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("guarantee", "first_plan", "replay_plan"),
    [
        # the replay is planned as the batch was, whatever the options at the restart
        (EXACTLY_ONCE, "0", "1000"),
        (EXACTLY_ONCE, "1000", "0"),
        (AT_LEAST_ONCE, "1000", "1000"),
    ],
)
def test_streaming_write_with_task_failures_then_a_replayed_batch(
    spark, bootstrap: str, guarantee: str, first_plan: str, replay_plan: str, tmp_path: Path
) -> None:
    source = create_topic(bootstrap, unique("src"), partitions=2)
    target = create_topic(bootstrap, unique("dst"), partitions=2)
    values = [b"order-%03d" % i for i in range(150)]
    produce_transaction(bootstrap, source, values[:100])
    produce_transaction(bootstrap, source, [b"aborted"] * 20, commit=False)
    produce_transaction(bootstrap, source, values[100:])
    expected = {v.upper() for v in values}
    sink, checkpoint = unique("sink"), tmp_path / "ck"

    # (a) every task's first attempt fails after writing part of its output
    _stream_copy(
        spark,
        bootstrap,
        source,
        target,
        guarantee,
        sink,
        checkpoint,
        first_plan,
        failAfter=10,
    )
    first = Counter(read_all(bootstrap, target))
    assert set(first) == expected
    # (c) the last batch is replayed: its commit is dropped from the checkpoint, as when the
    # driver dies after the tasks committed and before Spark recorded the batch as done
    commits = sorted(
        (checkpoint / "commits").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1
    )
    last = [p for p in commits if p.name.isdigit()][-1]
    os.remove(last)
    crc = last.with_name(f".{last.name}.crc")  # Hadoop's checksum file would block the rewrite
    if crc.exists():
        os.remove(crc)
    _stream_copy(spark, bootstrap, source, target, guarantee, sink, checkpoint, replay_plan)
    final = Counter(read_all(bootstrap, target))
    assert set(final) == expected
    duplicates = sum(c - 1 for c in final.values())
    if guarantee == EXACTLY_ONCE:
        assert duplicates == 0 and final == first
        # a reset checkpoint with the same sink.id would rewrite from batch 0: refused
        with pytest.raises(Exception, match="ahead of batch 0"):
            _stream_copy(spark, bootstrap, source, target, guarantee, sink, tmp_path / "ck-new")
    else:
        assert sum(first.values()) > len(expected)  # failed attempts' output stays
        assert sum(final.values()) > sum(first.values())  # the replayed batch is written twice
