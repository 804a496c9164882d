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
from oncelog.protocol import codec
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.compression import CorruptPayload, PayloadTooLarge
from oncelog.protocol.errors import ErrorCode
from oncelog.spark import record_columns
from oncelog.spark.offsets import OffsetRange
from oncelog.spark.options import READ_COMMITTED, ReadOptions, client_timeout_s
from oncelog.spark.schema import arrow_schema

log = logging.getLogger(__name__)

CLIENT_ID = "oncelog-spark-reader"
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
    """The range's rows, one Arrow batch per Fetch; FetchUnavailable to hand over. The
    next Fetch is sent before this one's records are decoded and handed to Spark, so
    the broker prepares it meanwhile."""
    timeout_s = client_timeout_s(options.client)
    try:
        connection = _leader(options.client["bootstrap.servers"], rng, timeout_s)
    except (ProtocolClientError, OSError) as exc:
        raise FetchUnavailable(rng.start, f"no connection to the leader: {exc}") from exc
    fetcher = _Fetcher(connection, rng, options.isolation_level)
    schema = arrow_schema(False)
    read_to = rng.start  # every row below it has been yielded
    try:
        fetcher.ask(read_to)
        while read_to < rng.end:
            answer = fetcher.answer(read_to)
            aborted = (
                [(t.first_offset, t.producer_id) for t in answer.aborted_transactions or ()]
                if options.isolation_level == READ_COMMITTED
                else None
            )
            try:
                chosen = record_columns.select(answer.records or b"", read_to, rng.end, aborted)
                if chosen.position == read_to:
                    raise FetchUnavailable(read_to, "no whole v2 batch in the answer")
                if chosen.position < rng.end:
                    fetcher.ask(chosen.position, read_to)
                batch = record_columns.to_record_batch(
                    chosen.parts, rng.topic, rng.partition, schema
                )
            except (CorruptPayload, PayloadTooLarge, ValueError) as exc:
                raise FetchUnavailable(read_to, f"records not decoded here: {exc}") from exc
            read_to = chosen.position
            if batch.num_rows:
                yield batch
    finally:
        connection.close()


class _Fetcher:
    """Fetch requests of one partition on one connection, at most one ahead: `ask`
    sends one, `answer` waits for the oldest one's answer."""

    def __init__(self, connection: KafkaConnection, rng: OffsetRange, isolation: str) -> None:
        self.connection = connection
        self.rng = rng
        self.isolation = 1 if isolation == READ_COMMITTED else 0
        self.api = codec.api_codec(ApiKey.FETCH, FETCH_VERSION)
        self.asked = 0  # correlation ids sent
        self.answered = 0

    def ask(self, position: int, read_to: int | None = None) -> None:
        """Send a Fetch from `position`; FetchUnavailable at `read_to` (default: the
        position) when it cannot be sent."""
        self.asked += 1
        body = _fetch_body(self.rng, position, self.isolation)
        try:
            self.connection.send_raw(codec.encode_request(self.api, self.asked, CLIENT_ID, body))
        except OSError as exc:
            at = position if read_to is None else read_to
            raise FetchUnavailable(at, f"Fetch not sent: {exc}") from exc

    def answer(self, read_to: int) -> Any:
        """The partition's answer to the oldest Fetch not yet answered; FetchUnavailable
        at `read_to` for a lost connection or an error code."""
        try:
            frame = self.connection.receive_frame()
            self.answered += 1
            correlation_id, response = codec.decode_response(self.api, frame)
        except (ProtocolClientError, OSError, ValueError) as exc:
            raise FetchUnavailable(read_to, f"no Fetch answer: {exc}") from exc
        if correlation_id != self.answered:
            raise FetchUnavailable(read_to, f"answer {correlation_id} to Fetch {self.answered}")
        if response.error_code != ErrorCode.none:
            raise FetchUnavailable(read_to, f"Fetch answered {response.error_code.name}")
        for topic in response.responses:
            for partition in topic.partitions:
                if (
                    topic.topic == self.rng.topic
                    and partition.partition_index == self.rng.partition
                ):
                    if partition.error_code != ErrorCode.none:
                        raise FetchUnavailable(
                            read_to, f"Fetch answered {partition.error_code.name}"
                        )
                    return partition
        raise FetchUnavailable(read_to, "the Fetch answer lacks the partition")


def _leader(bootstrap: str, rng: OffsetRange, timeout_s: float) -> KafkaConnection:
    """A connection to the range's leader, found through the first bootstrap server that
    answers (as librdkafka tries them)."""
    failures = []
    for server in (s.strip() for s in bootstrap.split(",") if s.strip()):
        try:
            seed = KafkaConnection(server, client_id=CLIENT_ID, timeout_s=timeout_s)
        except ProtocolClientError as exc:
            failures.append(str(exc))
            continue
        try:
            address = _leader_address(seed, rng)
        except BaseException:
            seed.close()
            raise
        if address == server:
            return seed  # the leader is the server asked
        seed.close()
        return KafkaConnection(address, client_id=CLIENT_ID, timeout_s=timeout_s)
    raise ProtocolClientError("; ".join(failures) or f"no bootstrap server in {bootstrap!r}")


def _leader_address(seed: KafkaConnection, rng: OffsetRange) -> str:
    """HOST:PORT of the range's leader, as `seed` knows it."""
    if seed.version_for(ApiKey.FETCH) < FETCH_VERSION:
        raise ProtocolClientError(f"the cluster does not speak Fetch v{FETCH_VERSION}")
    metadata = seed.request(
        ApiKey.METADATA,
        {
            "topics": [{"name": rng.topic, "topic_id": None}],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
    )
    leaders = [
        p.leader_id
        for t in metadata.topics
        if t.name == rng.topic
        for p in t.partitions
        if p.partition_index == rng.partition and p.error_code == ErrorCode.none
    ]
    brokers = [b for b in metadata.brokers if leaders and b.node_id == leaders[0]]
    if not brokers:
        raise ProtocolClientError(f"no leader of {rng.topic}-{rng.partition}")
    return f"{brokers[0].host}:{brokers[0].port}"


def _fetch_body(rng: OffsetRange, position: int, isolation: int) -> dict[str, Any]:
    return {
        "max_wait": FETCH_MAX_WAIT_MS,
        "min_bytes": 1,
        "max_bytes": FETCH_MAX_BYTES,
        "isolation_level": isolation,
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
    }
