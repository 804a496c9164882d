"""Writers with the columns of Spark's Kafka sink, exactly-once by default.

Exactly-once, per Spark task of batch B (docs/spark.md has the full argument): the task
reads its slot's progress, `sink.decide` says write, skip or refuse, and a write is one
Kafka transaction holding the task's output and its progress B + 1 (a transactional
offset commit). The transactional producer (transactional.id
`oncelog-sink-<sink.id>-<task partition>`) is kept by the worker across micro-batches
(`producers.ClientPool`); its first request of each transaction also proves that it is
still the current producer of its id: if another producer took the id over (the task ran
on another worker meanwhile), nothing has been written yet, so the task makes a fresh
producer, whose `init_transactions()` fences the other one and settles its open
transaction, reads its progress again and decides again.

Spark's driver-side commit does no I/O: the tasks' transactions are the commit points,
so the driver commit is idempotent per batchId by construction. Nothing here runs per
record but the produce call itself.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from oncelog.spark import sink
from oncelog.spark.options import OptionError, WriteOptions
from oncelog.spark.producers import (
    KEPT_PROGRESS_WAIT_S,
    POOL,
    TRANSACTION_TIMEOUT_S,
    ClientPool,
    is_fenced,
)

log = logging.getLogger(__name__)

BATCH_ID_PROPERTY = "streaming.sql.batchId"  # set by Spark's micro-batch engine on every task


class SinkGuaranteeError(RuntimeError):
    """The sink refuses to go on because doing so could write a record twice or lose one."""


class ClientCallStuck(RuntimeError):
    """A client call did not return within its own timeout plus a grace period."""


STUCK_GRACE_S = 10.0  # beyond the call's own timeout


def _bounded(call: Callable[[], object], timeout_s: float, what: str) -> None:
    """Run `call` in a helper thread and give up after `timeout_s`.

    librdkafka's send_offsets_to_transaction can ignore its timeout and wait forever
    (librdkafka issues #5456 and #5511; seen here with a kept producer whose group
    coordinator went away in a broker restart). Given up on, the call keeps its thread and
    its producer, which is never used again: the task fails, and Spark's retry makes a
    fresh producer whose init_transactions fences the stuck one and aborts its transaction.
    """
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # handed to the caller's thread
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run, name=f"oncelog-sink-{what}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not outcome:
        raise ClientCallStuck(
            f"{what} did not return within {timeout_s:g} s (a librdkafka call that ignored "
            "its timeout); the task fails and its retry uses a new producer"
        )
    if outcome[0] is not None:
        raise outcome[0]


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What a write task reports to the driver's commit: rows written, or skipped because
    an earlier attempt of the same batch committed them."""

    task: int
    attempt: int
    batch_id: int
    rows: int
    skipped: bool
    new_producer: bool  # the task made (and initialised) a producer: none was kept


@dataclass(frozen=True)
class TaskAttempt:
    """Which task this is: Spark's partition id, attempt number and the batch id."""

    partition: int
    attempt: int
    batch_id: int


class Faults(Protocol):
    """A test's hook into a task's input (`oncelog.testing.spark` has one). The production
    data source passes none."""

    def input(
        self, batches: Iterator[pa.RecordBatch], task: TaskAttempt, flush: Callable[[], None]
    ) -> Iterator[pa.RecordBatch]: ...


def validate_schema(schema: StructType, options: WriteOptions) -> None:
    """The columns of Spark's Kafka sink: value (required), key, topic, partition, headers."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in fields:
        raise OptionError("the data to write needs a 'value' column (string or binary)")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], (StringType, BinaryType)):
            raise OptionError(
                f"column {name!r} must be string or binary, not {fields[name].simpleString()}"
            )
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise OptionError(f"column 'topic' must be a string, not {fields['topic'].simpleString()}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise OptionError("column 'partition' must be an int")
    if options.topic is None and "topic" not in fields:
        raise OptionError("no topic to write to: give the option topic or a 'topic' column")


# -- producing the rows --------------------------------------------------------------------


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    index = batch.schema.get_field_index(name)
    return None if index < 0 else batch.column(index).to_pylist()


def _values(batch: pa.RecordBatch) -> list[Any]:
    values = _column(batch, "value")
    if values is None:  # validate_schema refuses such data before any task
        raise ValueError("the data to write has no 'value' column")
    return values


def _wait_for_room(producer: Any, produce: Callable[[], Any]) -> None:
    """The client's queue is full: serve deliveries until it takes the record."""
    while True:
        producer.poll(0.05)
        try:
            produce()
            return
        except BufferError:
            continue


def produce_batches(producer: Any, batches: Iterator[pa.RecordBatch], topic: str | None) -> int:
    """Produce every row; return the number of rows. One produce call per row, nothing else
    per row when the rows carry no topic, partition or headers of their own."""
    rows = 0
    produce = producer.produce
    for batch in batches:
        rows += batch.num_rows
        values = _values(batch)
        keys = _column(batch, "key") or [None] * batch.num_rows
        topics = None if topic is not None else _column(batch, "topic")
        partitions = _column(batch, "partition")
        headers = _column(batch, "headers")
        if topic is not None and partitions is None and headers is None:
            for key, value in zip(keys, values, strict=True):
                try:
                    produce(topic, value, key)
                except BufferError:
                    _wait_for_room(producer, functools.partial(produce, topic, value, key))
        else:
            _produce_rows(
                producer, batch.num_rows, topic, topics, keys, values, partitions, headers
            )
        producer.poll(0)
    return rows


