"""A batch read's offset range by Fetch requests of its own, decoded straight into Arrow.

Through confluent-kafka every record becomes a `Message` (a Python object, its key, value
and topic, a timestamp tuple), and the reader then copies each into Arrow: about as much
CPU per record as one whole tuned consumer process spends, which bounded a Spark read on
two cores (docs/spark.md). Here the range's leader answers Fetch requests (`fetch_wire`:
v11, the query's isolation level) on one blocking connection, `record_columns` picks the
records Kafka's consumer would return and the native decoder copies them into Arrow
buffers: no Python object per record. The next Fetch is sent before an answer is decoded,
so the broker prepares it while Spark takes the batch.

It reads only the happy path. Whatever it does not handle ends it with `FetchUnavailable`
carrying the position reached (every record below it has been yielded), and the caller
reads the rest of the range through confluent-kafka, which knows the rest: an error code
in the answer (a moved leader, offsets out of range, so data loss as `failOnDataLoss`
says), an empty answer, a batch that is not v2, records that do not decode, a lost
connection. It is used only where it reads exactly what librdkafka would: PLAINTEXT
clusters, no client option but the bootstrap servers, the isolation level and the client
timeout, no headers column, the native decoder built.

What it leaves out, as librdkafka's defaults do or harmlessly: batch CRCs are not checked
(librdkafka's `check.crcs=false`; Kafka's Java consumer checks them); the answer's throttle
time is ignored (the broker mutes the connection itself); no leader epoch is sent (-1), so
an answer from a replica that is no longer the leader is not refused by epoch: it holds
what that replica has, and an empty or failed answer hands over.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pyarrow as pa

from oncelog.spark import fetch_wire, record_columns
from oncelog.spark.offsets import OffsetRange
from oncelog.spark.options import ReadOptions, client_timeout_s, consumer_config
from oncelog.spark.schema import arrow_schema

CLIENT_ID = "oncelog-spark-reader"
FETCH_MAX_BYTES = 8 << 20  # as max.partition.fetch.bytes of the librdkafka reader
_ANSWER_OVERHEAD = 1 << 20  # an answer's fields around its records, generously
FETCH_MAX_WAIT_MS = 100  # the range ends at or below the LSO: data is there, or never is
# client options the Fetch path honours; any other kafka.* option (security, librdkafka
# tuning) leaves the range to librdkafka, which knows them all
_OWN_OPTIONS = frozenset({"bootstrap.servers", "isolation.level", "socket.timeout.ms"})


class FetchUnavailable(Exception):
    """This path cannot go on: read the range on from `position` through librdkafka."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"offset {position}: {reason}")
        self.position = position


def applies(options: ReadOptions) -> bool:
    """Whether a range of this read may be fetched here (see the module docstring)."""
    return (
        options.own_fetch
        and record_columns.native_columns_loaded()
        and not options.include_headers
        and set(consumer_config(options.client)) <= _OWN_OPTIONS
    )


