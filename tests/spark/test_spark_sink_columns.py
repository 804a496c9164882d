"""The columns of Spark's Kafka sink taking effect (`topic`, `headers`), and the source's
`assign` reading only what it names: each shown end to end through Spark, and read back
with a plain confluent-kafka consumer."""

from __future__ import annotations

from collections import Counter

import pytest

from .spark_helpers import create_topic, produce_transaction, read_messages, unique


def _save(df, bootstrap: str, **options: str) -> None:  # type: ignore[no-untyped-def]
    writer = (
        df.write.format("oncelog")
        .mode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("sink.id", unique("sink"))
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def test_each_row_goes_to_its_topic_column_unless_the_topic_option_is_set(
    spark, bootstrap: str
) -> None:
    """Spark's sink: the `topic` column names each row's topic; the `topic` option, when
    given, overrides the column."""
    first, second, override = (create_topic(bootstrap, unique(n), 1) for n in "abc")
    rows = [(f"v{i}", first if i % 2 else second) for i in range(20)]
    df = spark.createDataFrame(rows, "value string, topic string")
    _save(df, bootstrap)
    assert sorted(m.value() for m in read_messages(bootstrap, first)) == sorted(
        b"v%d" % i for i in range(1, 20, 2)
    )
    assert sorted(m.value() for m in read_messages(bootstrap, second)) == sorted(
        b"v%d" % i for i in range(0, 20, 2)
    )
    _save(df, bootstrap, topic=override)
    assert Counter(m.value() for m in read_messages(bootstrap, override)) == Counter(
        b"v%d" % i for i in range(20)
    )
    assert len(read_messages(bootstrap, first)) == 10  # nothing more went to the column's topics


def test_a_headers_column_is_written_as_each_record_s_headers(spark, bootstrap: str) -> None:
    topic = create_topic(bootstrap, unique("headers"), 2)
    df = spark.createDataFrame(
        [("v1", [("trace", b"t-1"), ("trace", b"t-2")]), ("v2", []), ("v3", None)],
        "value string, headers array<struct<key: string, value: binary>>",
    )
    _save(df, bootstrap, topic=topic)
    written = {m.value(): m.headers() for m in read_messages(bootstrap, topic)}
    assert written == {b"v1": [("trace", b"t-1"), ("trace", b"t-2")], b"v2": None, b"v3": None}


def test_a_headers_column_of_another_type_is_refused_before_any_task(spark, bootstrap: str) -> None:
    """As Spark's KafkaWriter.validateQuery refuses it (else every task failed on it)."""
    topic = create_topic(bootstrap, unique("bad-headers"), 1)
    df = spark.createDataFrame([("v", {"trace": "t"})], "value string, headers map<string,string>")
    with pytest.raises(Exception, match=r"column 'headers' must be array<struct<key:string"):
        _save(df, bootstrap, topic=topic)
    assert read_messages(bootstrap, topic) == []


def test_assign_reads_only_the_partitions_it_names(spark, bootstrap: str) -> None:
    topic = create_topic(bootstrap, unique("assign"), 3)
    for partition in range(3):
        values = [b"p%d-%d" % (partition, i) for i in range(5)]
        produce_transaction(bootstrap, topic, values, partition=partition)
    read = (
        spark.read.format("oncelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("assign", f'{{"{topic}": [0, 2]}}')
        .load()
        .select("value", "partition")
        .collect()
    )
    assert sorted((bytes(r.value), r.partition) for r in read) == sorted(
        (b"p%d-%d" % (p, i), p) for p in (0, 2) for i in range(5)
    )
    with pytest.raises(Exception, match="option assign: no topic-partitions to assign"):
        spark.read.format("oncelog").option("kafka.bootstrap.servers", bootstrap).option(
            "assign", "{}"
        ).load()
