"""Bad bytes on the wire never take the broker down.

Each case talks to an embedded broker over raw loopback sockets. What Kafka 4.x does, and
what we assert:
- a frame that cannot be a request (size prefix negative, larger than
  socket.request.max.bytes, shorter than a header; unknown API key; a known API at a
  version the broker does not speak; a body that does not decode): the connection is
  closed, with a log line, and nothing is answered on it. A size prefix over the limit is
  refused before any of the frame is read.
- ApiVersions at a version the broker does not speak is the exception: it is answered
  with UNSUPPORTED_VERSION in the v0 layout, listing (at least) ApiVersions' own range,
  and the connection stays open (KIP-511; librdkafka then retries at that version).
- a Produce whose batch is corrupt gets a per-partition error (CORRUPT_MESSAGE for a bad
  CRC, INVALID_RECORD for magic < 2), nothing is appended, the connection stays open.
- unknown tagged fields in a flexible request are skipped (KIP-482).
- after every case, a connection opened before the bad one and a new one are served.
"""

from __future__ import annotations

import logging
import random
import socket
import struct
import time
import zlib
from collections.abc import Callable, Iterator

import confluent_kafka
import pytest

from oncelog.client.connection import KafkaConnection
from oncelog.protocol import codec
from oncelog.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import Record, build_batch
from oncelog.testing import EmbeddedBroker

IO_TIMEOUT_S = 5.0
MAX_REQUEST_BYTES = 104_857_600  # socket.request.max.bytes default
CORRUPT_MESSAGE = 2
UNSUPPORTED_VERSION = 35
INVALID_RECORD = 87

META = (ApiKey.METADATA, SUPPORTED_VERSIONS[ApiKey.METADATA][1])
APIV = (ApiKey.API_VERSIONS, 3)
METADATA_ALL = {
    "topics": None,
    "allow_auto_topic_creation": False,
    "include_topic_authorized_operations": False,
    "include_cluster_authorized_operations": False,
}
APIV_BODY = {"client_software_name": "malformed-tests", "client_software_version": "1.0"}


# -- fixtures and helpers -------------------------------------------------------------------


@pytest.fixture
def broker(caplog: pytest.LogCaptureFixture) -> Iterator[EmbeddedBroker]:
    caplog.set_level(logging.INFO, logger="oncelog")
    with EmbeddedBroker() as embedded:
        yield embedded


@pytest.fixture
def good(broker: EmbeddedBroker) -> Iterator[KafkaConnection]:
    """A well-behaved connection opened before the bad one."""
    with KafkaConnection(
        broker.bootstrap_servers, client_id="good", timeout_s=IO_TIMEOUT_S
    ) as conn:
        yield conn


def connect(broker: EmbeddedBroker) -> socket.socket:
    return socket.create_connection(("127.0.0.1", broker.port), timeout=IO_TIMEOUT_S)


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def header_v1(
    api_key: int, version: int, correlation_id: int = 1, client_id: bytes = b"bad"
) -> bytes:
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


def header_v2(
    api_key: int,
    version: int,
    correlation_id: int = 1,
    client_id: bytes = b"bad",
    tags: bytes = b"\x00",
) -> bytes:
    return header_v1(api_key, version, correlation_id, client_id) + tags


def request(api: tuple[int, int], correlation_id: int, body: dict) -> bytes:
    return codec.encode_request(codec.api_codec(*api), correlation_id, "raw", body)


