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
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from oncelog.spark import claims, input_end, sink
from oncelog.spark.options import OptionError, WriteOptions
from oncelog.spark.producers import (
    PENDING_PROGRESS_WAIT_S,
    POOL,
    TRANSACTION_TIMEOUT_S,
    ClientPool,
    Writer,
    progress_consumer,
)

log = logging.getLogger(__name__)

BATCH_ID_PROPERTY = "streaming.sql.batchId"  # set by Spark's micro-batch engine on every task


class SinkGuaranteeError(RuntimeError):
    """The sink refuses to go on because doing so could write a record twice or lose one."""


class ClientCallStuck(RuntimeError):
    """A client call did not return within its own timeout plus a grace period."""


class WriterLostConnection(RuntimeError):
    """The task's writer lost a broker connection before it added its progress: the
    task fails at once, and Spark's retry writes with a new writer (see `_send_progress`)."""


STUCK_GRACE_S = 10.0  # beyond the call's own timeout
SEND_OFFSETS_BOUND_S = TRANSACTION_TIMEOUT_S + STUCK_GRACE_S


def _bounded(call: Callable[[], object], timeout_s: float, what: str) -> None:
    """Run `call` in a helper thread and give up after `timeout_s`.

    librdkafka's send_offsets_to_transaction can ignore its timeout and wait forever
    (librdkafka issues #5456 and #5511; seen here with a kept producer whose group
    coordinator went away in a broker restart: `producers.ConnectionWatch` now replaces
    such a writer before its next task, and `_send_progress` fails a task whose writer lost
    a connection during it, so this bound is left for a connection lost while the call
    runs). Given up on, the call keeps its thread and its producer, which is retired: the
    task fails, and the slot's next attempt fences the stuck writer's claim, which aborts
    its transaction.
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
        self, batches: Iterator[pa.RecordBatch], task: TaskAttempt, flush: Callable[[], object]
    ) -> Iterator[pa.RecordBatch]: ...


# The headers column of Spark's Kafka source and sink (nullability aside).
HEADERS_TYPE = "array<struct<key:string,value:binary>>"


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
    if "headers" in fields and fields["headers"].simpleString() != HEADERS_TYPE:
        # Spark's KafkaWriter.validateQuery refuses it too; else every task failed on it
        raise OptionError(
            f"column 'headers' must be {HEADERS_TYPE}, not {fields['headers'].simpleString()}"
        )
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


def _wait_for_room(producer: Producer, produce: Callable[[], Any]) -> None:
    """The client's queue is full: serve deliveries until it takes the record."""
    while True:
        producer.poll(0.05)
        try:
            produce()
            return
        except BufferError:
            continue


def produce_batches(
    producer: Producer, batches: Iterator[pa.RecordBatch], topic: str | None
) -> int:
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
    producer: Producer,
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
    options: WriteOptions, reader: Consumer, partition: int, slots: int, wait: claims.Wait
) -> sink.Progress | None:
    """The slot's progress as `reader` sees it. A SHORT stable read that waits in vain
    (another writer's open transaction holds the progress) answers None; a LONG one fails."""
    slot = TopicPartition(options.progress_topic, partition)
    short = wait is claims.Wait.SHORT
    try:
        (committed,) = reader.committed(
            [slot], timeout=PENDING_PROGRESS_WAIT_S if short else TRANSACTION_TIMEOUT_S
        )
    except KafkaException as exc:
        if short and exc.args[0].code() == KafkaError._TIMED_OUT:
            return None
        raise
    if committed.error is not None:
        raise RuntimeError(f"task {partition}: reading sink progress failed: {committed.error}")
    return sink.Progress.from_committed(
        str(options.sink_id),
        options.progress_topic,
        slots,
        committed.offset,
        committed.metadata,
    )


def _materialised(options: WriteOptions, partition: int, slots: int) -> sink.Progress:
    """The slot's progress as last materialised (read_uncommitted: no wait for a commit
    whose markers are being written), by a consumer made for this rare case."""
    reader = progress_consumer(options, "read_uncommitted")
    try:
        progress = _read_progress(options, reader, partition, slots, claims.Wait.LONG)
    finally:
        reader.close()
    assert progress is not None  # None only for a SHORT read
    return progress


