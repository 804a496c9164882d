"""Reading one offset range of one partition into Arrow batches: the executor's side.

A consumer is assigned the partition at the range's start and reads under the query's
isolation level. Every end the driver plans is at most the last stable offset (LSO) it
listed (the high watermark under read_uncommitted), so every offset of a range is decided
and a replay returns the same records: the client drops aborted records and transaction
markers on every read alike. A range may therefore return fewer rows than `end - start`.

No idle waits: the reader takes what the client has already fetched without blocking, and
blocks only when nothing is there yet; it stops as soon as the consumer's position reaches
the end. The position counts transaction markers too, so a range that ends on a commit
marker ends when the marker is read, not after a long poll of the broker for records that
will never be part of the range. librdkafka's fetch settings are tuned for a reader that
always knows how much it will read (overridable with `kafka.*`).

Arrow batches are built column by column from the client's messages (one C call per
record and column, no Row or dict per record; the offsets of a gapless run from its two
ends, `offset_column`). Python's cyclic garbage collector is paused
while a batch is fetched and built: the batch's thousands of `Message` objects and
timestamp tuples are containers, so they set off collections (one per 700 allocations)
that traverse them again and again as they age. That was half of the reader's CPU time
(main-thread CPU time for 300,000 records: 0.37 s paused against 0.66 s, medians of 6).
None of them is in a reference cycle: reference counting frees them once the batch is
built. The collector runs as usual while PySpark (or anyone else) runs between batches.

Consumers are kept by the Python worker across tasks and micro-batches (`KeptConsumers`,
as Spark's own consumer pool keeps them per executor): a fresh one costs its threads, a
connection, ApiVersions and Metadata, 29-54 ms per range measured, paid by every task of
every micro-batch. A kept consumer is lent to one range at a time; the range is always
assigned explicitly at its start offset, and the consumer is unassigned when the range
is done. librdkafka tags every fetched message with the version of the assignment that
fetched it and drops messages of an older version, so whatever the previous range left
prefetched (past its end, or a range closed early) is never returned, and an unassigned
consumer fetches nothing while it waits for the next task. A consumer whose range failed
is closed, never kept. In the streaming benchmark this made no measurable difference to a
micro-batch's time: the new transactional producers most tasks still make dominate it
(docs/spark.md).
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import logging
import operator
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from oncelog.collector import collector_paused
from oncelog.spark import fetch
from oncelog.spark.client import with_logger
from oncelog.spark.offsets import OffsetRange
from oncelog.spark.options import ReadOptions, consumer_config
from oncelog.spark.schema import HEADER, KAFKA_TIMESTAMP, SPARK_TIMESTAMP, arrow_schema

log = logging.getLogger(__name__)

ROWS_PER_BATCH = 8192
IDLE_POLL_S = 0.01  # wait for the fetcher this long at a time, then look at the position
IDLE_CONSUMER_S = 300.0  # a kept consumer unused this long is closed (Spark: 5 minutes)
# Each batch read has a group id of its own, so a worker that serves many reads would keep
# one consumer (threads, connections) for each: at most this many are kept, the least
# recently used closed first.
MAX_KEPT_CONSUMERS = 8

_DATA_LOSS = (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET)
_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)
_COUNTING = pa.array(range(ROWS_PER_BATCH), pa.int64())  # 0, 1, ...: offsets from the first


class DataLossError(RuntimeError):
    """Offsets the query needs are gone (retention, deleted topic) and failOnDataLoss is true."""


def consumer_settings(options: ReadOptions, group_id: str) -> dict[str, Any]:
    """The range reader's consumer: assign() only, never a group member, never committing.
    The fetch settings are the options' (`ReadOptions.fetch_defaults`: a batch read's or a
    streaming read's); `kafka.*` options override them."""
    return with_logger(
        {
            **options.fetch_defaults,
            **consumer_config(options.client),
            "group.id": group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "enable.partition.eof": True,
            "isolation.level": options.isolation_level,
        }
    )