def read_range(options: ReadOptions, rng: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The range's rows, one Arrow batch per Fetch; FetchUnavailable to hand over."""
    timeout_s = client_timeout_s(options.client)
    try:
        connection = _leader(options.client["bootstrap.servers"], rng, timeout_s)
    except (OSError, fetch_wire.MalformedAnswer) as exc:
        raise FetchUnavailable(rng.start, f"no connection to the leader: {exc}") from exc
    isolation = 1 if options.read_committed else 0
    fetcher = _Fetcher(connection, rng, isolation)
    schema = arrow_schema(False)
    read_to = rng.start  # every row below it has been yielded
    try:
        fetcher.ask(read_to, read_to)
        while read_to < rng.end:
            answer = fetcher.answer(read_to)
            # read_committed filters what the answer lists (null: nothing aborted)
            aborted = (answer.aborted or []) if isolation else None
            try:
                chosen = record_columns.select(answer.records, read_to, rng.end, aborted)
                if chosen.position == read_to:
                    raise FetchUnavailable(read_to, "no whole v2 batch in the answer")
                if chosen.position < rng.end:
                    fetcher.ask(chosen.position, read_to)
                batch = record_columns.arrow_batch(chosen.parts, rng.topic, rng.partition, schema)
            except ValueError as exc:  # also the decompressor's errors
                raise FetchUnavailable(read_to, f"records not decoded here: {exc}") from exc
            read_to = chosen.position
            if batch.num_rows:
                yield batch
    finally:
        connection.close()


class _Connection:
    """One blocking connection: size-prefixed frames out and in."""

    def __init__(self, address: str, timeout_s: float) -> None:
        host, _, port = address.rpartition(":")
        self.address = address
        self.sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def receive(self) -> bytearray:
        """The next answer. Its size is refused above what a Fetch may return: a peer that
        does not speak Kafka (a TLS listener's alert reads as a 352 MB size, HTTP as 1.2 GB)
        would otherwise have the worker allocate that much."""
        size = int.from_bytes(self._exactly(4), "big", signed=True)
        if not 0 <= size <= FETCH_MAX_BYTES + _ANSWER_OVERHEAD:
            raise fetch_wire.MalformedAnswer(f"{self.address} announced an answer of {size} bytes")
        return self._exactly(size)

    def _exactly(self, count: int) -> bytearray:
        """`count` bytes, received into one buffer of that size (a Fetch answer of
        megabytes arrives in many pieces: appending them to a growing buffer copied and
        reallocated them again and again)."""
        buffer = bytearray(count)
        view = memoryview(buffer)
        received = 0
        while received < count:
            got = self.sock.recv_into(view[received:])
            if not got:
                raise ConnectionError(f"{self.address} closed the connection")
            received += got
        return buffer

    def request(self, api_key: int, version: int, body: bytes) -> bytearray:
        """One request, its answer (correlation id 0: nothing else is in flight)."""
        self.send(fetch_wire.frame(api_key, version, 0, CLIENT_ID, body))
        answer = self.receive()
        if fetch_wire.correlation_id(answer) != 0:
            raise fetch_wire.MalformedAnswer(f"{self.address} answered another request")
        return answer

    def close(self) -> None:
        self.sock.close()


class _Fetcher:
    """Fetch requests of one partition on one connection, at most one ahead: `ask`
    sends one, `answer` reads the oldest one's answer."""

    def __init__(self, connection: _Connection, rng: OffsetRange, isolation: int) -> None:
        self.connection = connection
        self.rng = rng
        self.isolation = isolation
        self.asked = 0  # correlation ids sent
        self.answered = 0

    def ask(self, position: int, read_to: int) -> None:
        """Send a Fetch from `position`; FetchUnavailable at `read_to` if it cannot be."""
        self.asked += 1
        body = fetch_wire.fetch_request(
            self.rng.topic,
            self.rng.partition,
            position,
            FETCH_MAX_BYTES,
            FETCH_MAX_WAIT_MS,
            self.isolation,
        )
        try:
            self.connection.send(
                fetch_wire.frame(
                    fetch_wire.FETCH, fetch_wire.FETCH_VERSION, self.asked, CLIENT_ID, body
                )
            )
        except OSError as exc:
            raise FetchUnavailable(read_to, f"Fetch not sent: {exc}") from exc

    def answer(self, read_to: int) -> fetch_wire.FetchedPartition:
        """The partition's answer to the oldest Fetch not yet answered; FetchUnavailable
        at `read_to` for a lost connection, a malformed answer or an error code."""
        try:
            frame = self.connection.receive()
            self.answered += 1
            if fetch_wire.correlation_id(frame) != self.answered:
                raise fetch_wire.MalformedAnswer(f"not the answer to Fetch {self.answered}")
            answer = fetch_wire.fetched_partition(frame, self.rng.topic, self.rng.partition)
        except (OSError, fetch_wire.MalformedAnswer) as exc:
            raise FetchUnavailable(read_to, f"no Fetch answer: {exc}") from exc
        if answer.error_code:
            raise FetchUnavailable(read_to, f"Fetch answered error code {answer.error_code}")
        return answer


def _address(server: str) -> str:
    """HOST:PORT of a bootstrap server; librdkafka also takes `PLAINTEXT://HOST:PORT`
    (any other scheme fails to connect here, and librdkafka reads instead)."""
    server = server.strip()
    scheme = "plaintext://"
    return server[len(scheme) :] if server.lower().startswith(scheme) else server


def _leader(bootstrap: str, rng: OffsetRange, timeout_s: float) -> _Connection:
    """A connection to the range's leader, found through the first bootstrap server that
    accepts a connection (as librdkafka tries them). An answer that is not Kafka's (a TLS
    listener, say) ends the search: the range then goes to librdkafka, which tries the
    others with the query's own settings."""
    failures = []
    for server in (_address(s) for s in bootstrap.split(",") if s.strip()):
        try:
            seed = _Connection(server, timeout_s)
        except (OSError, ValueError) as exc:
            failures.append(f"{server}: {exc}")
            continue
        try:
            answer = seed.request(
                fetch_wire.METADATA,
                fetch_wire.METADATA_VERSION,
                fetch_wire.metadata_request(rng.topic),
            )
            address = fetch_wire.leader_address(answer, rng.topic, rng.partition)
        except BaseException:
            seed.close()
            raise
        if address is None:
            seed.close()
            raise fetch_wire.MalformedAnswer(f"no leader of {rng.topic}-{rng.partition}")
        if address == server:
            return seed  # the leader is the server asked
        seed.close()
        return _Connection(address, timeout_s)
    raise ConnectionError("; ".join(failures) or f"no bootstrap server in {bootstrap!r}")