def _abort_quietly(producer: Producer) -> None:
    try:
        producer.abort_transaction(10.0)
    except Exception:  # fenced or broken: a fence of its transactional.id settles it
        log.debug("abort_transaction failed", exc_info=True)


def _is_fenced(error: KafkaError) -> bool:
    """The broker refused the producer: another producer took its transactional.id."""
    return error.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    )


class _ClaimFenced(RuntimeError):
    """A kept writer's claim was refused: a fence reached it while it was idle."""


RETRY_A_FENCED_CLAIM = True  # a kept writer found fenced at its claim: once, with a new one


class _ClusterSteps:
    """The steps of `claims.attempt` for one task, taken against the cluster, and the writer
    that holds the attempt's transaction once it claimed."""

    def __init__(
        self, options: WriteOptions, task: TaskAttempt, slots: int, pool: ClientPool
    ) -> None:
        self.options = options
        self.task = task
        self.slots = slots
        self.pool = pool
        self.reader = pool.progress(options)
        # before the claim: its first use for a progress topic looks the topic up, which
        # must not wait with the claim's transaction open (holding the slot's LSO)
        self.claims_reader = pool.claims(options)
        self.writer: Writer | None = None  # set by the claim

    @property
    def slot(self) -> TopicPartition:
        return TopicPartition(self.options.progress_topic, self.task.partition)

    def take(self, step: claims.Step) -> claims.Answer:
        options, partition = self.options, self.task.partition
        match step:
            case claims.ReadProgress(wait):
                return _read_progress(options, self.reader, partition, self.slots, wait)
            case claims.ReadMaterialised():
                return _materialised(options, partition, self.slots)
            case claims.ProduceClaim():
                return self._claim_with_a_live_writer()
            case claims.LookUpStableOffset():
                # the progress reader is read_committed: its "high" watermark is the LSO
                _low, stable = self.reader.get_watermark_offsets(
                    self.slot, timeout=TRANSACTION_TIMEOUT_S, cached=False
                )
                return int(stable)
            case claims.ReadClaims(start, end):
                return _read_claims(options, self.claims_reader, partition, start, end)
            case claims.Fence(other):
                log.info(
                    "sink %s task %d: fencing writer %s, which claimed the slot and has not "
                    "committed",
                    options.sink_id,
                    partition,
                    other,
                )
                self.pool.fence(options, other)
                return None
        raise TypeError(f"unknown step {step!r}")

    def _claim_with_a_live_writer(self) -> claims.Claimed:
        """Claim with the worker's writer; if a fence reached that kept writer while it was
        idle (`claims`: a fence can reach a live writer), retire it and claim once more
        with a new one. Nothing but the refused claim was sent."""
        self.writer = self.pool.writer(self.options)
        try:
            return _claim(self.options, self.writer, self.task)
        except _ClaimFenced:
            if self.writer.fresh or not RETRY_A_FENCED_CLAIM:
                raise
            log.info(
                "sink %s task %d: kept writer %s was fenced while idle; claiming with a new writer",
                self.options.sink_id,
                self.task.partition,
                self.writer.transactional_id,
            )
            self.pool.retire(self.options, close=True)
            self.writer = None  # retired and closed: nothing to give up if the next fails
        self.writer = self.pool.writer(self.options)
        return _claim(self.options, self.writer, self.task)

    def give_up(self, stuck: bool = False) -> None:
        """The attempt's claim will not end in its commit: abort (unless stuck in a call)
        and retire its writer."""
        if self.writer is None:
            return
        if not stuck:
            _abort_quietly(self.writer.producer)  # release the LSO now, not at a fence
        self.pool.retire(self.options, close=not stuck)


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
    """`claims.attempt` (the protocol and its argument) against the cluster; then the
    batch, its progress and the commit in the transaction that holds the claim."""
    slots = pool.progress_slots(options)
    _decision(sink.Progress(str(options.sink_id), options.progress_topic, slots), task)
    cluster = _ClusterSteps(options, task, slots, pool)
    steps = claims.attempt(str(options.sink_id), task.partition, task.batch_id)
    try:
        step = next(steps)
        while True:
            step = steps.send(cluster.take(step))
    except StopIteration as done:
        outcome: claims.Outcome = done.value
    except BaseException as exc:
        # failed, or the worker is going away (then the transaction stays open, as after a
        # crash, until the slot's next attempt fences it)
        cluster.give_up(stuck=not isinstance(exc, Exception))
        raise
    if isinstance(outcome, claims.Stop):
        if outcome.claimed:
            cluster.give_up()  # its claim does not end in its commit
        if isinstance(outcome.decision, sink.Refuse):
            raise SinkGuaranteeError(outcome.decision.reason)
        fresh = cluster.writer is not None and cluster.writer.fresh
        return _skip(options, task, batches, outcome.decision, outcome.progress, fresh)
    writer = cluster.writer
    assert writer is not None  # a claim was made
    producer = writer.producer
    try:
        if faults is not None:
            batches = faults.input(batches, task, lambda: producer.flush(TRANSACTION_TIMEOUT_S))
        rows = produce_batches(producer, batches, options.topic)
        _send_progress(options, writer, cluster.reader, outcome, task, rows)
        producer.commit_transaction(TRANSACTION_TIMEOUT_S)
    except BaseException as exc:
        # failed, fenced, or the worker is going away; stuck: it stays busy in its thread
        cluster.give_up(stuck=not isinstance(exc, Exception) or isinstance(exc, ClientCallStuck))
        raise
    return SinkCommitMessage(task.partition, task.attempt, task.batch_id, rows, False, writer.fresh)


