"""An exactly-once task whose input was cut off commits nothing (`oncelog.spark.input_end`).

When a write task's input fails upstream, Spark gives the task up and closes the Python
worker's input while the worker lives; pyarrow takes that end of file, at a record batch's
end, for the end of the stream. The Spark test cuts a task's input that way (an upstream
Python stage fails after some batches); its control (`trustInputEnd=true`) shows the part
committed as if it were the whole, and the rerun of the same write then refused. A
streaming write takes the same check (`OncelogStreamWriter.write`) over the same JVM path
(`PythonStreamingWriterFactory` extends `PythonBatchWriterFactory`); the exactly_once
streaming tests of test_spark_write.py run its lookup of the worker's input in every task."""

from __future__ import annotations

import io
import struct
import threading
from collections.abc import Iterator

import pyarrow as pa
import pytest
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from oncelog.spark.input_end import InputCut, checked, worker_input
from oncelog.spark.options import EXACTLY_ONCE
from oncelog.spark.producers import ClientPool
from oncelog.spark.writer import TaskAttempt, write_task

from .spark_helpers import TASK_ROWS as ROWS
from .spark_helpers import create_topic, read_all, unique
from .spark_helpers import new_sink as _sink
from .spark_helpers import task_batches as _rows

END_OF_STREAM = struct.pack(">i", -4)  # what the JVM writes after a complete Arrow stream


def _stream(after_arrow: bytes) -> io.BufferedReader:
    return io.BufferedReader(io.BytesIO(after_arrow))


def _arrow_stream(batches: list[pa.RecordBatch]) -> tuple[bytes, bytes]:
    """The Arrow stream the JVM writes: its bytes up to the last batch's end, and its
    end-of-stream marker."""
    sink = io.BytesIO()
    writer = pa.ipc.new_stream(sink, batches[0].schema)
    for batch in batches:
        writer.write_batch(batch)
    body = sink.getvalue()
    writer.close()
    return body, sink.getvalue()[len(body) :]


def _as_pyspark_reads(stream: io.BufferedReader) -> Iterator[pa.RecordBatch]:
    """What PySpark 4.3's worker hands a map-in-Arrow function: the batches of the Arrow
    stream on its input (`ArrowStreamSerializer.load_stream`)."""
    from pyspark.sql.pandas.serializers import ArrowStreamSerializer

    return ArrowStreamSerializer().load_stream(stream)


def test_a_complete_input_ends_as_it_is() -> None:
    batches = _rows(0)
    body, end = _arrow_stream(batches)
    stream = _stream(body + end + END_OF_STREAM)
    assert list(checked(_as_pyspark_reads(stream), stream)) == batches
    assert stream.read() == END_OF_STREAM  # peeked at, left for PySpark's worker to read


def test_an_input_cut_after_a_batch_reads_as_complete_to_pyarrow_and_is_a_cut() -> None:
    batches = _rows(0)
    body, _end = _arrow_stream(batches)
    # pyarrow: an end of file at a message boundary is an end of stream, without an error
    assert list(_as_pyspark_reads(_stream(body))) == batches
    stream = _stream(body)
    read: list[pa.RecordBatch] = []
    with pytest.raises(InputCut):
        for batch in checked(_as_pyspark_reads(stream), stream):
            read.append(batch)
    assert read == batches  # every batch that came, then the cut


def test_an_input_cut_inside_a_message_fails_in_pyarrow() -> None:
    body, _end = _arrow_stream(_rows(0))
    with pytest.raises((OSError, pa.ArrowInvalid)):
        list(_as_pyspark_reads(_stream(body[:-5])))


def test_no_worker_input_outside_a_pyspark_worker() -> None:
    assert worker_input() is None


def test_a_write_whose_input_was_cut_commits_nothing_and_its_retry_writes_all(
    bootstrap: str,
) -> None:
    topic = create_topic(bootstrap, unique("cut"), partitions=1)
    options = _sink(bootstrap, topic)
    pool = ClientPool()
    with pytest.raises(InputCut):
        write_task(options, TaskAttempt(0, 0, 0), checked(iter(_rows(0)), _stream(b"")), None, pool)
    assert read_all(bootstrap, topic) == []  # aborted (its records purged unsent, or aborted)
    retry = write_task(options, TaskAttempt(0, 1, 0), iter(_rows(0)), None, pool)
    assert retry.rows == ROWS and not retry.skipped
    assert sorted(read_all(bootstrap, topic)) == sorted(
        v for b in _rows(0) for v in b[0].to_pylist()
    )


