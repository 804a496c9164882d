"""The server's answers: in request order on a connection, whatever order their handlers
end in, with requests that get no answer or whose handler fails keeping their places.

A KafkaServer in this test's event loop, with a dispatcher whose handlers wait on gates the
test opens, and a plain blocking socket as the client: while the test blocks in ``recv``
the loop runs nothing else, so what arrives then was written before, in the loop turns
the test let run.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

from oncelog.broker.server import ConnectionInfo, ConnectionLimits, KafkaServer, Listener
from oncelog.protocol import codec
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode

LIST_GROUPS = codec.api_codec(ApiKey.LIST_GROUPS, 4)
IO_TIMEOUT_S = 5.0
LIMITS = ConnectionLimits(
    max_request_bytes=1 << 20,
    queued_max_request_bytes=None,
    read_timeout_s=30.0,
    idle_timeout_s=600.0,
    max_connections=10,
    max_connections_per_ip=10,
    per_ip_overrides={},
)


class GatedDispatcher:
    """Answers each request (by correlation id) once the test opens its gate; those in
    ``silent`` get no answer (as an acks=0 produce), those in ``failing`` raise (a bug of
    ours: the server answers UNKNOWN_SERVER_ERROR)."""

    def __init__(self) -> None:
        self.gates: dict[int, asyncio.Future[None]] = {}
        self.started: dict[int, asyncio.Event] = {}
        self.silent: set[int] = set()
        self.failing: set[int] = set()

    def gate(self, correlation_id: int) -> asyncio.Future[None]:
        if correlation_id not in self.gates:
            self.gates[correlation_id] = asyncio.get_running_loop().create_future()
            self.started[correlation_id] = asyncio.Event()
        return self.gates[correlation_id]

    def dispatch(
        self, header: codec.RequestHeader, request: Any, connection: ConnectionInfo
    ) -> Coroutine[Any, Any, Any]:
        return self._answer(header.correlation_id)

    async def _answer(self, correlation_id: int) -> dict[str, Any] | None:
        gate = self.gate(correlation_id)
        self.started[correlation_id].set()
        await gate
        if correlation_id in self.failing:
            raise RuntimeError("a bug in a handler")
        if correlation_id in self.silent:
            return None
        return {"throttle_time": 0, "error_code": ErrorCode.none, "groups": []}


@asynccontextmanager
async def serving() -> AsyncIterator[tuple[GatedDispatcher, socket.socket]]:
    dispatcher = GatedDispatcher()
    server = KafkaServer(dispatcher, [Listener("PLAINTEXT", "127.0.0.1", 0)], LIMITS)
    await server.start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=IO_TIMEOUT_S) as sock:
            yield dispatcher, sock
    finally:
        await server.stop()


def send(sock: socket.socket, *correlation_ids: int) -> None:
    body = {"states_filter": [], "types_filter": []}
    sock.sendall(b"".join(codec.encode_request(LIST_GROUPS, c, "t", body) for c in correlation_ids))


def receive_answers(sock: socket.socket, count: int, timeout_s: float) -> list[int]:
    """The correlation ids of the next ``count`` answers; blocks the loop's thread."""
    return [correlation_id for correlation_id, _ in receive(sock, count, timeout_s)]


def receive(sock: socket.socket, count: int, timeout_s: float) -> list[tuple[int, ErrorCode]]:
    """(correlation id, error code) of the next ``count`` answers; blocks the loop's thread."""
    sock.settimeout(timeout_s)
    answers = []
    for _ in range(count):
        size = int.from_bytes(_exactly(sock, 4), "big")
        correlation_id, body = codec.decode_response(LIST_GROUPS, _exactly(sock, size))
        answers.append((correlation_id, ErrorCode(body.error_code)))
    return answers


def _exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        assert chunk, "the server closed the connection"
        data += chunk
    return data


async def started(dispatcher: GatedDispatcher, *correlation_ids: int) -> None:
    for correlation_id in correlation_ids:
        dispatcher.gate(correlation_id)
    async with asyncio.timeout(IO_TIMEOUT_S):
        for correlation_id in correlation_ids:
            await dispatcher.started[correlation_id].wait()


def test_answers_keep_request_order_when_later_handlers_end_first() -> None:
    async def scenario() -> list[int]:
        async with serving() as (dispatcher, sock):
            send(sock, 1, 2, 3)
            await started(dispatcher, 1, 2, 3)
            dispatcher.gates[3].set_result(None)
            dispatcher.gates[2].set_result(None)
            for _ in range(5):
                await asyncio.sleep(0)
            dispatcher.gates[1].set_result(None)
            await asyncio.sleep(0.05)  # the writer loop writes 2 and 3 after 1
            return receive_answers(sock, 3, IO_TIMEOUT_S)

    assert asyncio.run(scenario()) == [1, 2, 3]


def test_no_answer_and_a_failed_handlers_answer_keep_their_places() -> None:
    """Request 2 gets no answer, request 3's handler raises (UNKNOWN_SERVER_ERROR), and 4,
    whose handler ended first, follows it, all behind 1."""

    async def scenario() -> list[tuple[int, ErrorCode]]:
        async with serving() as (dispatcher, sock):
            dispatcher.silent.add(2)
            dispatcher.failing.add(3)
            send(sock, 1, 2, 3, 4)
            await started(dispatcher, 1, 2, 3, 4)
            for correlation_id in (4, 2, 1):
                dispatcher.gates[correlation_id].set_result(None)
            await asyncio.sleep(0.05)  # 1 and 4 answered; 3 is the next one due
            dispatcher.gates[3].set_result(None)
            await asyncio.sleep(0.05)  # 3's handler ends, then 3 and 4 are written
            return receive(sock, 3, timeout_s=IO_TIMEOUT_S)

    assert asyncio.run(scenario()) == [
        (1, ErrorCode.none),
        (3, ErrorCode.unknown_server_error),
        (4, ErrorCode.none),
    ]