class KeptConsumers:
    """The range consumers of one Python worker, one per consumer configuration (the
    query's group id is part of it), lent to one range at a time. `CONSUMERS` is the
    worker's; tests make their own. A worker runs one task at a time: no lock."""

    def __init__(self) -> None:
        self._idle: dict[tuple[tuple[str, str], ...], tuple[Any, float]] = {}

    def __len__(self) -> int:
        return len(self._idle)

    def _close_idle(self) -> None:
        horizon = time.monotonic() - IDLE_CONSUMER_S
        by_age = sorted(self._idle.items(), key=lambda item: item[1][1])
        excess = len(by_age) - MAX_KEPT_CONSUMERS
        for i, (key, (consumer, since)) in enumerate(by_age):
            if i < excess or since < horizon:
                del self._idle[key]
                consumer.close()

    @contextlib.contextmanager
    def lend(self, settings: Mapping[str, Any]) -> Iterator[Any]:
        """A consumer with `settings` and no assignment; kept again (unassigned) after the
        block, closed instead when the block failed."""
        key = tuple(sorted((name, repr(value)) for name, value in settings.items()))
        kept = self._idle.pop(key, None)
        consumer = kept[0] if kept is not None else Consumer(dict(settings))
        failed = False
        try:
            yield consumer
        except Exception:
            failed = True
            raise
        finally:
            # a reader closed early (GeneratorExit) keeps its consumer too: the next range's
            # assignment drops whatever this one left prefetched
            if failed:
                consumer.close()
            else:
                self._keep(key, consumer)
                self._close_idle()

    def _keep(self, key: tuple[tuple[str, str], ...], consumer: Any) -> None:
        try:
            consumer.unassign()
        except Exception:  # a consumer that cannot even unassign is not worth keeping
            consumer.close()
            return
        self._idle[key] = (consumer, time.monotonic())

    def close(self) -> None:
        for consumer, _ in self._idle.values():
            consumer.close()
        self._idle.clear()


CONSUMERS = KeptConsumers()


def read_range(
    options: ReadOptions,
    rng: OffsetRange,
    group_id: str,
    consumers: KeptConsumers = CONSUMERS,
) -> Iterator[pa.RecordBatch]:
    """The records of an offset range as Arrow batches in the source's schema: a batch
    read's through its own Fetch requests where that path applies (`fetch`), the rest,
    and every streaming range, through a confluent-kafka consumer."""
    if rng.size == 0:
        return
    if fetch.applies(options):
        try:
            yield from fetch.read_range(options, rng)
            return
        except fetch.FetchUnavailable as unavailable:
            log.info("%s-%s: librdkafka reads on: %s", rng.topic, rng.partition, unavailable)
            rng = dataclasses.replace(rng, start=unavailable.position)
    yield from _consumed(options, rng, group_id, consumers)


def _consumed(
    options: ReadOptions, rng: OffsetRange, group_id: str, consumers: KeptConsumers
) -> Iterator[pa.RecordBatch]:
    with consumers.lend(consumer_settings(options, group_id)) as consumer:
        messages = _RangeReader(consumer, options, rng).messages()
        while True:
            with collector_paused():
                fetched = next(messages, None)
                if fetched is None:
                    return
                batch = to_record_batch(fetched, rng.topic, rng.partition, options.include_headers)
                del fetched  # freed here, while the collector is still paused
            yield batch


class _RangeReader:
    def __init__(self, consumer: Consumer, options: ReadOptions, rng: OffsetRange) -> None:
        self.consumer = consumer
        self.options = options
        self.rng = rng
        self.tp = TopicPartition(rng.topic, rng.partition)

    def _data_loss(self, message: str) -> None:
        if self.options.fail_on_data_loss:
            raise DataLossError(
                f"{message}. Some data may have been lost because it is no longer in the log "
                "(retention) or the topic was deleted. Set failOnDataLoss=false to skip ahead "
                "instead."
            )

    def _position(self) -> int:
        (position,) = self.consumer.position([self.tp])
        return int(position.offset)

    def messages(self) -> Iterator[list[Any]]:
        """Lists of the range's records in offset order."""
        rng = self.rng
        self.consumer.assign([TopicPartition(rng.topic, rng.partition, rng.start)])
        patience = self.options.poll_timeout_ms / 1000
        deadline = time.monotonic() + patience
        while True:
            batch = self.consumer.consume(ROWS_PER_BATCH, 0)  # what is fetched already
            if not batch:
                if self._position() >= rng.end:
                    return  # the range ended on records the client does not return
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{rng.topic}-{rng.partition}: no record at or past offset "
                        f"{self._position()} of the range [{rng.start}, {rng.end}) within "
                        f"kafkaConsumer.pollTimeoutMs={self.options.poll_timeout_ms}"
                    )
                one = self.consumer.poll(IDLE_POLL_S)
                if one is None:
                    continue
                # and what came with it: not a batch of one row (each costs PySpark a batch)
                batch = [one, *self.consumer.consume(ROWS_PER_BATCH - 1, 0)]
            deadline = time.monotonic() + patience
            records, done = self._within_range(batch)
            if records:
                yield records
            if done:
                return

    def _within_range(self, batch: list[Any]) -> tuple[list[Any], bool]:
        """The records of `batch` below the range's end, and whether the range is done."""
        end = self.rng.end
        if any(map(Message.error, batch)):
            return self._within_range_slowly(batch)
        last = batch[-1].offset()
        if last < end:
            return batch, last == end - 1
        offsets: list[int] = list(map(Message.offset, batch))  # type: ignore[arg-type]
        cut = bisect.bisect_left(offsets, end)
        return batch[:cut], True

    def _within_range_slowly(self, batch: list[Any]) -> tuple[list[Any], bool]:
        """`batch` holds events: end of partition, lost offsets or errors."""
        rng = self.rng
        records: list[Any] = []
        for message in batch:
            error = message.error()
            if error is None:
                if message.offset() >= rng.end:
                    return records, True
                records.append(message)
                if message.offset() == rng.end - 1:
                    return records, True
            elif error.code() == KafkaError._PARTITION_EOF:
                if message.offset() >= rng.end:
                    return records, True
            elif error.code() in _DATA_LOSS:
                return records, self._lost(message.offset())
            else:
                raise RuntimeError(f"{rng.topic}-{rng.partition}: {error.str()}")
        return records, False

    def _lost(self, offset: int) -> bool:
        """The client could not fetch `offset`: it is no longer (or not yet) in the log.
        failOnDataLoss=false goes on from the log start; True if nothing is left to read."""
        rng = self.rng
        low, high = self.consumer.get_watermark_offsets(self.tp, timeout=30.0, cached=False)
        where = "below the log start offset" if offset < low else "past the log end offset"
        self._data_loss(
            f"{rng.topic}-{rng.partition}: offset {offset} of the range [{rng.start}, "
            f"{rng.end}) is {where} (the partition holds [{low}, {high}))"
        )
        if low >= rng.end or low >= high or offset >= high:
            return True
        self.consumer.assign([TopicPartition(rng.topic, rng.partition, max(low, offset))])
        return False