def _claim(options: WriteOptions, writer: Writer, task: TaskAttempt) -> claims.Claimed:
    """Begin the transaction and produce the claim in it, without a key (a compacted topic
    refuses it: `claims`); its offset once acknowledged."""
    delivered: list[tuple[KafkaError | None, Message]] = []
    try:
        writer.producer.begin_transaction()
        writer.producer.produce(
            options.progress_topic,
            claims.Claim(
                str(options.sink_id), task.partition, task.batch_id, writer.transactional_id
            ).encode(),
            partition=task.partition,
            on_delivery=lambda err, msg: delivered.append((err, msg)),
        )
        writer.producer.flush(TRANSACTION_TIMEOUT_S)
    except KafkaException as exc:
        if _is_fenced(exc.args[0]):
            raise _ClaimFenced(f"task {task.partition}: the writer was fenced: {exc}") from exc
        raise
    if not delivered:
        raise RuntimeError(f"task {task.partition}: the sink's claim was not acknowledged in time")
    error, message = delivered[0]
    if error is not None and _is_fenced(error):
        raise _ClaimFenced(f"task {task.partition}: the writer was fenced: {error}")
    if error is not None:
        raise RuntimeError(f"task {task.partition}: the sink's claim failed: {error}")
    offset = message.offset()
    assert offset is not None  # a delivered record has one
    return claims.Claimed(offset, writer.transactional_id)


CLAIMS_POLL_BATCH = 500
# consume(n, timeout) waits the whole timeout unless n messages come: the claims read takes
# what is fetched already, and otherwise waits for the first next message only
CLAIMS_POLL_S = 0.1
# fetch errors of the claims read that a broker restart or a leader change may cause:
# waited out; any other one (an authorization failure, ...) fails the task at once
TRANSIENT_READ_ERRORS = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError._PARTITION_EOF,
    }
)


