"""Writers with the columns of Spark's Kafka sink, exactly-once by default.

Exactly-once, per Spark task of batch B (docs/spark.md has the protocol, `claims` the
argument): the task reads its slot's progress, `sink.decide` says write, skip or refuse, and
a write is one Kafka transaction holding the task's claim, its output and its progress
B + 1 (a transactional offset commit). The transaction is the worker's writer's
(`producers.ClientPool.writer`: one transactional producer per worker and configuration,
kept across tasks of any slot and micro-batches); the claim is what fences another attempt
of the same slot, dead or alive.

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
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from oncelog.spark import claims, sink
from oncelog.spark.options import OptionError, WriteOptions
from oncelog.spark.producers import (
    PENDING_PROGRESS_WAIT_S,
    POOL,
    TRANSACTION_TIMEOUT_S,
    ClientPool,
    progress_consumer,
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
    its producer, which is retired: the task fails, and the slot's next attempt fences the
    stuck writer's claim, which aborts its transaction.
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
            "its timeout); the task fails and its retry fences this writer"
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
    options: WriteOptions, reader: Any, partition: int, slots: int, wait_s: float
) -> sink.Progress | None:
    """The slot's progress as `reader` sees it; None when a stable read waited `wait_s` in
    vain (another writer's open transaction holds the progress)."""
    slot = TopicPartition(options.progress_topic, partition)
    try:
        (committed,) = reader.committed([slot], timeout=wait_s)
    except KafkaException as exc:
        if wait_s >= TRANSACTION_TIMEOUT_S or exc.args[0].code() != KafkaError._TIMED_OUT:
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


def _read_stable(options: WriteOptions, reader: Any, partition: int, slots: int) -> sink.Progress:
    """The slot's progress, waiting as long as a transaction may hold it."""
    progress = _read_progress(options, reader, partition, slots, TRANSACTION_TIMEOUT_S)
    assert progress is not None  # None only for a read that waits less
    return progress


def _materialised(options: WriteOptions, partition: int, slots: int) -> sink.Progress:
    """The slot's progress as last materialised (read_uncommitted: no wait for a commit
    whose markers are being written), by a consumer made for this rare case."""
    reader = progress_consumer(options, "read_uncommitted")
    try:
        progress = _read_progress(options, reader, partition, slots, TRANSACTION_TIMEOUT_S)
    finally:
        reader.close()
    assert progress is not None  # None only for a read that waits less
    return progress


def _abort_quietly(producer: Any) -> None:
    try:
        producer.abort_transaction(10.0)
    except Exception:  # fenced or broken: a fence of its transactional.id settles it
        log.debug("abort_transaction failed", exc_info=True)


def _decision(progress: sink.Progress, task: TaskAttempt) -> sink.Write | sink.Skip:
    decision = sink.decide(progress, task.batch_id, task.partition)
    if isinstance(decision, sink.Refuse):
        raise SinkGuaranteeError(decision.reason)
    return decision


def _write_exactly_once(
    options: WriteOptions,
    task: TaskAttempt,
    batches: Iterator[pa.RecordBatch],
    faults: Faults | None,
    pool: ClientPool,
) -> SinkCommitMessage:
    """The protocol of `oncelog.spark.claims` (which has the argument), step by step."""
    slots = pool.progress_slots(options)
    _decision(sink.Progress(str(options.sink_id), options.progress_topic, slots), task)
    reader = pool.progress(options)
    progress = _read_progress(options, reader, task.partition, slots, PENDING_PROGRESS_WAIT_S)
    write: sink.Write | None = None
    if progress is None:  # pending: fence from the last materialised commit's claim
        since = _materialised(options, task.partition, slots).claim
    else:
        decision = _decision(progress, task)
        if isinstance(decision, sink.Skip):
            return _skip(options, task, batches, decision, progress, False)
        write, since = decision, progress.claim
    writer = pool.writer(options)
    producer = writer.producer
    try:
        producer.begin_transaction()
        claim = _claim(options, writer, task)
        found = claims.foreign_claims(
            _claims_after(options, pool.claims(options), task.partition, since, claim),
            str(options.sink_id),
            task.partition,
            writer.transactional_id,
        )
        if found or progress is None or write is None:
            # a stable read settles the claims below its own; one that would wait on an
            # open transaction settles nothing more than the read before the claim
            latest = None
            if progress is not None:
                latest = _read_progress(
                    options, reader, task.partition, slots, PENDING_PROGRESS_WAIT_S
                )
            fence = claims.writers_to_fence(found, latest.claim if latest else since)
            for other in fence:
                log.info(
                    "sink %s task %d: fencing writer %s, which claimed the slot and has not "
                    "committed",
                    options.sink_id,
                    task.partition,
                    other,
                )
                pool.fence(options, other)
            progress = (
                latest
                if latest and not fence
                else _read_stable(options, reader, task.partition, slots)
            )
            if progress.claim is not None and progress.claim > claim:
                raise SinkGuaranteeError(
                    f"task {task.partition}: a later attempt claimed and committed the slot"
                )
            decision = _decision(progress, task)
            if isinstance(decision, sink.Skip):
                _abort_quietly(producer)
                pool.retire(options)  # its claim did not end in its commit
                return _skip(options, task, batches, decision, progress, writer.fresh)
            write = decision
        if faults is not None:
            batches = faults.input(batches, task, lambda: producer.flush(TRANSACTION_TIMEOUT_S))
        rows = produce_batches(producer, batches, options.topic)
        _send_progress(options, writer, reader, progress, write, task, rows, claim)
        producer.commit_transaction(TRANSACTION_TIMEOUT_S)
    except BaseException as exc:
        # failed, fenced, or the worker is going away (then the transaction stays open, as
        # after a crash, until the slot's next attempt fences it); stuck: it stays busy
        if isinstance(exc, Exception) and not isinstance(exc, ClientCallStuck):
            _abort_quietly(producer)  # release the LSO now rather than at the next fence
        pool.retire(options)
        raise
    return SinkCommitMessage(task.partition, task.attempt, task.batch_id, rows, False, writer.fresh)


def _claim(options: WriteOptions, writer: Any, task: TaskAttempt) -> int:
    """Produce the claim in the open transaction; its offset once acknowledged."""
    delivered: list[tuple[Any, Any]] = []
    writer.producer.produce(
        options.progress_topic,
        claims.Claim(
            str(options.sink_id), task.partition, task.batch_id, writer.transactional_id
        ).encode(),
        str(options.sink_id).encode(),
        partition=task.partition,
        on_delivery=lambda err, msg: delivered.append((err, msg)),
    )
    writer.producer.flush(TRANSACTION_TIMEOUT_S)
    if not delivered or delivered[0][0] is not None:
        error = delivered[0][0] if delivered else "not acknowledged in time"
        raise RuntimeError(f"task {task.partition}: the sink's claim failed: {error}")
    return int(delivered[0][1].offset())


def _claims_after(
    options: WriteOptions, reader: Any, partition: int, since: int | None, claim: int
) -> list[tuple[int, bytes | None]]:
    """Offsets and values of the slot's progress partition after offset `since` (from its
    start when None) and before `claim`, aborted and open transactions' records included."""
    # from offset 0 rather than OFFSET_BEGINNING, whose offset lookup costs a new consumer's
    # first fetch 500 ms (measured, librdkafka 2.16); from the log start if 0 is gone
    start = 0 if since is None else since + 1
    reader.assign([TopicPartition(options.progress_topic, partition, start)])
    values: list[tuple[int, bytes | None]] = []
    deadline = time.monotonic() + TRANSACTION_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            message = reader.poll(0.1)  # returns as soon as a record is there
            if message is None:
                continue
            error = message.error()
            if error is not None and since is None and start == 0 and _out_of_range(error):
                start = OFFSET_BEGINNING  # no claim recorded: all there is
                reader.assign([TopicPartition(options.progress_topic, partition, start)])
                continue
            if error is not None:
                raise SinkGuaranteeError(
                    f"task {partition}: reading the claims of its slot from offset {start} "
                    f"of {options.progress_topic} failed ({error}): a claim the sink must "
                    "fence may be gone (the topic's retention?)"
                )
            if message.offset() >= claim:
                return values
            values.append((message.offset(), message.value()))
        raise RuntimeError(f"task {partition}: the claims of its slot were not read in time")
    finally:
        reader.unassign()


def _out_of_range(error: Any) -> bool:
    return error.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET)


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
    writer: Any,
    progress_reader: Any,
    progress: sink.Progress,
    decision: sink.Write,
    task: TaskAttempt,
    rows: int,
    claim: int,
) -> None:
    """Add the slot's progress to the open transaction (a TxnOffsetCommit)."""
    now_ms = int(time.time() * 1000)
    metadata = decision.metadata(
        progress, task.partition, rows, writer.transactional_id, claim, now_ms
    )
    slot = TopicPartition(
        options.progress_topic, task.partition, decision.next_batch, metadata=metadata
    )
    group = progress_reader.consumer_group_metadata()
    _bounded(
        lambda: writer.producer.send_offsets_to_transaction([slot], group, TRANSACTION_TIMEOUT_S),
        TRANSACTION_TIMEOUT_S + STUCK_GRACE_S,
        "send_offsets_to_transaction",
    )


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