def _produce_rows(
    producer: Any,
    n: int,
    topic: str | None,
    topics: list[Any] | None,
    keys: list[Any],
    values: list[Any],
    partitions: list[Any] | None,
    headers: list[Any] | None,
) -> None:
    """Rows that name their topic, partition or headers."""
    for i in range(n):
        target = topic or (topics[i] if topics is not None else None)
        if not target:
            raise ValueError("a row has a null topic and no topic option is set")
        kwargs: dict[str, Any] = {"key": keys[i], "value": values[i]}
        if partitions is not None and partitions[i] is not None:
            kwargs["partition"] = partitions[i]
        if headers is not None and headers[i]:
            kwargs["headers"] = [(h["key"], h["value"]) for h in headers[i]]
        try:
            producer.produce(target, **kwargs)
        except BufferError:
            _wait_for_room(producer, functools.partial(producer.produce, target, **kwargs))


# -- one task ------------------------------------------------------------------------------


def write_task(
    options: WriteOptions,
    task: TaskAttempt,
    batches: Iterator[pa.RecordBatch],
    faults: Faults | None = None,
    pool: ClientPool = POOL,
) -> SinkCommitMessage:
    if options.exactly_once:
        return _write_exactly_once(options, task, batches, faults, pool)
    return _write_at_least_once(options, task, batches, faults, pool)


def _write_at_least_once(
    options: WriteOptions,
    task: TaskAttempt,
    batches: Iterator[pa.RecordBatch],
    faults: Faults | None,
    pool: ClientPool,
) -> SinkCommitMessage:
    kept = pool.idempotent(options)
    producer = kept.producer
    if faults is not None:
        batches = faults.input(batches, task, lambda: producer.flush(TRANSACTION_TIMEOUT_S))
    rows = produce_batches(producer, batches, options.topic)
    remaining = producer.flush(TRANSACTION_TIMEOUT_S)
    if kept.failures or remaining:
        raise RuntimeError(
            f"task {task.partition}: {len(kept.failures)} records failed, {remaining} "
            f"undelivered: {kept.failures[:1]}"
        )
    return SinkCommitMessage(task.partition, task.attempt, task.batch_id, rows, False, False)


def _read_progress(
    options: WriteOptions, clients: Any, partition: int, slots: int
) -> sink.Progress | None:
    """The slot's progress; None when a kept producer waited too long for it (see
    `producers`: another producer's open transaction holds it)."""
    slot = TopicPartition(options.progress_topic, partition)
    wait = TRANSACTION_TIMEOUT_S if clients.fresh else KEPT_PROGRESS_WAIT_S
    try:
        (committed,) = clients.progress.committed([slot], timeout=wait)
    except KafkaException as exc:
        if clients.fresh or exc.args[0].code() != KafkaError._TIMED_OUT:
            raise
        return None
    if committed.error is not None:
        raise RuntimeError(f"task {partition}: reading sink progress failed: {committed.error}")
    return sink.Progress.from_committed(
        str(options.sink_id),
        options.progress_topic,
        slots,
        committed.offset,
        committed.metadata,
    )


def _abort_quietly(producer: Any) -> None:
    try:
        producer.abort_transaction(10.0)
    except Exception:  # fenced or broken: the next producer's init_transactions settles it
        log.debug("abort_transaction failed", exc_info=True)


def _write_exactly_once(
    options: WriteOptions,
    task: TaskAttempt,
    batches: Iterator[pa.RecordBatch],
    faults: Faults | None,
    pool: ClientPool,
) -> SinkCommitMessage:
    slots = pool.progress_slots(options)
    no_slot = sink.decide(
        sink.Progress(str(options.sink_id), options.progress_topic, slots), 0, task.partition
    )
    if isinstance(no_slot, sink.Refuse):  # refused before any client is made for the slot
        raise SinkGuaranteeError(no_slot.reason)
    new_producer = False
    try:
        while True:
            clients = pool.transactional(options, task.partition)
            new_producer = new_producer or clients.fresh
            progress = _read_progress(options, clients, task.partition, slots)
            if progress is None:  # a transaction of another producer holds the progress
                _replace(options, task, pool, "another producer has a transaction open")
                continue
            if not clients.fresh and progress.last_commit != clients.last_seen:
                # another producer of this id committed since this one last did: it took
                # the id over, so the kept one is fenced
                _replace(options, task, pool, "another producer committed since")
                continue
            clients.last_seen = progress.last_commit
            decision = sink.decide(progress, task.batch_id, task.partition)
            if isinstance(decision, sink.Refuse):
                raise SinkGuaranteeError(decision.reason)
            if isinstance(decision, sink.Skip):
                return _skip(options, task, batches, decision, progress, new_producer)
            clients.producer.begin_transaction()
            if clients.fresh or task.attempt == 0:
                break
            if _still_current(options, clients, progress, decision, task):
                break
            _replace(options, task, pool, "an earlier attempt elsewhere fenced it")
        producer = clients.producer
        if faults is not None:
            batches = faults.input(batches, task, lambda: producer.flush(TRANSACTION_TIMEOUT_S))
        try:
            rows = produce_batches(producer, batches, options.topic)
            _send_progress(options, clients, progress, decision, task, rows)
            producer.commit_transaction(TRANSACTION_TIMEOUT_S)
        except ClientCallStuck:
            raise  # no abort: the producer is busy for good; the next one fences it
        except Exception:
            _abort_quietly(producer)  # release the LSO now rather than at the timeout
            raise
        clients.last_seen = (decision.next_batch, clients.instance)
    except BaseException:
        # failed, fenced, or the worker is going away (then the transaction stays open, as
        # after a crash, until the next producer of this id fences it): never kept
        pool.discard(options, task.partition)
        raise
    return SinkCommitMessage(task.partition, task.attempt, task.batch_id, rows, False, new_producer)


