"""The Spark reader's two requests on the wire, encoded and read by hand: Metadata v4 (who
leads a partition) and Fetch v11 (a partition's records from an offset, under an
isolation level, with the aborted transactions that overlap them).

By hand, not through `oncelog.protocol.codec`: its schemas are kio's types, which Spark's
Python workers are kept free of (tests/spark/test_spark_worker_imports.py). Both
versions are the newest non-flexible ones (no tagged fields, response header v0) that
every Kafka since 2.3 and Kafka 4.x serve; a cluster that does not answers with an error or
closes the connection, and the reader hands the range to librdkafka. Field lists: Kafka's
`MetadataRequest.json`/`MetadataResponse.json` and `FetchRequest.json`/`FetchResponse.json`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

Answer = bytes | bytearray | memoryview
METADATA, FETCH = 3, 1  # API keys
METADATA_VERSION, FETCH_VERSION = 4, 11
_I8, _I16, _I32, _I64 = (struct.Struct(f">{c}") for c in "bhiq")


class MalformedAnswer(ValueError):
    """An answer that does not read as the request's response."""


def _string(text: str) -> bytes:
    data = text.encode()
    return _I16.pack(len(data)) + data


def frame(api_key: int, version: int, correlation_id: int, client_id: str, body: bytes) -> bytes:
    """A size-prefixed request with header v1."""
    request = struct.pack(">hhi", api_key, version, correlation_id) + _string(client_id) + body
    return _I32.pack(len(request)) + request


def metadata_request(topic: str) -> bytes:
    """Metadata v4 of one topic, never creating it."""
    return _I32.pack(1) + _string(topic) + b"\x00"


def fetch_request(
    topic: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int, isolation: int
) -> bytes:
    """Fetch v11 of one partition from `offset`, no fetch session, no rack."""
    return (
        struct.pack(">iiiibii", -1, max_wait_ms, 1, max_bytes, isolation, 0, -1)
        + _I32.pack(1)
        + _string(topic)
        + _I32.pack(1)
        + struct.pack(">iiqqi", partition, -1, offset, -1, max_bytes)
        + _I32.pack(0)  # forgotten topics
        + _string("")  # rack id
    )


class _Reader:
    """A cursor over an answer; MalformedAnswer when a field runs past its end."""

    def __init__(self, data: Answer) -> None:
        self.data = memoryview(data)
        self.at = 0

    def _take(self, layout: struct.Struct) -> int:
        if self.at + layout.size > len(self.data):
            raise MalformedAnswer(f"answer ends at byte {len(self.data)}, inside a field")
        (value,) = layout.unpack_from(self.data, self.at)
        self.at += layout.size
        return int(value)

    def i8(self) -> int:
        return self._take(_I8)

    def i16(self) -> int:
        return self._take(_I16)

    def i32(self) -> int:
        return self._take(_I32)

    def i64(self) -> int:
        return self._take(_I64)

    def bytes_(self) -> memoryview | None:
        """A nullable bytes field (also a string's bytes, after its int16 length)."""
        return self._slice(self.i32())

    def string(self) -> str | None:
        data = self._slice(self.i16())
        try:
            return None if data is None else bytes(data).decode()
        except UnicodeDecodeError as exc:
            raise MalformedAnswer(f"a string that is not UTF-8: {exc}") from None

    def _slice(self, length: int) -> memoryview | None:
        if length < 0:
            return None
        if self.at + length > len(self.data):
            raise MalformedAnswer(f"a field of {length} bytes runs past the answer's end")
        data = self.data[self.at : self.at + length]
        self.at += length
        return data

    def count(self) -> int:
        """An array's length (-1, null, as 0)."""
        return max(self.i32(), 0)


def correlation_id(answer: Answer) -> int:
    return _Reader(answer).i32()


def leader_address(answer: Answer, topic: str, partition: int) -> str | None:
    """HOST:PORT of the partition's leader in a Metadata v4 answer, None if it has none."""
    r = _Reader(answer)
    r.i32()  # correlation id
    r.i32()  # throttle time
    brokers = {}
    for _ in range(r.count()):
        node, host, port = r.i32(), r.string(), r.i32()
        r.string()  # rack
        brokers[node] = f"{host}:{port}"
    r.string()  # cluster id
    r.i32()  # controller id
    leader = None
    for _ in range(r.count()):
        topic_error, name = r.i16(), r.string()
        r.i8()  # is internal
        for _ in range(r.count()):
            error, index, leader_id = r.i16(), r.i32(), r.i32()
            for _ in range(2):  # replicas, in-sync replicas
                for _ in range(r.count()):
                    r.i32()
            if (topic_error, name, error, index) == (0, topic, 0, partition):
                leader = leader_id
    return brokers.get(leader) if leader is not None else None


@dataclass(frozen=True)
class FetchedPartition:
    """One partition's part of a Fetch v11 answer (error 0: none)."""

    error_code: int
    aborted: list[tuple[int, int]] | None  # (first offset, producer id); None: not listed
    records: memoryview


def fetched_partition(answer: Answer, topic: str, partition: int) -> FetchedPartition:
    """The partition's part of a Fetch v11 answer; a top-level error as its error code."""
    r = _Reader(answer)
    r.i32()  # correlation id
    r.i32()  # throttle time
    error = r.i16()
    r.i32()  # session id
    if error:
        return FetchedPartition(error, None, memoryview(b""))
    for _ in range(r.count()):
        name = r.string()
        for _ in range(r.count()):
            index, error = r.i32(), r.i16()
            r.i64(), r.i64(), r.i64()  # high watermark, last stable offset, log start
            listed = r.i32()  # -1: null
            aborted: list[tuple[int, int]] = []
            for _ in range(max(listed, 0)):
                producer_id = r.i64()
                aborted.append((r.i64(), producer_id))
            r.i32()  # preferred read replica
            records = r.bytes_()
            if (name, index) == (topic, partition):
                listing = None if listed < 0 else aborted
                return FetchedPartition(error, listing, records or memoryview(b""))
    raise MalformedAnswer(f"the Fetch answer lacks {topic}-{partition}")