def recv_exactly(sock: socket.socket, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        assert chunk, f"the broker closed the connection after {len(data)} of {count} bytes"
        data += chunk
    return bytes(data)


def recv_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    return recv_exactly(sock, size)


def assert_closed_by_broker(sock: socket.socket, within_s: float = IO_TIMEOUT_S) -> None:
    """The broker closes the connection without answering anything."""
    sock.settimeout(within_s)
    try:
        data = sock.recv(65536)
    except ConnectionResetError:
        return
    except TimeoutError:
        pytest.fail(f"the broker kept the connection open for {within_s} s")
    assert data == b"", f"the broker answered a bad request with {data[:64]!r}"


def assert_close_logged(caplog: pytest.LogCaptureFixture, fragment: str = "") -> None:
    messages = [r.getMessage() for r in caplog.records if r.name == "oncelog.broker.server"]
    closes = [m for m in messages if m.startswith("closing connection") and fragment in m]
    assert closes, f"no 'closing connection ... {fragment}' log line in {messages}"


def produce(
    conn: KafkaConnection, topic: str, partitions: dict[int, bytes], acks: int = -1
) -> dict[int, object]:
    response = conn.request(
        ApiKey.PRODUCE,
        {
            "transactional_id": None,
            "acks": acks,
            "timeout": 5000,
            "topic_data": [
                {
                    "name": topic,
                    "partition_data": [
                        {"index": index, "records": records}
                        for index, records in partitions.items()
                    ],
                }
            ],
        },
    )
    (topic_response,) = response.responses
    return {p.index: p for p in topic_response.partition_responses}


def batch(*values: bytes) -> bytes:
    return build_batch([Record(None, v) for v in values], timestamp_ms=int(time.time() * 1000))


def create_topic(conn: KafkaConnection, name: str, partitions: int = 1) -> None:
    response = conn.request(
        ApiKey.CREATE_TOPICS,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout": 5000,
            "validate_only": False,
        },
    )
    assert response.topics[0].error_code == ErrorCode.none, response


def log_end(broker: EmbeddedBroker, topic: str, partition: int) -> int:
    assert broker.broker is not None
    return broker.broker.topics.partition(topic, partition).log.log_end_offset


def assert_healthy(broker: EmbeddedBroker, good: KafkaConnection) -> None:
    """The connection opened before the bad one, and a fresh one, are both served."""
    metadata = good.request(ApiKey.METADATA, METADATA_ALL)
    assert [b.node_id for b in metadata.brokers] == [broker.broker.node_id]  # type: ignore[union-attr]
    with KafkaConnection(
        broker.bootstrap_servers, client_id="fresh", timeout_s=IO_TIMEOUT_S
    ) as fresh:
        if broker.broker.topics.get("health") is None:  # type: ignore[union-attr]
            create_topic(fresh, "health")
        before = log_end(broker, "health", 0)
        (answer,) = produce(fresh, "health", {0: batch(b"ok")}).values()
        assert answer.error_code == ErrorCode.none and answer.base_offset == before  # type: ignore[attr-defined]


# -- frames the broker must close the connection on -------------------------------------------


def _random_frame(seed: int) -> bytes:
    rng = random.Random(seed)
    payload = bytes(rng.getrandbits(8) for _ in range(64))
    assert struct.unpack(">h", payload[:2])[0] not in SUPPORTED_VERSIONS
    return framed(payload)


def _too_new(api: int) -> int:
    return SUPPORTED_VERSIONS[api][1] + 1