def to_record_batch(
    messages: Sequence[Any], topic: str, partition: int, include_headers: bool
) -> pa.RecordBatch:
    """Arrow columns from confluent-kafka messages (one partition's, in offset order), one
    pass per column that needs one."""
    n = len(messages)
    columns = [
        pa.array(list(map(Message.key, messages)), pa.binary()),
        pa.array(list(map(Message.value, messages)), pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        offset_column(messages),
        *timestamp_columns(messages),
    ]
    if include_headers:
        columns.append(
            pa.array(
                [[{"key": k, "value": v} for k, v in (m.headers() or ())] for m in messages],
                pa.list_(HEADER),
            )
        )
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))


def offset_column(messages: Sequence[Any]) -> pa.Array:
    """The messages' offsets. The client returns a partition's messages in strictly
    increasing offset order (librdkafka skips whatever a fetch returns below its fetch
    offset), so when the last is n - 1 past the first, the n offsets are every offset
    between them: built from the two ends, not one call and one Python int per message
    (about 100 of the ~700 ns a record took to build, CPU time per 8,192-message batch).
    Gaps (transaction markers, aborted or compacted records) take the offsets one by
    one."""
    n = len(messages)
    first = messages[0].offset()
    if messages[-1].offset() - first == n - 1 and n <= len(_COUNTING):
        return pc.add(_COUNTING.slice(0, n), pa.scalar(first, pa.int64()))
    return pa.array(list(map(Message.offset, messages)), pa.int64())


def timestamp_columns(messages: Sequence[Any]) -> tuple[pa.Array, pa.Array]:
    """The `timestamp` and `timestampType` columns. librdkafka's types are 0 (not
    available), 1 (CreateTime) and 2 (LogAppendTime); Spark's are null, 0 and 1.
    Milliseconds become microseconds by Arrow's cast, which refuses a timestamp whose
    microseconds overflow 64 bits (past the year 294,000) as Spark's source does
    (`Math.multiplyExact`), instead of wrapping around."""
    n = len(messages)
    stamped = list(map(Message.timestamp, messages))  # the costly one: a tuple per record
    kinds = list(map(_FIRST, stamped))
    millis = list(map(_SECOND, stamped))
    if kinds.count(kinds[0]) == n:
        kind = None if kinds[0] == 0 else kinds[0] - 1
        if kind is None:
            return pa.nulls(n, SPARK_TIMESTAMP), pa.nulls(n, pa.int32())
        stamps = pa.array(millis, KAFKA_TIMESTAMP)
        return stamps.cast(SPARK_TIMESTAMP), pa.repeat(pa.scalar(kind, pa.int32()), n)
    raw_kinds = pa.array(kinds, pa.int32())
    missing = pc.equal(raw_kinds, 0)
    stamps = pc.if_else(missing, None, pa.array(millis, KAFKA_TIMESTAMP))
    return stamps.cast(SPARK_TIMESTAMP), pc.if_else(missing, None, pc.subtract(raw_kinds, 1))
