"""The server's bounds on connections, against an embedded broker over loopback.

Each limit is shown both ways: what it refuses or closes, and that a client within it is
served as before.
"""

from __future__ import annotations

import logging
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest

from oncelog.client.connection import KafkaConnection, ProtocolClientError
from oncelog.protocol import codec
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import Record, build_batch
from oncelog.testing import EmbeddedBroker

from .raw_requests import FETCH_BY_NAME, create_topics, fetch_body, produce

IO_TIMEOUT_S = 10.0


def connect(broker: EmbeddedBroker) -> socket.socket:
    return socket.create_connection(("127.0.0.1", broker.port), timeout=IO_TIMEOUT_S)


def closed_by_broker(sock: socket.socket, within_s: float = IO_TIMEOUT_S) -> bool:
    """Whether the broker closes `sock` within `within_s` (nothing is sent on it)."""
    sock.settimeout(within_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def served(broker: EmbeddedBroker) -> bool:
    """A new connection negotiates its versions (one ApiVersions round trip)."""
    try:
        KafkaConnection(broker.bootstrap_servers, timeout_s=IO_TIMEOUT_S).close()
    except ProtocolClientError:
        return False
    return True


@pytest.fixture
def make_broker() -> Iterator[Any]:
    started: list[EmbeddedBroker] = []

    def make(**config: str) -> EmbeddedBroker:
        broker = EmbeddedBroker({k.replace("_", "."): v for k, v in config.items()}).start()
        started.append(broker)
        return broker

    yield make
    for broker in started:
        broker.stop()


def test_max_connections_closes_the_one_too_many(
    make_broker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="oncelog")
    broker = make_broker(max_connections="3")
    held = [connect(broker) for _ in range(2)]
    assert served(broker), "the third connection is within the limit"
    assert broker.broker is not None
    wait_until(lambda: broker.broker.server.connection_count == 2)
    keep = KafkaConnection(broker.bootstrap_servers, timeout_s=IO_TIMEOUT_S)  # the third
    with connect(broker) as extra:
        assert closed_by_broker(extra)
    assert "maximum of 3 connections" in caplog.text
    held.pop().close()
    wait_until(lambda: broker.broker.server.connection_count == 2)
    assert served(broker), "a slot is free again"
    keep.close()
    for sock in held:
        sock.close()


def test_max_connections_per_ip_and_its_overrides(make_broker: Any) -> None:
    strict = make_broker(max_connections_per_ip="2")
    held = [connect(strict) for _ in range(2)]
    with connect(strict) as extra:
        assert closed_by_broker(extra)
    for sock in held:
        sock.close()

    relaxed = make_broker(
        max_connections_per_ip="2", max_connections_per_ip_overrides="localhost:4"
    )
    held = [connect(relaxed) for _ in range(4)]  # four from 127.0.0.1: the override allows them
    assert not closed_by_broker(held[-1], within_s=0.5)
    with connect(relaxed) as extra:
        assert closed_by_broker(extra)
    for sock in held:
        sock.close()


def test_idle_connections_are_closed_and_busy_ones_are_not(make_broker: Any) -> None:
    broker = make_broker(connections_max_idle_ms="400")
    started = time.monotonic()  # before connecting: the broker's idle clock starts later
    with connect(broker) as idle:
        assert closed_by_broker(idle)
        assert time.monotonic() - started >= 0.4
    with KafkaConnection(broker.bootstrap_servers, timeout_s=IO_TIMEOUT_S) as busy:
        create_topic(busy, "nothing-yet")
        for _ in range(12):  # 1.2 s of requests 0.1 s apart: never idle for 0.4 s
            busy.request(
                ApiKey.API_VERSIONS,
                {"client_software_name": "t", "client_software_version": "1"},
                version=3,
            )
            time.sleep(0.1)
        # A long poll longer than the idle timeout: the connection waits for its answer.
        polling_since = time.monotonic()
        response = busy.request(
            ApiKey.FETCH, fetch_body("nothing-yet", max_wait_ms=1500), version=FETCH_BY_NAME
        )
        assert time.monotonic() - polling_since >= 1.4, "a long poll, not an error"
        assert [p.error_code for t in response.responses for p in t.partitions] == [0]


def test_a_frame_that_trickles_in_is_cut_off(
    make_broker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="oncelog")
    broker = make_broker(socket_request_read_timeout_ms="500")
    with connect(broker) as slow:
        started = time.monotonic()  # before the first byte: the broker's read clock starts later
        slow.sendall(struct.pack(">i", 100_000) + b"\x00\x12\x00\x03")  # 8 of 100,000 bytes
        assert closed_by_broker(slow)
        assert time.monotonic() - started >= 0.4
    assert "socket.request.read.timeout.ms" in caplog.text
    assert broker.broker is not None and broker.broker.server.memory_pool.reserved == 0
    assert served(broker)


def test_a_frame_waits_for_pool_memory_while_smaller_requests_pass(make_broker: Any) -> None:
    """With a 1 MiB pool, a 600 KiB frame being read holds 600 KiB: a second one waits for
    room (its bytes stay in the socket), a small request from another client is served."""
    kib = 1024
    broker = make_broker(queued_max_request_bytes=str(1024 * kib))
    assert broker.broker is not None
    pool = broker.broker.server.memory_pool
    first, second = connect(broker), connect(broker)
    first.sendall(struct.pack(">i", 600 * kib) + b"\x00" * 1000)
    wait_until(lambda: pool.reserved == 600 * kib)
    second.sendall(struct.pack(">i", 600 * kib) + b"\x00" * 1000)
    wait_until(lambda: pool.waiting == 1)
    assert served(broker), "a small request fits beside the 600 KiB frame"
    # Its bytes are released by a callback of the handling that may run just after the
    # response is written (about 1 in 200 round trips here): wait for it, do not race it.
    wait_until(lambda: pool.reserved == 600 * kib)
    assert pool.waiting == 1
    first.sendall(b"\x00" * (600 * kib - 1000))  # the rest: garbage, the broker closes it
    assert closed_by_broker(first)
    wait_until(lambda: pool.reserved == 600 * kib and pool.waiting == 0)  # the second's turn
    second.close()
    first.close()
    wait_until(lambda: pool.reserved == 0)


def test_fetch_max_bytes_caps_what_a_client_asks_for(make_broker: Any) -> None:
    broker = make_broker(fetch_max_bytes="1024")
    with KafkaConnection(broker.bootstrap_servers, timeout_s=IO_TIMEOUT_S) as conn:
        create_topic(conn, "capped")
        for i in range(10):
            batch = build_batch([Record(None, b"%03d" % i * 100)], timestamp_ms=1)
            assert produce(conn, "capped", 0, batch).error_code == ErrorCode.none
        response = conn.request(
            ApiKey.FETCH, fetch_body("capped", max_bytes=50 * 1024 * 1024), version=FETCH_BY_NAME
        )
        (records,) = [p.records for t in response.responses for p in t.partitions]
        assert 0 < len(records) <= 1024


def test_pipelined_fetches_start_one_after_another(make_broker: Any) -> None:
    """A Fetch starts once the answers before it are written: three pipelined long polls
    on an empty partition take three max_wait periods (without the rule: one)."""
    broker = make_broker()
    with KafkaConnection(broker.bootstrap_servers, timeout_s=IO_TIMEOUT_S) as conn:
        create_topic(conn, "quiet")
        api = codec.api_codec(ApiKey.FETCH, FETCH_BY_NAME)
        started = time.monotonic()
        for correlation_id in (101, 102, 103):
            conn.send_raw(codec.encode_request(api, correlation_id, "t", fetch_body("quiet", 400)))
        answered = [codec.decode_response(api, conn.receive_frame())[0] for _ in range(3)]
        assert answered == [101, 102, 103]
        assert time.monotonic() - started >= 3 * 0.4


# -- requests -----------------------------------------------------------------------------


def wait_until(condition: Any, timeout_s: float = IO_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def create_topic(conn: KafkaConnection, name: str) -> None:
    assert create_topics(conn, {name: 1})[name].error_code == ErrorCode.none