def _read_claims(
    options: WriteOptions, reader: Consumer, partition: int, start: int, end: int
) -> list[tuple[int, bytes | None]] | claims.Gone:
    """Offsets and values of the slot's progress partition in [start, end), aborted and
    open transactions' records included; `claims.GONE` when `start` was deleted. Transient
    fetch errors (a broker restarting) are waited out, up to the transaction timeout."""
    if start >= end:
        return []
    reader.assign([TopicPartition(options.progress_topic, partition, start)])
    values: list[tuple[int, bytes | None]] = []
    last_error: KafkaError | None = None
    deadline = time.monotonic() + TRANSACTION_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            fetched = reader.consume(CLAIMS_POLL_BATCH, 0) or reader.consume(1, CLAIMS_POLL_S)
            for message in fetched:
                error = message.error()
                if error is not None and _out_of_range(error):
                    return claims.GONE
                if error is not None and (
                    error.fatal()
                    or (not error.retriable() and error.code() not in TRANSIENT_READ_ERRORS)
                ):
                    raise RuntimeError(
                        f"task {partition}: reading the claims of its slot from "
                        f"{options.progress_topic} failed: {error}"
                    )
                if error is not None:
                    log.info("task %d: reading the slot's claims: %s (retried)", partition, error)
                    last_error = error
                    continue
                offset = message.offset()
                assert offset is not None  # a record has one
                if offset >= end:
                    return values
                values.append((offset, message.value()))
        raise RuntimeError(
            f"task {partition}: the claims of its slot (offsets {start} to {end} of "
            f"{options.progress_topic}) were not read within {TRANSACTION_TIMEOUT_S:g} s"
            + (f"; last error: {last_error}" if last_error is not None else "")
        )
    finally:
        reader.unassign()


def _out_of_range(error: KafkaError) -> bool:
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
    writer: Writer,
    progress_reader: Consumer,
    proceed: claims.Proceed,
    task: TaskAttempt,
    rows: int,
) -> None:
    """Add the slot's progress, with the attempt's claim, to the open transaction (a
    TxnOffsetCommit).

    Not with a kept writer that lost a broker connection during the task (a broker
    restarted under it): librdkafka's send_offsets_to_transaction then waits on the group
    coordinator it had cached in an earlier task, whatever its timeout (librdkafka #5456,
    #5511), until `_bounded` gives up after 70 s, as the demo's broker restart did
    (docs/spark.md, Performance). Failing the task here costs Spark one retry, with a new
    writer. A writer made for this task has looked no group coordinator up yet and goes on
    (so retries during a rolling restart do not use up Spark's attempts). A connection
    lost while the call runs is still left to `_bounded`."""
    writer.producer.poll(0)  # serves the connection errors it met (its error_cb)
    if writer.connections.lost and not writer.fresh:
        raise WriterLostConnection(
            f"sink writer {writer.transactional_id} lost a broker connection during the "
            "task; its send_offsets_to_transaction could wait on a stale group coordinator "
            "(librdkafka #5456, #5511): the task fails and Spark's retry uses a new writer"
        )
    now_ms = int(time.time() * 1000)
    metadata = proceed.decision.metadata(
        proceed.progress, task.partition, rows, writer.transactional_id, proceed.claim, now_ms
    )
    slot = TopicPartition(
        options.progress_topic, task.partition, proceed.decision.next_batch, metadata=metadata
    )
    group = progress_reader.consumer_group_metadata()
    _bounded(
        lambda: writer.producer.send_offsets_to_transaction([slot], group, TRANSACTION_TIMEOUT_S),
        SEND_OFFSETS_BOUND_S,
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
    for every commit (the progress topic is checked by the tasks, once per worker).
    `check_input_end` False is a test's control only (`oncelog.testing.spark`)."""

    def __init__(
        self,
        options: WriteOptions,
        schema: StructType,
        faults: Faults | None = None,
        check_input_end: bool = True,
    ) -> None:
        validate_schema(schema, options)
        self.options = options
        self.faults = faults
        self.check_input_end = check_input_end

    def _input(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The task's input; exactly_once, checked at its end for a cut (`input_end`: a
        JVM that gave the task up closes the input, which pyarrow takes for its end)."""
        if not self.options.exactly_once or not self.check_input_end:
            return batches
        stream = input_end.worker_input()
        if stream is None:
            raise SinkGuaranteeError(
                "exactly_once: the Python worker's input stream was not found (a PySpark "
                "other than 4.3, or a custom spark.python.worker.module or "
                "spark.python.daemon.module?), so a complete input cannot be told from a cut "
                "one"
            )
        return input_end.checked(batches, stream)


class OncelogBatchWriter(_Base, DataSourceArrowWriter):
    """df.write: one write has no batchId; `write.id` (default 0) stands in for it, so
    re-running the same write with the same sink.id and write.id writes nothing again."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        task = _task(self.options.write_id)
        return write_task(self.options, task, self._input(iterator), self.faults)

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
        return write_task(self.options, _task(int(raw)), self._input(iterator), self.faults)

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