CLOSING_CASES: dict[str, tuple[bytes, str]] = {
    # name: (bytes sent, fragment of the broker's log line)
    **{f"garbage-{seed}": (_random_frame(seed), "unsupported api key") for seed in range(5)},
    "negative-size": (struct.pack(">i", -1), "request size -1"),
    "most-negative-size": (struct.pack(">i", -(2**31)), "outside"),
    "size-over-socket.request.max.bytes": (
        struct.pack(">i", MAX_REQUEST_BYTES + 1),
        "socket.request.max.bytes",
    ),
    "size-int32-max": (struct.pack(">i", 2**31 - 1), "socket.request.max.bytes"),
    "zero-size": (struct.pack(">i", 0), "outside"),
    "shorter-than-a-header": (framed(b"\x00\x12\x00\x00"), "outside"),
    "header-cut-after-correlation-id": (
        framed(struct.pack(">hhi", ApiKey.API_VERSIONS, 0, 7)),
        "malformed",
    ),
    "unknown-api-key-32767": (framed(header_v1(0x7FFF, 0)), "unsupported api key 32767"),
    "unknown-api-key-1000": (framed(header_v1(1000, 0)), "unsupported api key 1000"),
    "negative-api-key": (framed(header_v1(-1, 0)), "unsupported api key -1"),
    "metadata-too-new": (
        framed(header_v2(ApiKey.METADATA, _too_new(ApiKey.METADATA)) + b"\x01\x00\x00\x00"),
        f"unsupported api key {int(ApiKey.METADATA)} version",
    ),
    "produce-too-old": (
        framed(
            header_v1(ApiKey.PRODUCE, SUPPORTED_VERSIONS[ApiKey.PRODUCE][0] - 1)
            + struct.pack(">hii", 1, 1000, 0)
        ),
        f"unsupported api key {int(ApiKey.PRODUCE)} version",
    ),
    "metadata-array-longer-than-body": (
        framed(header_v1(ApiKey.METADATA, 4) + struct.pack(">ih", 1000, 1) + b"t" + b"\x01"),
        "malformed METADATA v4",
    ),
    "metadata-negative-string-length": (
        framed(header_v1(ApiKey.METADATA, 4) + struct.pack(">ih", 1, -5) + b"\x01"),
        "malformed METADATA v4",
    ),
    "metadata-flexible-huge-compact-array": (
        framed(header_v2(ApiKey.METADATA, 12) + b"\xff\xff\xff\xff\x07" + b"\x00\x00\x00"),
        "malformed METADATA v12",
    ),
    # issue 8: 20 bytes that made kio's native reader reserve 32 GiB and abort the process
    "metadata-v9-declaring-2^32-1-topics": (
        framed(bytes.fromhex("0003000900000001ffff008080808010")),
        "malformed METADATA v9 request: FrameError: topics: 4294967295 items",
    ),
    "fetch-v12-forgotten-topics-null": (
        framed(
            header_v2(ApiKey.FETCH, 12)
            + struct.pack(">iiiibii", -1, 500, 1, 1 << 20, 0, 0, -1)
            + b"\x01"  # no topics
            + b"\x00"  # forgotten_topics_data: null, which the schema forbids
            + b"\x01\x00"  # rack id "", no tags
        ),
        "forgotten_topics_data: null where the schema forbids it",
    ),
    "produce-body-cut-short": (
        framed(
            header_v1(ApiKey.PRODUCE, 3) + struct.pack(">hhi", -1, 1, 1000) + struct.pack(">i", 1)
        ),
        "malformed PRODUCE v3",
    ),
    "client-id-longer-than-frame": (
        framed(struct.pack(">hhih", ApiKey.METADATA, 4, 1, 200) + b"short"),
        "malformed METADATA v4",
    ),
}