def _replace(options: WriteOptions, task: TaskAttempt, pool: ClientPool, why: str) -> None:
    log.info(
        "sink %s task %d: the kept producer is fenced (%s); making a new one",
        options.sink_id,
        task.partition,
        why,
    )
    pool.discard(options, task.partition)


def _skip(
    options: WriteOptions,
    task: TaskAttempt,
    batches: Iterator[pa.RecordBatch],
    decision: sink.Skip,
    progress: sink.Progress,
    new_producer: bool,
) -> SinkCommitMessage:
    """The slot already wrote this batch: read the input (to count it), write nothing."""
    rows = sum(batch.num_rows for batch in batches)
    refused = sink.check_replay(decision, rows, progress, task.batch_id, task.partition)
    if refused is not None:
        raise SinkGuaranteeError(refused.reason)
    log.info(
        "sink %s task %d: batch %d already written, skipped",
        options.sink_id,
        task.partition,
        task.batch_id,
    )
    return SinkCommitMessage(task.partition, task.attempt, task.batch_id, rows, True, new_producer)


def _send_progress(
    options: WriteOptions,
    clients: Any,
    progress: sink.Progress,
    decision: sink.Write,
    task: TaskAttempt,
    rows: int,
) -> None:
    """Add the slot's progress to the open transaction (a TxnOffsetCommit)."""
    now_ms = int(time.time() * 1000)
    slot = TopicPartition(
        options.progress_topic,
        task.partition,
        decision.next_batch,
        metadata=decision.metadata(progress, task.partition, rows, clients.instance, now_ms),
    )
    metadata = clients.progress.consumer_group_metadata()
    _bounded(
        lambda: clients.producer.send_offsets_to_transaction(
            [slot], metadata, TRANSACTION_TIMEOUT_S
        ),
        TRANSACTION_TIMEOUT_S + STUCK_GRACE_S,
        "send_offsets_to_transaction",
    )


def _still_current(
    options: WriteOptions,
    clients: Any,
    progress: sink.Progress,
    decision: sink.Write,
    task: TaskAttempt,
) -> bool:
    """A retry with a kept producer: an earlier attempt of this task may have run elsewhere
    and initialised its own producer without committing (so the progress does not show it).
    The open transaction's first request tells, with nothing written: the progress is added
    to it now (and again, with the row count, before the commit), and a fenced producer's
    AddOffsetsToTxn is refused."""
    try:
        _send_progress(options, clients, progress, decision, task, 0)
    except KafkaException as exc:
        if not is_fenced(exc):
            _abort_quietly(clients.producer)
            raise
        return False
    return True


def _summary(messages: list[WriterCommitMessage | None], batch_id: int) -> str:
    done = [m for m in messages if isinstance(m, SinkCommitMessage)]
    written = sum(m.rows for m in done if not m.skipped)
    skipped = sum(m.rows for m in done if m.skipped)
    new = sum(m.new_producer for m in done)
    return (
        f"batch {batch_id}: {len(messages)} tasks, {written} rows written, "
        f"{skipped} already written, {new} new producers"
    )


def _task(batch_id: int) -> TaskAttempt:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return TaskAttempt(0, 0, batch_id)
    return TaskAttempt(ctx.partitionId(), ctx.attemptNumber(), batch_id)


class _Base:
    """Construction does no I/O: PySpark makes the stream writer again for every batch and
    for every commit (the progress topic is checked by the tasks, once per worker)."""

    def __init__(
        self, options: WriteOptions, schema: StructType, faults: Faults | None = None
    ) -> None:
        validate_schema(schema, options)
        self.options = options
        self.faults = faults


class OncelogBatchWriter(_Base, DataSourceArrowWriter):
    """df.write: one write has no batchId; `write.id` (default 0) stands in for it, so
    re-running the same write with the same sink.id and write.id writes nothing again."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return write_task(self.options, _task(self.options.write_id), iterator, self.faults)

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
        return write_task(self.options, _task(int(raw)), iterator, self.faults)

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
