"""Writers with the columns of Spark's Kafka sink, exactly-once by default.

Exactly-once protocol, per Spark task (docs/spark.md has the full argument):

1. The task's transactional.id is `oncelog-sink-<sink.id>-<task partition id>`. The
   producer's `init_transactions()` bumps the epoch: any older attempt of the same task
   is fenced, and its open transaction is aborted (or, if it was already committing,
   completed) before we go on.
2. The task reads its progress: the committed offset of group `oncelog-sink-<sink.id>`
   for topic-partition (`__oncelog_sink_progress`, task partition id), read under
   read_committed (stable offsets only). Offset N means "batches up to N-1 are written".
3. If the progress says this batch is already written, the task writes nothing (it checks
   that its input is the same as when it wrote it: count and an order-independent digest).
   Otherwise it writes all its rows in one transaction, adds the progress offset
   batchId + 1 (with JSON metadata) to the same transaction with a transactional offset
   commit, and commits. Output and progress become visible together or not at all.

Spark's driver-side commit does no I/O: the tasks' transactions are the commit points,
so the driver commit is idempotent per batchId by construction.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from oncelog.spark.client import Cluster
from oncelog.spark.options import OptionError, WriteOptions, consumer_config, producer_config

log = logging.getLogger(__name__)

BATCH_ID_PROPERTY = "streaming.sql.batchId"  # set by Spark's micro-batch engine on every task
TIMEOUT_S = 60.0
PROGRESS_FORMAT = 1
_MASK64 = (1 << 64) - 1


class SinkGuaranteeError(RuntimeError):
    """The sink refuses to go on because doing so could write a record twice or lose one."""


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What a write task reports to the driver's commit: rows written, or skipped because
    an earlier attempt of the same batch committed them."""

    task: int
    attempt: int
    batch_id: int
    rows: int
    skipped: bool
    digest: str