@pytest.mark.parametrize("case", sorted(CLOSING_CASES))
def test_bad_frame_closes_only_its_connection(
    broker: EmbeddedBroker, good: KafkaConnection, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    data, log_fragment = CLOSING_CASES[case]
    bystander = connect(broker)  # a raw connection that is mid-way through nothing
    with connect(broker) as bad:
        started = time.monotonic()
        bad.sendall(data)
        assert_closed_by_broker(bad)
        # A size over the limit is refused from the prefix alone: no waiting for 100 MiB.
        assert time.monotonic() - started < 3.0
    assert_close_logged(caplog, log_fragment)
    assert_healthy(broker, good)
    with bystander:
        bystander.sendall(request(APIV, 77, APIV_BODY))
        correlation_id, response = codec.decode_response(
            codec.api_codec(*APIV), recv_frame(bystander)
        )
        assert correlation_id == 77 and response.error_code == ErrorCode.none


def test_size_limit_follows_socket_request_max_bytes(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="oncelog")
    meta_v4 = (ApiKey.METADATA, 4)
    with EmbeddedBroker({"socket.request.max.bytes": "1000"}) as broker:
        with connect(broker) as sock:  # a 1000-byte request is still read and answered
            empty = request(
                meta_v4, 5, {"topics": [{"name": ""}], "allow_auto_topic_creation": False}
            )
            name = "x" * (1000 - (len(empty) - 4))
            at_limit = request(
                meta_v4, 5, {"topics": [{"name": name}], "allow_auto_topic_creation": False}
            )
            assert len(at_limit) - 4 == 1000
            sock.sendall(at_limit)
            correlation_id, metadata = codec.decode_response(
                codec.api_codec(*meta_v4), recv_frame(sock)
            )
            assert correlation_id == 5 and metadata.topics[0].error_code != ErrorCode.none
        with connect(broker) as sock:
            sock.sendall(struct.pack(">i", 1001) + b"\x00" * 1001)
            assert_closed_by_broker(sock)
        assert_close_logged(caplog, "outside 8..1000")
        with KafkaConnection(broker.bootstrap_servers, timeout_s=IO_TIMEOUT_S) as conn:
            assert conn.request(ApiKey.METADATA, METADATA_ALL).brokers


def test_truncated_frame_then_close(
    broker: EmbeddedBroker, good: KafkaConnection, caplog: pytest.LogCaptureFixture
) -> None:
    whole = request(META, 3, METADATA_ALL)
    with connect(broker) as sock:
        sock.sendall(
            struct.pack(">i", 100) + (whole[4:] + bytes(100))[:50]
        )  # promises 100, sends 50
        sock.shutdown(socket.SHUT_WR)
        assert_closed_by_broker(sock)
    assert_close_logged(caplog, "after 50 of 100 request bytes")
    with connect(broker) as sock:  # closed inside the size prefix
        sock.sendall(b"\x00\x00")
        sock.shutdown(socket.SHUT_WR)
        assert_closed_by_broker(sock)
    assert_close_logged(caplog, "inside a size prefix")
    assert_healthy(broker, good)


def test_half_sent_frame_does_not_block_anyone(
    broker: EmbeddedBroker, good: KafkaConnection
) -> None:
    """A client stuck half-way through a frame holds only its own connection."""
    whole = request(META, 3, METADATA_ALL)
    with connect(broker) as stuck:
        stuck.sendall(whole[: len(whole) // 2])
        assert_healthy(broker, good)
        # ... and when the rest arrives, the request is answered.
        stuck.sendall(whole[len(whole) // 2 :])
        correlation_id, metadata = codec.decode_response(codec.api_codec(*META), recv_frame(stuck))
        assert correlation_id == 3 and metadata.brokers


def test_request_sent_one_byte_at_a_time(broker: EmbeddedBroker) -> None:
    with connect(broker) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for byte in request(APIV, 9, APIV_BODY):
            sock.send(bytes([byte]))
        correlation_id, response = codec.decode_response(codec.api_codec(*APIV), recv_frame(sock))
        assert correlation_id == 9 and response.error_code == ErrorCode.none


# -- ApiVersions at an unsupported version ---------------------------------------------------


def _parse_api_versions_v0(frame: bytes) -> tuple[int, int, dict[int, tuple[int, int]]]:
    """Correlation id, error code, {api key: (min, max)}; the frame must be exactly v0."""
    correlation_id, error_code, count = struct.unpack_from(">ihi", frame, 0)
    assert count >= 0 and len(frame) == 10 + 6 * count, "not the v0 layout"
    entries = {}
    for i in range(count):
        key, low, high = struct.unpack_from(">hhh", frame, 10 + 6 * i)
        entries[key] = (low, high)
    return correlation_id, error_code, entries


@pytest.mark.parametrize("version", [SUPPORTED_VERSIONS[ApiKey.API_VERSIONS][1] + 1, 99, 32767, -1])
def test_api_versions_at_unsupported_version(
    broker: EmbeddedBroker, good: KafkaConnection, version: int
) -> None:
    with connect(broker) as sock:
        # As a newer client sends it: flexible header (tagged fields) and a v3-style body.
        v3 = bytearray(request(APIV, 4242, APIV_BODY))
        struct.pack_into(">h", v3, 6, version)
        sock.sendall(bytes(v3))
        correlation_id, error_code, entries = _parse_api_versions_v0(recv_frame(sock))
        assert correlation_id == 4242
        assert error_code == UNSUPPORTED_VERSION
        # Kafka lists ApiVersions' own range so the client can retry at its maximum.
        assert entries[ApiKey.API_VERSIONS] == SUPPORTED_VERSIONS[ApiKey.API_VERSIONS]
        assert all(SUPPORTED_VERSIONS.get(k) == span for k, span in entries.items())

        # The connection stays usable: retry at the advertised maximum, then a Metadata.
        retry = (ApiKey.API_VERSIONS, entries[ApiKey.API_VERSIONS][1])
        sock.sendall(request(retry, 4243, APIV_BODY))
        correlation_id, response = codec.decode_response(codec.api_codec(*retry), recv_frame(sock))
        assert correlation_id == 4243 and response.error_code == ErrorCode.none
        assert {
            k.api_key: (k.min_version, k.max_version) for k in response.api_keys
        } == SUPPORTED_VERSIONS
        sock.sendall(request(META, 4244, METADATA_ALL))
        correlation_id, metadata = codec.decode_response(codec.api_codec(*META), recv_frame(sock))
        assert correlation_id == 4244 and metadata.brokers
    assert_healthy(broker, good)


# -- tagged fields ------------------------------------------------------------------------------


def _metadata_with_unknown_tags(where: str, correlation_id: int) -> bytes:
    clean = request(META, correlation_id, METADATA_ALL)[4:]
    assert codec.api_codec(*META).flexible_request
    unknown = (
        b"\x02" + b"\x63\x03abc" + b"\x7b\x00"
    )  # two fields: tag 99 (3 bytes), tag 123 (empty)
    header_end = 8 + 2 + len(b"raw")
    if where == "header":
        assert clean[header_end] == 0
        return framed(clean[:header_end] + unknown + clean[header_end + 1 :])
    assert clean[-1] == 0  # the body's own tag section comes last
    return framed(clean[:-1] + unknown)


@pytest.mark.parametrize("where", ["header", "body"])
def test_unknown_tagged_fields_never_disturb_other_connections(
    broker: EmbeddedBroker, good: KafkaConnection, where: str
) -> None:
    with connect(broker) as sock:
        sock.sendall(_metadata_with_unknown_tags(where, 31))
        sock.settimeout(IO_TIMEOUT_S)
        try:  # answered (as Kafka does) or closed; a hang fails here with TimeoutError
            sock.recv(4)
        except ConnectionResetError:
            pass
    assert_healthy(broker, good)


@pytest.mark.parametrize("where", ["header", "body"])
def test_unknown_tagged_fields_are_skipped_as_kafka_does(
    broker: EmbeddedBroker, where: str
) -> None:
    with connect(broker) as sock:
        sock.sendall(_metadata_with_unknown_tags(where, 32))
        correlation_id, metadata = codec.decode_response(codec.api_codec(*META), recv_frame(sock))
        assert correlation_id == 32 and metadata.brokers


# -- Produce with a bad record batch ------------------------------------------------------------


def _flip_crc_covered_byte(data: bytes) -> bytes:
    corrupt = bytearray(data)
    corrupt[-2] ^= 0x40  # inside the last record: covered by the CRC
    return bytes(corrupt)


def _flip_crc_field(data: bytes) -> bytes:
    corrupt = bytearray(data)
    corrupt[17] ^= 0xFF  # the stored CRC itself
    return bytes(corrupt)


def _magic_v1_message(value: bytes) -> bytes:
    """A legacy (magic 1) message set of one message, as pre-0.11 clients sent."""
    body = struct.pack(">bbq", 1, 0, int(time.time() * 1000)) + struct.pack(">i", -1)
    body += struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


def _magic_v0_message(value: bytes) -> bytes:
    body = struct.pack(">bb", 0, 0) + struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


BAD_BATCHES: dict[str, tuple[Callable[[], bytes], int]] = {
    "crc-covered-byte-flipped": (
        lambda: _flip_crc_covered_byte(batch(b"a", b"b", b"c")),
        CORRUPT_MESSAGE,
    ),
    "crc-field-flipped": (lambda: _flip_crc_field(batch(b"a")), CORRUPT_MESSAGE),
    "magic-1": (lambda: _magic_v1_message(b"legacy"), INVALID_RECORD),
    "magic-0": (lambda: _magic_v0_message(b"legacy"), INVALID_RECORD),
    "batch-length-beyond-records": (lambda: batch(b"a", b"b")[:-5], CORRUPT_MESSAGE),
    "two-batches": (lambda: batch(b"a") + batch(b"b"), INVALID_RECORD),
}


@pytest.mark.parametrize("case", sorted(BAD_BATCHES))
def test_produce_with_bad_batch_gets_partition_error(
    broker: EmbeddedBroker, good: KafkaConnection, case: str
) -> None:
    make, expected = BAD_BATCHES[case]
    create_topic(good, "victim", partitions=2)
    with KafkaConnection(
        broker.bootstrap_servers, client_id="producer", timeout_s=IO_TIMEOUT_S
    ) as conn:
        # Partition 0 gets the bad batch, partition 1 a good one, in the same request.
        answers = produce(conn, "victim", {0: make(), 1: batch(b"fine")})
        assert answers[0].error_code == expected, answers[0]  # type: ignore[attr-defined]
        assert answers[0].base_offset == -1  # type: ignore[attr-defined]
        assert answers[1].error_code == ErrorCode.none and answers[1].base_offset == 0  # type: ignore[attr-defined]
        assert log_end(broker, "victim", 0) == 0, "a refused batch was appended"
        assert log_end(broker, "victim", 1) == 1
        # Same connection, next request: a good batch lands at offset 0.
        (answer,) = produce(conn, "victim", {0: batch(b"x", b"y")}).values()
        assert answer.error_code == ErrorCode.none and answer.base_offset == 0  # type: ignore[attr-defined]
        assert log_end(broker, "victim", 0) == 2
    assert_healthy(broker, good)


# -- pipelining -----------------------------------------------------------------------------------


def test_pipelined_requests_are_answered_in_order(broker: EmbeddedBroker) -> None:
    apis = [APIV if i % 2 == 0 else META for i in range(10)]
    bodies = [APIV_BODY if api == APIV else METADATA_ALL for api in apis]
    with connect(broker) as sock:
        sock.sendall(
            b"".join(
                request(api, 1000 + i, body)
                for i, (api, body) in enumerate(zip(apis, bodies, strict=True))
            )
        )
        for i, api in enumerate(apis):
            correlation_id, response = codec.decode_response(
                codec.api_codec(*api), recv_frame(sock)
            )
            assert correlation_id == 1000 + i
            if api == APIV:
                assert response.error_code == ErrorCode.none
            else:
                assert response.brokers


def test_slow_request_does_not_let_later_answers_overtake(
    broker: EmbeddedBroker, good: KafkaConnection
) -> None:
    """A long-polling Fetch, then fast requests behind it: answers come in request order."""
    create_topic(good, "quiet")
    create_topic(good, "busy")
    fetch = (ApiKey.FETCH, 4)
    produce_api = (ApiKey.PRODUCE, good.version_for(ApiKey.PRODUCE))
    fetch_body = {
        "replica_id": -1,
        "max_wait": 400,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "topics": [
            {
                "topic": "quiet",
                "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}],
            }
        ],
    }
    produce_body = {
        "transactional_id": None,
        "acks": -1,
        "timeout": 5000,
        "topic_data": [{"name": "busy", "partition_data": [{"index": 0, "records": batch(b"p")}]}],
    }
    sequence = [
        (fetch, fetch_body),
        (APIV, APIV_BODY),
        (produce_api, produce_body),
        (META, METADATA_ALL),
        (APIV, APIV_BODY),
    ]
    with connect(broker) as sock:
        started = time.monotonic()
        sock.sendall(b"".join(request(api, 50 + i, body) for i, (api, body) in enumerate(sequence)))
        for i, (api, _) in enumerate(sequence):
            correlation_id, response = codec.decode_response(
                codec.api_codec(*api), recv_frame(sock)
            )
            assert correlation_id == 50 + i
            if i == 0:
                assert time.monotonic() - started >= 0.3, "the fetch did not long-poll"
                assert response.responses[0].partitions[0].records in (b"", None)
            if api == produce_api:
                assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
    assert log_end(broker, "busy", 0) == 1


def test_requests_before_a_bad_frame_are_answered_then_closed(
    broker: EmbeddedBroker, good: KafkaConnection, caplog: pytest.LogCaptureFixture
) -> None:
    """Kafka reads one request at a time per connection, so whatever came before the bad
    frame is answered; a produce that was appended must get its acknowledgement."""
    create_topic(good, "before-bad")
    produce_api = (ApiKey.PRODUCE, good.version_for(ApiKey.PRODUCE))
    produce_body = {
        "transactional_id": None,
        "acks": -1,
        "timeout": 5000,
        "topic_data": [
            {"name": "before-bad", "partition_data": [{"index": 0, "records": batch(b"acked")}]}
        ],
    }
    with connect(broker) as sock:
        sock.sendall(
            request(META, 1, METADATA_ALL)
            + request(produce_api, 2, produce_body)
            + request(APIV, 3, APIV_BODY)
            + framed(header_v1(0x7FFF, 0, 4))
        )
        assert codec.decode_response(codec.api_codec(*META), recv_frame(sock))[0] == 1
        correlation_id, response = codec.decode_response(
            codec.api_codec(*produce_api), recv_frame(sock)
        )
        assert correlation_id == 2
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
        assert codec.decode_response(codec.api_codec(*APIV), recv_frame(sock))[0] == 3
        assert_closed_by_broker(sock)
    assert_close_logged(caplog, "unsupported api key 32767")
    assert log_end(broker, "before-bad", 0) == 1
    assert_healthy(broker, good)


# -- real clients after a barrage ------------------------------------------------------------


def test_real_clients_are_served_after_every_kind_of_bad_input(broker: EmbeddedBroker) -> None:
    bad_sockets = []
    for data, _ in CLOSING_CASES.values():
        sock = connect(broker)
        sock.sendall(data)
        bad_sockets.append(sock)
    hanging = connect(broker)
    hanging.sendall(struct.pack(">i", 500) + b"\x00\x03")  # half a frame, left open
    for sock in bad_sockets:
        assert_closed_by_broker(sock)
        sock.close()

    rdkafka_log = logging.getLogger("rdkafka")
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "acks": "all", "logger": rdkafka_log}
    )
    delivered: list[tuple[object, int]] = []
    for i in range(20):
        producer.produce(
            "after-barrage",
            b"value-%d" % i,
            on_delivery=lambda err, msg: delivered.append((err, msg.offset())),
        )
    assert producer.flush(15) == 0
    assert [err for err, _ in delivered] == [None] * 20
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": "barrage",
            "enable.auto.commit": False,
            "logger": rdkafka_log,
        }
    )
    try:
        consumer.assign(
            [confluent_kafka.TopicPartition("after-barrage", 0, confluent_kafka.OFFSET_BEGINNING)]
        )
        values = []
        deadline = time.monotonic() + 15
        while len(values) < 20 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                values.append(message.value())
        assert values == [b"value-%d" % i for i in range(20)]
    finally:
        consumer.close()
        hanging.close()
