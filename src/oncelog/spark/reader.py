"""Readers: batch and micro-batch streaming, one Spark input partition per offset range.

Reading a range is deterministic: a consumer is assigned the partition at `start`, reads
under the query's isolation level, keeps records with offsets in [start, end) and stops at
the first record (or end-of-partition) at or past `end`. Under read_committed every `end`
the connector plans is at most the last stable offset (LSO) it listed, so every record
below it is decided: the client drops aborted records and control records, the same ones
on every replay.

Everything that opens a socket runs inside methods that execute on the driver's
data-source runner or on executors; `__init__` keeps only plain, picklable data.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from oncelog.spark import offsets as off
from oncelog.spark.client import Cluster
from oncelog.spark.options import EARLIEST, LATEST, OffsetSpec, ReadOptions, consumer_config

try:  # PySpark 4.2+
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - older PySpark: no availableNow support
    ReadLimit = object  # type: ignore[assignment,misc]
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in for PySpark < 4.2, which has no availableNow support."""


ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ]
)
ROWS_PER_BATCH = 8192
_GROUP = "oncelog-spark-reader"  # never joined, never committed: assign() only


class DataLossError(RuntimeError):
    """Offsets the query needs are gone (retention, deleted topic) and failOnDataLoss is true."""


class OffsetRangePartition(InputPartition):
    """One Spark input partition: one offset range of one topic-partition."""

    def __init__(self, index: int, rng: off.OffsetRange) -> None:
        super().__init__(index)
        self.range = rng


def _data_loss(options: ReadOptions, message: str) -> None:
    if options.fail_on_data_loss:
        raise DataLossError(
            message + ". Some data may have been lost because it is no longer "
            "in the log (retention). Set failOnDataLoss=false to skip ahead instead."
        )


def read_range(options: ReadOptions, rng: off.OffsetRange) -> Iterator[pa.RecordBatch]:
    """The records of one offset range as Arrow batches in the Kafka source's schema."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    if rng.size == 0:
        return
    config = consumer_config(options.client)
    config.update(
        {
            "group.id": _GROUP,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "enable.partition.eof": True,
            "isolation.level": options.isolation_level,
        }
    )
    consumer = Consumer(config)
    try:
        tp = TopicPartition(rng.topic, rng.partition)
        low, _high = consumer.get_watermark_offsets(tp, timeout=30.0, cached=False)
        start = rng.start
        if low > start:
            _data_loss(
                options,
                f"{rng.topic}-{rng.partition}: offsets {start}..{low - 1} of the "
                f"range [{rng.start}, {rng.end}) are below the log start offset {low}",
            )
            start = low
        if start >= rng.end:
            return
        consumer.assign([TopicPartition(rng.topic, rng.partition, start)])
        yield from _consume(consumer, options, rng, KafkaError)
    finally:
        consumer.close()


def _consume(
    consumer, options: ReadOptions, rng: off.OffsetRange, KafkaError
) -> Iterator[pa.RecordBatch]:
    columns: dict[str, list] = {name: [] for name in ARROW_SCHEMA.names}
    deadline = time.monotonic() + options.poll_timeout_ms / 1000
    done = False
    while not done:
        messages = consumer.consume(num_messages=ROWS_PER_BATCH, timeout=0.5)
        if not messages and time.monotonic() > deadline:
            raise TimeoutError(
                f"{rng.topic}-{rng.partition}: no record at or past offset {rng.end} "
                f"within kafkaConsumer.pollTimeoutMs={options.poll_timeout_ms}"
            )
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    if message.offset() >= rng.end:
                        done = True
                        break
                    continue  # not there yet (endingOffsets past the current end): keep polling
                if error.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
                    _data_loss(
                        options,
                        f"{rng.topic}-{rng.partition}: offset out of range while "
                        f"reading [{rng.start}, {rng.end}): {error.str()}",
                    )
                    done = True  # failOnDataLoss=false: what could be read is all there is
                    break
                raise RuntimeError(f"{rng.topic}-{rng.partition}: {error.str()}")
            offset = message.offset()
            if offset >= rng.end:
                done = True
                break
            deadline = time.monotonic() + options.poll_timeout_ms / 1000
            ts_type, ts = message.timestamp()
            headers = message.headers()
            columns["key"].append(message.key())
            columns["value"].append(message.value())
            columns["topic"].append(rng.topic)
            columns["partition"].append(rng.partition)
            columns["offset"].append(offset)
            columns["timestamp"].append(ts * 1000 if ts_type != 0 else None)
            # librdkafka: 1 = CreateTime, 2 = LogAppendTime; Spark's Kafka source: 0 and 1
            columns["timestampType"].append(ts_type - 1 if ts_type != 0 else None)
            columns["headers"].append(
                [{"key": k, "value": v} for k, v in headers] if headers else []
            )
            if offset >= rng.end - 1:
                done = True
                break
        if len(columns["offset"]) >= ROWS_PER_BATCH or (done and columns["offset"]):
            yield pa.RecordBatch.from_pydict(columns, schema=ARROW_SCHEMA)
            columns = {name: [] for name in ARROW_SCHEMA.names}
    if columns["offset"]:
        yield pa.RecordBatch.from_pydict(columns, schema=ARROW_SCHEMA)


def _resolve(
    cluster: Cluster,
    options: ReadOptions,
    tps: Sequence[off.TopicPartitionKey],
    spec: OffsetSpec,
    name: str,
) -> off.Offsets:
    """Concrete offsets for `spec` ("earliest", "latest" or per-partition JSON)."""
    if spec in ("earliest", "latest"):
        return cluster.offsets(tps, str(spec), options.read_committed)
    assert isinstance(spec, dict)
    named = {(t, p) for t, per in spec.items() for p in per}
    unknown = named - set(tps)
    if unknown:
        raise ValueError(f"{name} names partitions that are not subscribed: {sorted(unknown)}")
    missing = set(tps) - named
    if missing:
        raise ValueError(
            f"{name} must give an offset for every partition; missing {sorted(missing)}"
        )
    earliest = cluster.offsets(tps, "earliest", options.read_committed)
    latest = cluster.offsets(tps, "latest", options.read_committed)
    out: off.Offsets = {}
    for tp in tps:
        wanted = spec[tp[0]][tp[1]]
        out[tp] = earliest[tp] if wanted == EARLIEST else latest[tp] if wanted == LATEST else wanted
    return out


class OncelogBatchReader(DataSourceReader):
    """``spark.read.format("oncelog")``: one input partition per topic-partition range."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        cluster = Cluster(self.options.client)
        tps = cluster.partitions(self.options.subscription)
        start = _resolve(cluster, self.options, tps, self.options.starting, "startingOffsets")
        end = _resolve(cluster, self.options, tps, self.options.ending, "endingOffsets")
        if self.options.read_committed:
            stable = cluster.offsets(tps, "latest", True)
            beyond = {tp: (end[tp], stable[tp]) for tp in tps if end[tp] > stable[tp]}
            if beyond:
                raise ValueError(
                    f"endingOffsets past the last stable offset (offset, LSO): {beyond}"
                )
        ranges = off.plan_ranges(start, end, {})
        return [OffsetRangePartition(i, r) for i, r in enumerate(ranges)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRangePartition)
        yield from read_range(self.options, partition.range)


class OncelogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader. Offsets end at the LSO under read_committed (the high watermark
    under read_uncommitted); partitions that appear later start at their earliest offset."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._target: off.Offsets | None = None  # availableNow: never read past this

    def _cluster(self) -> Cluster:
        return Cluster(self.options.client)

    def initialOffset(self) -> dict:
        cluster = self._cluster()
        tps = cluster.partitions(self.options.subscription)
        return off.to_json(
            _resolve(cluster, self.options, tps, self.options.starting, "startingOffsets")
        )

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None and ReadMaxRows is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        cluster = self._cluster()
        tps = cluster.partitions(self.options.subscription)
        self._target = cluster.offsets(tps, "latest", self.options.read_committed)

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        cluster = self._cluster()
        current = off.from_json(start)
        tps = cluster.partitions(self.options.subscription)
        if self._target is not None:
            # availableNow: partitions created after the target was taken are not read
            tps = [tp for tp in tps if tp in self._target]
            available = {tp: self._target[tp] for tp in tps}
        else:
            available = cluster.offsets(tps, "latest", self.options.read_committed)
        new = [tp for tp in tps if tp not in current]
        starts = dict(current)
        if new:
            starts.update(cluster.offsets(new, "earliest", self.options.read_committed))
        # never go backwards (a partition whose LSO is below the checkpoint: keep the checkpoint)
        available = {tp: max(available[tp], starts.get(tp, available[tp])) for tp in available}
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            available = off.rate_limit(starts, available, limit.max_rows)
        end = dict(current)  # partitions that vanished keep their last offset
        end.update(available)
        return off.to_json(end)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin = off.from_json(start)
        finish = off.from_json(end)
        new = [tp for tp in finish if tp not in begin]
        new_start = (
            self._cluster().offsets(new, "earliest", self.options.read_committed) if new else {}
        )
        ranges = [r for r in off.plan_ranges(begin, finish, new_start) if r.size > 0]
        return [OffsetRangePartition(i, r) for i, r in enumerate(ranges)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRangePartition)
        yield from read_range(self.options, partition.range)

    def commit(self, end: dict) -> None:
        """Nothing to do: the checkpoint is the source's only state (no group offsets)."""
