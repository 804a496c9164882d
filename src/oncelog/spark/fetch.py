"""A batch read's offset range by Fetch requests of its own, decoded straight into Arrow.

Through confluent-kafka every record becomes a `Message` (a Python object, its key, value
and topic, a timestamp tuple), and the reader then copies each into Arrow: about as much
CPU per record as one whole tuned consumer process spends, which bounded a Spark read on
two cores (docs/spark.md). Here the range's leader answers Fetch requests (v12, topic
names, the query's isolation level) on one blocking connection, `record_columns` picks
the records Kafka's consumer would return and the native decoder copies them into Arrow
buffers: no Python object per record.

It reads only the happy path. Whatever it does not handle ends it with `FetchUnavailable`
carrying the position reached (every record below it has been yielded), and the caller
reads the rest of the range through confluent-kafka, which knows the rest: an error code
in the answer (a moved leader, offsets out of range, so data loss as `failOnDataLoss`
says), an empty answer, a batch that is not v2, a lost connection. It is used only where
it reads exactly what librdkafka would: PLAINTEXT clusters, no client option but the
bootstrap servers, the isolation level and the client timeout, no headers column.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from oncelog.client.connection import KafkaConnection, ProtocolClientError
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.compression import CorruptPayload, PayloadTooLarge
from oncelog.protocol.errors import ErrorCode
from oncelog.spark import record_columns
from oncelog.spark.offsets import OffsetRange
from oncelog.spark.options import READ_COMMITTED, ReadOptions, client_timeout_s
from oncelog.spark.schema import arrow_schema

log = logging.getLogger(__name__)

FETCH_VERSION = 12  # the newest Fetch that names topics (13 on takes topic ids)
FETCH_MAX_BYTES = 8 << 20  # as max.partition.fetch.bytes of the librdkafka reader
FETCH_MAX_WAIT_MS = 100  # the range ends at or below the LSO: data is there, or never is
# client options the Fetch path honours; any other kafka.* option (security, librdkafka
# tuning) leaves the range to librdkafka, which knows them all
_OWN_OPTIONS = frozenset({"bootstrap.servers", "isolation.level", "socket.timeout.ms"})


class FetchUnavailable(Exception):
    """This path cannot go on: read the range on from `position` through librdkafka."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"offset {position}: {reason}")
        self.position = position


def applies(options: ReadOptions, client: Mapping[str, str]) -> bool:
    """Whether a range of this read may be fetched here (see the module docstring)."""
    return (
        record_columns.native_columns_loaded()
        and not options.include_headers
        and set(client) <= _OWN_OPTIONS
    )


def read_range(options: ReadOptions, rng: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The range's rows, one Arrow batch per Fetch; FetchUnavailable to hand over."""
    timeout_s = client_timeout_s(options.client)
    try:
        connection = _leader(options.client["bootstrap.servers"], rng, timeout_s)
    except (ProtocolClientError, OSError) as exc:
        raise FetchUnavailable(rng.start, f"no connection to the leader: {exc}") from exc
    schema = arrow_schema(False)
    position = rng.start
    try:
        while position < rng.end:
            try:
                answer = _fetch(connection, rng, position, options.isolation_level)
            except (ProtocolClientError, OSError) as exc:
                raise FetchUnavailable(position, f"Fetch failed: {exc}") from exc
            if answer.error_code != ErrorCode.none:
                raise FetchUnavailable(position, f"Fetch answered {answer.error_code.name}")
            aborted = (
                [(t.first_offset, t.producer_id) for t in answer.aborted_transactions or ()]
                if options.isolation_level == READ_COMMITTED
                else None
            )
            try:
                chosen = record_columns.select(answer.records or b"", position, rng.end, aborted)
                batch = record_columns.to_record_batch(
                    chosen.parts, rng.topic, rng.partition, schema
                )
            except (CorruptPayload, PayloadTooLarge, ValueError) as exc:
                raise FetchUnavailable(position, f"records not decoded here: {exc}") from exc
            if chosen.position == position:
                raise FetchUnavailable(position, "no whole v2 batch in the answer")
            position = chosen.position
            if batch.num_rows:
                yield batch
    finally:
        connection.close()


def _leader(bootstrap: str, rng: OffsetRange, timeout_s: float) -> KafkaConnection:
    """A connection to the range's leader, found through the bootstrap servers."""
    seed = KafkaConnection(bootstrap, client_id="oncelog-spark-reader", timeout_s=timeout_s)
    try:
        metadata = seed.request(
            ApiKey.METADATA,
            {
                "topics": [{"name": rng.topic, "topic_id": None}],
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            },
        )
        leader = next(
            p.leader_id
            for t in metadata.topics
            if t.name == rng.topic
            for p in t.partitions
            if p.partition_index == rng.partition and p.error_code == ErrorCode.none
        )
        broker = next(b for b in metadata.brokers if b.node_id == leader)
    except StopIteration:
        seed.close()
        raise ProtocolClientError(f"no leader of {rng.topic}-{rng.partition}") from None
    except BaseException:
        seed.close()
        raise
    if seed.version_for(ApiKey.FETCH) < FETCH_VERSION:
        seed.close()
        raise ProtocolClientError(f"the cluster does not speak Fetch v{FETCH_VERSION}")
    seed.close()
    return KafkaConnection(
        f"{broker.host}:{broker.port}", client_id="oncelog-spark-reader", timeout_s=timeout_s
    )


def _fetch(connection: KafkaConnection, rng: OffsetRange, position: int, isolation: str) -> Any:
    """One Fetch of the range's partition from `position`; its partition's answer."""
    response = connection.request(
        ApiKey.FETCH,
        {
            "max_wait": FETCH_MAX_WAIT_MS,
            "min_bytes": 1,
            "max_bytes": FETCH_MAX_BYTES,
            "isolation_level": 1 if isolation == READ_COMMITTED else 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": rng.topic,
                    "partitions": [
                        {
                            "partition": rng.partition,
                            "fetch_offset": position,
                            "partition_max_bytes": FETCH_MAX_BYTES,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
        version=FETCH_VERSION,
    )
    if response.error_code != ErrorCode.none:
        raise ProtocolClientError(f"Fetch answered {response.error_code.name}")
    for topic in response.responses:
        for partition in topic.partitions:
            if topic.topic == rng.topic and partition.partition_index == rng.partition:
                return partition
    raise ProtocolClientError(f"the Fetch answer has no {rng.topic}-{rng.partition}")