def test_a_write_whose_input_fails_aborts_its_transaction(bootstrap: str) -> None:
    topic = create_topic(bootstrap, unique("failing"), partitions=1)
    options = _sink(bootstrap, topic)
    pool = ClientPool()

    def failing() -> Iterator[pa.RecordBatch]:
        yield _rows(0)[0]
        raise OSError("the input broke")

    with pytest.raises(OSError, match="the input broke"):
        write_task(options, TaskAttempt(0, 0, 0), failing(), None, pool)
    assert read_all(bootstrap, topic) == []
    assert write_task(options, TaskAttempt(0, 1, 0), iter(_rows(0)), None, pool).rows == ROWS
    assert len(read_all(bootstrap, topic)) == ROWS


# -- in Spark: an upstream stage that fails after some batches --------------------------

BATCH_ROWS = 100  # spark.sql.execution.arrow.maxRecordsPerBatch in the test
VALUE_BYTES = 1000  # a batch of 100 KB: more than spark.buffer.size, so sent on its own
BATCHES = 20
BATCHES_BEFORE_THE_FAILURE = 3
SAVE_BOUND_S = 120.0


class _RowsReader(DataSourceReader):
    def __init__(self, fail: bool) -> None:
        self.fail = fail

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0)]  # one task

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        for b in range(BATCHES):
            if self.fail and b == BATCHES_BEFORE_THE_FAILURE:
                raise RuntimeError("the upstream stage fails")
            ids = range(b * BATCH_ROWS, (b + 1) * BATCH_ROWS)
            yield pa.record_batch(
                [
                    pa.array([str(i) for i in ids]),
                    pa.array([f"{i}-" + "v" * VALUE_BYTES for i in ids]),
                ],
                names=["key", "value"],
            )


class UpstreamRows(DataSource):
    """BATCHES batches of BATCH_ROWS rows in one task; option fail=true: the task's read
    fails after BATCHES_BEFORE_THE_FAILURE of them (another Python worker than the sink's,
    upstream of it in the same task)."""

    @classmethod
    def name(cls) -> str:
        return "test_upstream_rows"

    def schema(self) -> str:
        return "key string, value string"

    def reader(self, schema: StructType) -> DataSourceReader:
        return _RowsReader(self.options.get("fail") == "true")


def _write(spark, bootstrap: str, topic: str, sink: str, fail: bool, trusted: bool) -> None:  # type: ignore[no-untyped-def]
    rows = spark.read.format(UpstreamRows.name()).option("fail", str(fail).lower()).load()
    writer = (
        rows.write.format("oncelog_faults")
        .mode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("delivery.guarantee", EXACTLY_ONCE)
        .option("sink.id", sink)
    )
    if trusted:
        writer = writer.option("trustInputEnd", "true")
    # bounded: a check that waited on a live JVM (the failure it must not have) would
    # otherwise hang the suite
    tag = unique("input-end")
    context = spark.sparkContext
    context.addJobTag(tag)
    bound = threading.Timer(SAVE_BOUND_S, context.cancelJobsWithTag, (tag,))
    bound.start()
    try:
        writer.save()
    finally:
        bound.cancel()
        context.removeJobTag(tag)


@pytest.mark.parametrize("trusted", [False, True], ids=["checked", "control-trusted"])
def test_a_task_whose_input_fails_upstream_commits_none_of_it(
    spark, bootstrap: str, trusted: bool
) -> None:
    spark.dataSource.register(UpstreamRows)
    topic = create_topic(bootstrap, unique("upstream"), partitions=1)
    sink = unique("sink")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(BATCH_ROWS))
    try:
        with pytest.raises(Exception, match="the upstream stage fails"):
            _write(spark, bootstrap, topic, sink, fail=True, trusted=trusted)
        committed = len(read_all(bootstrap, topic))
        if trusted:
            # the anomaly: part of the task's input committed as its whole input ...
            assert 0 < committed < BATCHES * BATCH_ROWS
            # ... so the same write, run again on its whole input, is refused
            with pytest.raises(Exception, match="already written with"):
                _write(spark, bootstrap, topic, sink, fail=False, trusted=trusted)
        else:
            assert committed == 0
            _write(spark, bootstrap, topic, sink, fail=False, trusted=trusted)
            values = read_all(bootstrap, topic)
            assert len(values) == len(set(values)) == BATCHES * BATCH_ROWS
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