def validate_schema(schema: StructType, options: WriteOptions) -> None:
    """The columns of Spark's Kafka sink: value (required), key, topic, partition, headers."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in fields:
        raise OptionError("the data to write needs a 'value' column (string or binary)")
    for name in ("key", "value", "topic"):
        if name in fields and not isinstance(fields[name], (StringType, BinaryType)):
            raise OptionError(
                f"column {name!r} must be string or binary, not {fields[name].simpleString()}"
            )
    if "topic" in fields and isinstance(fields["topic"], BinaryType):
        raise OptionError("column 'topic' must be a string")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise OptionError("column 'partition' must be an int")
    if options.topic is None and "topic" not in fields:
        raise OptionError("no topic to write to: give the option topic or a 'topic' column")


class _Digest:
    """Order-independent digest of a multiset of records: the row order inside a task may
    change on a replay (shuffle fetch order), the set of records may not."""

    def __init__(self) -> None:
        self.count = 0
        self._sum = 0

    def add(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]] | None,
    ) -> None:
        h = hashlib.blake2b(digest_size=8)
        for part in (topic.encode(), str(partition).encode(), key, value):
            h.update(b"\x00" if part is None else len(part).to_bytes(4, "big") + part)
        for hk, hv in headers or ():
            h.update(hk.encode() + b"\x01" + (b"" if hv is None else hv))
        self._sum = (self._sum + int.from_bytes(h.digest(), "big")) & _MASK64
        self.count += 1

    @property
    def hex(self) -> str:
        return f"{self.count}:{self._sum:016x}"


def _as_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


def _records(
    batches: Iterator[pa.RecordBatch], options: WriteOptions
) -> Iterator[tuple[str, int, bytes | None, bytes | None, list[tuple[str, bytes | None]] | None]]:
    for batch in batches:
        names = [n.lower() for n in batch.schema.names]
        cols = {n: batch.column(i).to_pylist() for i, n in enumerate(names)}
        n = batch.num_rows
        values = cols["value"]
        keys = cols.get("key") or [None] * n
        topics = cols.get("topic") or [None] * n
        partitions = cols.get("partition") or [None] * n
        headers = cols.get("headers") or [None] * n
        for i in range(n):
            topic = options.topic or topics[i]
            if not topic:
                raise ValueError("a row has a null topic and no topic option is set")
            hs = headers[i]
            yield (
                topic,
                -1 if partitions[i] is None else partitions[i],
                _as_bytes(keys[i]),
                _as_bytes(values[i]),
                [(h["key"], _as_bytes(h["value"])) for h in hs] if hs else None,
            )


def _produce_all(
    producer: Any,
    records: Iterator[tuple],
    digest: _Digest,
    after_each: Callable[[int], None],
    on_delivery: Callable | None = None,
) -> None:
    for topic, partition, key, value, headers in records:
        kwargs: dict[str, Any] = {"key": key, "value": value}
        if partition >= 0:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = headers
        if on_delivery is not None:
            kwargs["on_delivery"] = on_delivery
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.05)
        producer.poll(0)
        digest.add(topic, partition, key, value, headers)
        after_each(digest.count)


class InjectedFailure(RuntimeError):
    """Raised by the test-only option oncelog.test.fail_after."""


def _abort_quietly(producer: Any) -> None:
    try:
        producer.abort_transaction(10.0)
    except Exception:  # fenced or broken: the next attempt's init_transactions settles it
        log.debug("abort_transaction failed", exc_info=True)


def _fail_injector(
    options: WriteOptions, producer: Any, attempt: int, task: int
) -> Callable[[int], None]:
    """Tests only (option oncelog.test.fail_after=N): the first attempt of every task dies
    after N records, with those records flushed to the broker."""
    limit = options.fail_after

    def check(count: int) -> None:
        if limit is not None and attempt == 0 and count == limit:
            producer.flush(TIMEOUT_S)
            raise InjectedFailure(
                f"oncelog.test.fail_after: task {task} attempt 0 fails after {count} records"
            )

    return check


def write_task(
    options: WriteOptions,
    batch_id: int,
    batches: Iterator[pa.RecordBatch],
    progress_partitions: int,
) -> SinkCommitMessage:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    task = ctx.partitionId() if ctx is not None else 0
    attempt = ctx.attemptNumber() if ctx is not None else 0
    if options.exactly_once:
        return _write_exactly_once(options, batch_id, batches, task, attempt, progress_partitions)
    return _write_at_least_once(options, batch_id, batches, task, attempt)


def _write_at_least_once(
    options: WriteOptions, batch_id: int, batches: Iterator[pa.RecordBatch], task: int, attempt: int
) -> SinkCommitMessage:
    from confluent_kafka import Producer

    config = producer_config(options.client)
    config.setdefault("enable.idempotence", "true")
    producer = Producer(config)
    failures: list[Any] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(err)

    digest = _Digest()
    _produce_all(
        producer,
        _records(batches, options),
        digest,
        _fail_injector(options, producer, attempt, task),
        on_delivery,
    )
    remaining = producer.flush(TIMEOUT_S)
    if failures or remaining:
        raise RuntimeError(
            f"task {task}: {len(failures)} records failed, {remaining} undelivered: {failures[:1]}"
        )
    return SinkCommitMessage(task, attempt, batch_id, digest.count, False, digest.hex)


def _progress_metadata(options: WriteOptions, batch_id: int, task: int, digest: _Digest) -> str:
    return json.dumps(
        {
            "v": PROGRESS_FORMAT,
            "sink": options.sink_id,
            "batch": batch_id,
            "task": task,
            "rows": digest.count,
            "digest": digest.hex,
            "at": int(time.time() * 1000),
        },
        separators=(",", ":"),
    )


def _write_exactly_once(
    options: WriteOptions,
    batch_id: int,
    batches: Iterator[pa.RecordBatch],
    task: int,
    attempt: int,
    progress_partitions: int,
) -> SinkCommitMessage:
    from confluent_kafka import Consumer, Producer, TopicPartition

    if task >= progress_partitions:
        raise SinkGuaranteeError(
            f"task {task} has no progress slot: topic {options.progress_topic} has "
            f"{progress_partitions} partitions and the write has more tasks. Create the sink "
            "with a larger sink.progress.partitions (or name a bigger topic in "
            "sink.progress.topic)."
        )
    config = producer_config(options.client)
    producer = Producer({**config, "transactional.id": options.transactional_id(task)})
    progress_reader = Consumer(
        {
            **consumer_config(options.client),
            "group.id": options.progress_group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        # fences older attempts of this task and settles their open transaction
        producer.init_transactions(TIMEOUT_S)
        slot = TopicPartition(options.progress_topic, task)
        (committed,) = progress_reader.committed([slot], timeout=TIMEOUT_S)
        if committed.error is not None:
            raise RuntimeError(f"task {task}: reading sink progress failed: {committed.error}")
        done_through = committed.offset if committed.offset >= 0 else 0
        if done_through > batch_id + 1:
            raise SinkGuaranteeError(
                f"sink {options.sink_id!r} task {task} already wrote batch {done_through - 1}, "
                f"ahead of batch {batch_id}: the query's checkpoint was reset or another query "
                "uses the same sink.id (or a batch write reused an older write.id). "
                "Use a new sink.id."
            )
        if done_through == batch_id + 1:
            return _verify_replay(options, batch_id, batches, task, attempt, committed.metadata)
        digest = _Digest()
        producer.begin_transaction()
        try:
            _produce_all(
                producer,
                _records(batches, options),
                digest,
                _fail_injector(options, producer, attempt, task),
            )
        except InjectedFailure:
            raise  # a simulated crash: leave the transaction open, the retry must fence it
        except BaseException:
            _abort_quietly(producer)  # release the LSO now rather than at the timeout
            raise
        progress = TopicPartition(
            options.progress_topic,
            task,
            batch_id + 1,
            metadata=_progress_metadata(options, batch_id, task, digest),
        )
        producer.send_offsets_to_transaction(
            [progress], progress_reader.consumer_group_metadata(), TIMEOUT_S
        )
        producer.commit_transaction(TIMEOUT_S)
        return SinkCommitMessage(task, attempt, batch_id, digest.count, False, digest.hex)
    finally:
        progress_reader.close()
        producer.flush(1.0)


def _verify_replay(
    options: WriteOptions,
    batch_id: int,
    batches: Iterator[pa.RecordBatch],
    task: int,
    attempt: int,
    metadata: str | None,
) -> SinkCommitMessage:
    """The batch was written by an earlier attempt: write nothing, but refuse if the input
    differs from what was written (changed partitioning, non-deterministic input)."""
    digest = _Digest()
    for record in _records(batches, options):
        digest.add(*record)
    try:
        stored = json.loads(metadata or "{}")
    except json.JSONDecodeError:
        stored = {}
    if stored.get("digest") is not None and stored["digest"] != digest.hex:
        raise SinkGuaranteeError(
            f"sink {options.sink_id!r} task {task}: batch {batch_id} was already written with "
            f"different rows (stored {stored['digest']}, now {digest.hex}, as count:digest). The "
            f"input of a replayed batch changed: a different number of output partitions, a "
            f"different partitioning, or non-deterministic input. Writing would duplicate or "
            f"lose records; restore the query as it was, or use a new sink.id."
        )
    log.info("sink %s task %d: batch %d already written, skipped", options.sink_id, task, batch_id)
    return SinkCommitMessage(task, attempt, batch_id, digest.count, True, digest.hex)


def _summary(messages: list[WriterCommitMessage | None], batch_id: int) -> str:
    done = [m for m in messages if isinstance(m, SinkCommitMessage)]
    written = sum(m.rows for m in done if not m.skipped)
    skipped = sum(m.rows for m in done if m.skipped)
    return (
        f"batch {batch_id}: {len(messages)} tasks, {written} rows written, "
        f"{skipped} already written"
    )


class _Base:
    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        validate_schema(schema, options)
        self.options = options
        self.progress_partitions = 0
        if options.exactly_once:
            # the progress slots are partitions of a topic: TxnOffsetCommit needs them to exist
            self.progress_partitions = Cluster(options.client).ensure_topic(
                options.progress_topic, options.progress_partitions
            )


class OncelogBatchWriter(_Base, DataSourceArrowWriter):
    """df.write: one write has no batchId; `write.id` (default 0) stands in for it, so
    re-running the same write with the same sink.id and write.id writes nothing again."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return write_task(self.options, self.options.write_id, iterator, self.progress_partitions)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info(
            "oncelog sink %s: %s", self.options.sink_id, _summary(messages, self.options.write_id)
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning(
            "oncelog sink %s: write %d aborted; tasks that committed keep their output and "
            "are skipped when the same write is run again",
            self.options.sink_id,
            self.options.write_id,
        )


class OncelogStreamWriter(_Base, DataSourceStreamArrowWriter):
    """``df.writeStream.format("oncelog")``: each micro-batch's tasks write in their own
    transactions, keyed by batch id, so a replayed batch writes nothing twice."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        raw = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
        if raw is None:
            raise SinkGuaranteeError(
                f"no {BATCH_ID_PROPERTY} on the task: cannot tell which batch is being written"
            )
        return write_task(self.options, int(raw), iterator, self.progress_partitions)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # No I/O: every task already committed its own transaction, so running this twice for
        # the same batchId (Spark does, after a restart) changes nothing.
        missing = [i for i, m in enumerate(messages) if m is None]
        if missing:
            raise SinkGuaranteeError(f"batch {batchId}: no commit message from tasks {missing}")
        log.info("oncelog sink %s: %s", self.options.sink_id, _summary(messages, batchId))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning(
            "oncelog sink %s: batch %d aborted; it is written again, minus the tasks that "
            "committed, when the query restarts",
            self.options.sink_id,
            batchId,
        )
