"""The asyncio network server: frames in, responses out, in request order.

The server only moves bytes. Each connection has a reader loop that decodes requests and
starts their handling as tasks in arrival order, and a writer loop that sends the
responses in that same order, so a client may pipeline (five produce requests in flight,
a long-polling fetch behind a metadata request) and still get its answers in order, as
Kafka promises. A connection that breaks the protocol is closed with a log line; nothing
it sent can affect another connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any, Protocol

from oncelog.protocol import codec
from oncelog.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey, is_supported
from oncelog.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

# How many decoded requests may wait for their responses on one connection before the
# server stops reading from it: bounds memory without limiting a well-behaved client
# (librdkafka keeps at most five produce requests in flight).
MAX_PIPELINED_REQUESTS = 64


class Dispatcher(Protocol):
    def dispatch(
        self, header: codec.RequestHeader, request: Any, connection: ConnectionInfo
    ) -> Awaitable[Any | None]:
        """Start handling one request; await the result for its response (None: none)."""


class ConnectionInfo:
    """What a handler may know about the connection a request came on."""

    __slots__ = ("connection_id", "peer")

    def __init__(self, peer: str, connection_id: int) -> None:
        self.peer = peer
        self.connection_id = connection_id


class ProtocolViolation(Exception):
    """The client broke the protocol; its connection is closed."""


class KafkaServer:
    def __init__(
        self,
        dispatcher: Dispatcher,
        host: str,
        port: int,
        max_request_bytes: int,
    ) -> None:
        self._dispatcher = dispatcher
        self._host = host
        self._port = port
        self._max_request_bytes = max_request_bytes
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._next_connection_id = 0

    @property
    def port(self) -> int:
        assert self._server is not None, "server not started"
        return self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve_connection, self._host, self._port, reuse_address=True, limit=1 << 20
        )
        log.info("listening on %s:%d", self._host, self.port)

    async def stop(self) -> None:
        """Stop accepting, then close every connection."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self._next_connection_id += 1
        peer = _peer_name(writer)
        info = ConnectionInfo(peer, self._next_connection_id)
        pending: asyncio.Queue[tuple[int, codec.ApiCodec | None, Awaitable[Any] | bytes]] = (
            asyncio.Queue(MAX_PIPELINED_REQUESTS)
        )
        responder = asyncio.create_task(self._write_responses(pending, writer, peer))
        try:
            try:
                await self._read_requests(reader, pending, info)
            except ProtocolViolation as exc:
                log.warning("closing connection from %s: %s", peer, exc)
            # Whether the peer closed its side or broke the protocol, the requests read
            # before that point are answered, in order, before the connection closes: a
            # pipelined produce that was appended gets its acknowledgement, as it would
            # from Kafka (which reads one request at a time per connection).
            await _all_answered(pending, responder)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            # No awaiting here: this also runs when the server cancels the connection
            # at shutdown, and a second cancellation must not skip the close.
            responder.cancel()
            writer.close()
            self._connections.discard(task)

    async def _read_requests(
        self,
        reader: asyncio.StreamReader,
        pending: asyncio.Queue[tuple[int, codec.ApiCodec | None, Awaitable[Any] | bytes]],
        info: ConnectionInfo,
    ) -> None:
        while True:
            try:
                size_bytes = await reader.readexactly(4)
            except asyncio.IncompleteReadError as exc:
                if exc.partial:
                    raise ProtocolViolation("connection closed inside a size prefix") from exc
                return  # clean close between requests
            size = int.from_bytes(size_bytes, "big", signed=True)
            if size < 8 or size > self._max_request_bytes:
                raise ProtocolViolation(
                    f"request size {size} is outside 8..{self._max_request_bytes}"
                    " (socket.request.max.bytes)"
                )
            try:
                frame = await reader.readexactly(size)
            except asyncio.IncompleteReadError as exc:
                raise ProtocolViolation(
                    f"connection closed after {len(exc.partial)} of {size} request bytes"
                ) from exc
            await pending.put(self._start_request(frame, info))

    def _start_request(
        self, frame: bytes, info: ConnectionInfo
    ) -> tuple[int, codec.ApiCodec | None, Awaitable[Any] | bytes]:
        try:
            api_key, version, correlation_id = codec.peek_api(frame)
        except codec.MalformedRequest as exc:
            raise ProtocolViolation(str(exc)) from exc
        if not is_supported(api_key, version):
            if api_key == ApiKey.API_VERSIONS:
                reply = codec.encode_unsupported_api_versions(correlation_id, SUPPORTED_VERSIONS)
                return correlation_id, None, reply
            raise ProtocolViolation(f"unsupported api key {api_key} version {version}")
        api = codec.api_codec(api_key, version)
        try:
            header, request = codec.decode_request(frame, api)
        except codec.MalformedRequest as exc:
            raise ProtocolViolation(
                f"malformed {ApiKey(api_key).name} v{version} request: {exc}"
            ) from exc
        handling = asyncio.ensure_future(self._dispatcher.dispatch(header, request, info))
        return correlation_id, api, handling

    async def _write_responses(
        self,
        pending: asyncio.Queue[tuple[int, codec.ApiCodec | None, Awaitable[Any] | bytes]],
        writer: asyncio.StreamWriter,
        peer: str,
    ) -> None:
        while True:
            correlation_id, api, outcome = await pending.get()
            try:
                if isinstance(outcome, bytes):
                    writer.write(outcome)
                else:
                    assert api is not None
                    answer = await _answer(correlation_id, api, outcome, peer)
                    if answer is not None:
                        writer.write(answer)
                await writer.drain()
            except (ConnectionError, OSError):
                _drain_queue(pending)
                return
            except _Unanswerable as exc:
                log.warning("closing connection from %s: %s", peer, exc)
                writer.close()
                _drain_queue(pending)
                return
            finally:
                pending.task_done()


class _Unanswerable(Exception):
    """A request failed and its response has no field to say so: the connection closes."""


async def _answer(
    correlation_id: int, api: codec.ApiCodec, handling: Awaitable[Any], peer: str
) -> bytes | None:
    """The framed response to one request (None: it gets none, as an acks=0 produce).

    A handler that raises, or a response that does not encode, is a bug of ours: it is
    logged with its traceback, and the client gets UNKNOWN_SERVER_ERROR where the response
    has a top-level error field, as Kafka answers an unexpected failure; otherwise
    _Unanswerable closes the connection with a log line.
    """
    try:
        response = await handling
        return None if response is None else codec.encode_response(correlation_id, api, response)
    except Exception:
        name = f"{ApiKey(api.request_type.__api_key__).name} v{api.request_type.__version__}"
        log.exception("failed to answer %s request %d from %s", name, correlation_id, peer)
        fallback = codec.encode_error_response(correlation_id, api, ErrorCode.unknown_server_error)
        if fallback is None:
            raise _Unanswerable(f"{name} request {correlation_id} failed") from None
        return fallback


async def _all_answered(pending: asyncio.Queue[Any], responder: asyncio.Task[None]) -> None:
    """Wait until every queued request is answered, or the responder gave up."""
    joined = asyncio.ensure_future(pending.join())
    try:
        await asyncio.wait((joined, responder), return_when=asyncio.FIRST_COMPLETED)
    finally:
        joined.cancel()


def _drain_queue(pending: asyncio.Queue[Any]) -> None:
    """Mark every queued request done so the reader's join() does not wait forever."""
    while not pending.empty():
        _, _, outcome = pending.get_nowait()
        if isinstance(outcome, asyncio.Future):
            outcome.cancel()
        pending.task_done()


def _peer_name(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)
