"""The asyncio network server: frames in, responses out, in request order.

The server only moves bytes. Each connection has a reader loop that decodes requests and
starts their handling as tasks in arrival order, and a writer loop that sends the
responses in that same order, so a client may pipeline (five produce requests in flight,
a long-polling fetch behind a metadata request) and still get its answers in order, as
Kafka promises. A connection that breaks the protocol is closed with a log line; nothing
it sent can affect another connection.

What connections may cost is bounded, with Kafka's keys where Kafka has one:
- how many: `max.connections`, `max.connections.per.ip` and its overrides
  (connection_quota.py); a connection beyond them is closed as soon as it is accepted;
- request bytes: a frame's declared size is reserved from the broker-wide pool
  (`queued.max.request.bytes`, memory_pool.py) before its body is read, and returned
  once the request is handled; the read buffer of a connection holds at most
  2 x READ_BUFFER_BYTES beyond that;
- time: the rest of a frame must arrive within `socket.request.read.timeout.ms` of its
  size (a client trickling in a large frame is cut off), a connection with nothing in
  progress for `connections.max.idle.ms` is closed, and so is one whose client has not
  read an answer for that long. One watchdog task checks every connection;
- answers: at most MAX_PIPELINED_REQUESTS requests per connection wait for their
  answers, and a Fetch, whose answer may be as large as `fetch.max.bytes`, starts only
  once every earlier answer on its connection is written, so a connection holds at most
  one such answer.

Each :class:`Listener` is one address with its security: TLS (the handshake completes
before the first byte is read; the client certificate, if any, names the principal) and
SASL, whose authentication state (security/sasl.py) sees every frame of its connection
first: until it succeeds only ApiVersions reaches the broker, frames are limited to
``sasl.server.max.receive.size``, and a failure is answered, then the connection closed
after ``connection.failed.authentication.delay.ms``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from oncelog.broker.answer_queue import AnswerQueue
from oncelog.broker.config import BrokerConfig
from oncelog.broker.connection_quota import ConnectionQuota, parse_overrides, resolve_overrides
from oncelog.broker.memory_pool import RequestMemoryPool
from oncelog.clock import wall_clock_ms
from oncelog.protocol import codec
from oncelog.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey, is_supported
from oncelog.protocol.errors import ErrorCode
from oncelog.security.principal import ANONYMOUS, KafkaPrincipal
from oncelog.security.sasl import Authenticated, Refuse, SaslServerAuthenticator, Send

log = logging.getLogger(__name__)

# How many decoded requests may wait for their responses on one connection before the
# server stops reading from it: bounds memory without limiting a well-behaved client
# (librdkafka keeps at most five produce requests in flight).
MAX_PIPELINED_REQUESTS = 64
# Requests whose answer may be large (a Fetch answer is up to `fetch.max.bytes`): one
# starts only once every earlier answer on its connection is written, so a client that
# pipelines them without reading holds one such answer, not MAX_PIPELINED_REQUESTS.
LARGE_ANSWER_APIS = frozenset({ApiKey.FETCH})
# The read buffer of a connection: bytes a client sent ahead of what the server has taken
# (asyncio stops reading the socket beyond twice this). A larger frame is read into
# memory the pool has reserved for it.
READ_BUFFER_BYTES = 64 * 1024
# How often the watchdog looks at every connection, at most (it looks more often when a
# timeout is shorter, so that no connection outlives its timeout by more than a quarter).
MAX_WATCH_INTERVAL_S = 1.0

PendingAnswer = tuple[int, codec.ApiCodec | None, Awaitable[Any] | bytes]


@dataclass(frozen=True)
class ConnectionLimits:
    """The bounds the server enforces, from the broker configuration."""

    max_request_bytes: int
    queued_max_request_bytes: int | None  # None: unbounded
    read_timeout_s: float
    idle_timeout_s: float
    max_connections: int
    max_connections_per_ip: int
    per_ip_overrides: Mapping[str, int]  # host (name or address) -> connections

    @classmethod
    def from_config(cls, config: BrokerConfig) -> ConnectionLimits:
        pool = config.queued_max_request_bytes
        return cls(
            max_request_bytes=config.socket_request_max_bytes,
            queued_max_request_bytes=pool if pool > 0 else None,
            read_timeout_s=config.socket_request_read_timeout_ms / 1000,
            idle_timeout_s=config.connections_max_idle_ms / 1000,
            max_connections=config.max_connections,
            max_connections_per_ip=config.max_connections_per_ip,
            per_ip_overrides=parse_overrides(config.max_connections_per_ip_overrides),
        )

    @property
    def watch_interval_s(self) -> float:
        shortest = min(self.read_timeout_s, self.idle_timeout_s)
        return min(MAX_WATCH_INTERVAL_S, shortest / 4)


class Dispatcher(Protocol):
    """What the server hands each decoded request to (the broker's handler table)."""

    def dispatch(
        self, header: codec.RequestHeader, request: Any, connection: ConnectionInfo
    ) -> Coroutine[Any, Any, Any | None]:
        """The handling of one request, run as its own task; its result is the response
        (None: none)."""


@dataclass(frozen=True)
class Listener:
    """One address the server listens on, and what its connections must do first.

    ``principal_of`` names a TLS connection's principal from the client certificate's DER
    bytes (None: no certificate); it raises to refuse the connection.
    ``new_authenticator`` makes the SASL state of a new connection.
    """

    name: str
    host: str
    port: int
    ssl_context: ssl.SSLContext | None = None
    principal_of: Callable[[bytes | None], KafkaPrincipal] | None = None
    new_authenticator: Callable[[], SaslServerAuthenticator] | None = None
    failed_authentication_delay_s: float = 0.1


class ConnectionInfo:
    """What a handler may know about the connection a request came on."""

    __slots__ = ("client_address", "connection_id", "listener", "peer", "principal")

    def __init__(
        self,
        peer: str,
        connection_id: int,
        listener: str = "PLAINTEXT",
        client_address: str = "127.0.0.1",
        principal: KafkaPrincipal = ANONYMOUS,
    ) -> None:
        self.peer = peer
        self.connection_id = connection_id
        self.listener = listener
        self.client_address = client_address
        self.principal = principal  # set again when SASL authentication succeeds


class ProtocolViolation(Exception):
    """The client broke the protocol; its connection is closed."""


class AuthenticationEnded(ProtocolViolation):
    """Authentication failed: ``reply`` (if any) is sent, then, after the listener's
    ``failed_authentication_delay_s``, the connection is closed."""

    def __init__(self, reason: str, reply: bytes | None = None) -> None:
        super().__init__(reason)
        self.reply = reply


class _Connection:
    """What the watchdog knows of one connection (times from the loop's clock)."""

    __slots__ = (
        "authenticator",
        "ip",
        "last_activity",
        "peer",
        "reading_since",
        "task",
        "unanswered",
        "writing_since",
    )

    def __init__(self, task: asyncio.Task[None], peer: str, ip: str, now: float) -> None:
        self.task = task
        self.authenticator: SaslServerAuthenticator | None = None  # SASL listeners only
        self.peer = peer
        self.ip = ip
        self.last_activity = now  # a frame read or an answer written
        self.reading_since: float | None = None  # a frame's size arrived, its body has not
        self.writing_since: float | None = None  # an answer waits for the client to read
        self.unanswered = 0

    def overdue(self, now: float, limits: ConnectionLimits) -> str | None:
        """Why this connection must be closed now, if it must."""
        if self.reading_since is not None and now - self.reading_since > limits.read_timeout_s:
            return (
                f"request not complete {now - self.reading_since:.1f} s after its size arrived"
                " (socket.request.read.timeout.ms)"
            )
        if self.writing_since is not None and now - self.writing_since > limits.idle_timeout_s:
            return (
                f"the client has not read an answer for {now - self.writing_since:.1f} s"
                " (connections.max.idle.ms)"
            )
        idle = self.reading_since is None and not self.unanswered
        if idle and now - self.last_activity > limits.idle_timeout_s:
            return f"idle for {now - self.last_activity:.1f} s (connections.max.idle.ms)"
        return None


class KafkaServer:
    """The listening socket and one reader and one writer loop per connection (see the module
    docstring); it only moves frames, the dispatcher handles requests."""

    def __init__(
        self, dispatcher: Dispatcher, listeners: Sequence[Listener], limits: ConnectionLimits
    ) -> None:
        self._dispatcher = dispatcher
        self._listeners = tuple(listeners)
        self._limits = limits
        self._quota = ConnectionQuota(limits.max_connections, limits.max_connections_per_ip, {})
        self._pool = RequestMemoryPool(limits.queued_max_request_bytes)
        self._servers: dict[str, asyncio.Server] = {}
        self._watchdog: asyncio.Task[None] | None = None
        self._connections: dict[asyncio.Task[None], _Connection] = {}
        self._next_connection_id = 0

    @property
    def port(self) -> int:
        """The port of the first listener."""
        return self.ports[self._listeners[0].name]

    @property
    def ports(self) -> dict[str, int]:
        """The port each listener is bound to, by listener name."""
        assert self._servers, "server not started"
        return {name: s.sockets[0].getsockname()[1] for name, s in self._servers.items()}

    def cap_connections(self, most: int) -> None:
        """Keep at most `most` connections, if max.connections allows more (the
        connections' share of the file-descriptor limit)."""
        self._quota.max_connections = min(self._quota.max_connections, most)

    @property
    def max_connections(self) -> int:
        return self._quota.max_connections

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    @property
    def connections_opened(self) -> int:
        """Connections accepted since the start (a test can tell a reconnection)."""
        return self._next_connection_id

    @property
    def memory_pool(self) -> RequestMemoryPool:
        return self._pool

    async def start(self) -> None:
        self._quota.per_ip_overrides = resolve_overrides(self._limits.per_ip_overrides)
        try:
            for listener in self._listeners:
                tls = listener.ssl_context is not None
                self._servers[listener.name] = await asyncio.start_server(
                    functools.partial(self._serve_connection, listener),
                    listener.host or None,  # empty: every interface, as in Kafka
                    listener.port,
                    reuse_address=True,
                    limit=READ_BUFFER_BYTES,
                    ssl=listener.ssl_context,
                    ssl_handshake_timeout=self._limits.read_timeout_s if tls else None,
                )
                log.info(
                    "listening on %s://%s:%d",
                    listener.name,
                    listener.host,
                    self.ports[listener.name],
                )
        except BaseException:
            await self.stop()
            raise
        self._watchdog = asyncio.create_task(self._watch_connections(), name="connection-watchdog")

    async def stop(self) -> None:
        """Stop accepting, then close every connection."""
        for server in self._servers.values():
            server.close()
        if self._watchdog is not None:
            self._watchdog.cancel()
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, *filter(None, [self._watchdog]), return_exceptions=True)
        for server in self._servers.values():
            await server.wait_closed()

    async def _watch_connections(self) -> None:
        """Close connections past their read or idle timeout."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self._limits.watch_interval_s)
            now = loop.time()
            for connection in list(self._connections.values()):
                reason = connection.overdue(now, self._limits)
                if reason is not None:
                    log.warning("closing connection from %s: %s", connection.peer, reason)
                    connection.task.cancel()

    async def _serve_connection(
        self, listener: Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        peer = _peer_name(writer)
        ip = _peer_ip(writer)
        refusal = self._quota.admit(ip)
        if refusal is not None:
            log.info("refusing connection from %s: %s", peer, refusal)
            writer.close()
            return
        try:
            principal = _certificate_principal(listener, writer)
        except Exception as exc:  # no mapping rule for the certificate, or it is unreadable
            log.info("failed authentication of %s on %s: %s", peer, listener.name, exc)
            self._quota.release(ip)
            writer.close()
            return
        connection = _Connection(task, peer, ip, asyncio.get_running_loop().time())
        if listener.new_authenticator is not None:
            connection.authenticator = listener.new_authenticator()
        self._connections[task] = connection
        self._next_connection_id += 1
        info = ConnectionInfo(peer, self._next_connection_id, listener.name, ip, principal)
        close_delay_s = 0.0
        pending: AnswerQueue[PendingAnswer] = AnswerQueue(MAX_PIPELINED_REQUESTS)
        responder = asyncio.create_task(_write_responses(pending, writer, connection))
        # A responder that stops on its own could not write to the client: stop reading too
        # (a reader waiting for room in the queue would otherwise wait forever).
        responder.add_done_callback(lambda done: None if done.cancelled() else task.cancel())
        try:
            try:
                await self._read_requests(reader, pending, connection, info)
            except AuthenticationEnded as exc:
                log.info("failed authentication of %s on %s: %s", peer, listener.name, exc)
                close_delay_s = listener.failed_authentication_delay_s
            except ProtocolViolation as exc:
                log.warning("closing connection from %s: %s", peer, exc)
            # Whether the peer closed its side or broke the protocol, the requests read
            # before that point are answered, in order, before the connection closes: a
            # pipelined produce that was appended gets its acknowledgement, as it would
            # from Kafka (which reads one request at a time per connection).
            await _all_answered(pending, responder)
            if close_delay_s:
                await asyncio.sleep(close_delay_s)  # slows down password guessing
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            # No awaiting here: this also runs when the server cancels the connection
            # at shutdown, and a second cancellation must not skip the close.
            responder.cancel()
            writer.close()
            del self._connections[task]
            self._quota.release(ip)

    async def _read_requests(
        self,
        reader: asyncio.StreamReader,
        pending: AnswerQueue[PendingAnswer],
        connection: _Connection,
        info: ConnectionInfo,
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                size_bytes = await reader.readexactly(4)
            except asyncio.IncompleteReadError as exc:
                if exc.partial:
                    raise ProtocolViolation("connection closed inside a size prefix") from exc
                return  # clean close between requests
            connection.last_activity = loop.time()
            size = int.from_bytes(size_bytes, "big", signed=True)
            self._check_size(size, connection.authenticator)
            # reserve() tries the same first; calling it only when that failed saves a
            # coroutine on every request.
            if not self._pool.try_reserve(size):
                await self._pool.reserve(size)
            try:
                answer = await self._read_and_start(reader, size, pending, connection, info)
            except AuthenticationEnded as ended:
                self._pool.release(size)
                if ended.reply is not None:
                    connection.unanswered += 1
                    await pending.put((0, None, ended.reply))
                raise
            except BaseException:
                self._pool.release(size)
                raise
            _release_when_handled(answer[2], self._pool, size)
            connection.unanswered += 1
            await pending.put(answer)

    def _check_size(self, size: int, authenticator: SaslServerAuthenticator | None) -> None:
        if authenticator is not None and authenticator.authenticating:
            limit = authenticator.max_frame_bytes
            if limit is not None and not 0 <= size <= limit:
                raise AuthenticationEnded(
                    f"Failing SASL authentication due to invalid receive size {size} "
                    f"(sasl.server.max.receive.size {limit})"
                )
        elif size < 8 or size > self._limits.max_request_bytes:
            raise ProtocolViolation(
                f"request size {size} is outside 8..{self._limits.max_request_bytes}"
                " (socket.request.max.bytes)"
            )

    async def _read_and_start(
        self,
        reader: asyncio.StreamReader,
        size: int,
        pending: AnswerQueue[PendingAnswer],
        connection: _Connection,
        info: ConnectionInfo,
    ) -> PendingAnswer:
        """Read a frame's body (its memory is reserved) and start handling it."""
        loop = asyncio.get_running_loop()
        connection.reading_since = loop.time()
        try:
            frame = await reader.readexactly(size)
        except asyncio.IncompleteReadError as exc:
            raise ProtocolViolation(
                f"connection closed after {len(exc.partial)} of {size} request bytes"
            ) from exc
        connection.reading_since = None
        connection.last_activity = loop.time()
        if connection.authenticator is not None:
            reply = _authenticate(connection.authenticator, frame, info)
            if reply is not None:
                return 0, None, reply
        try:
            api_key, version, correlation_id = codec.peek_api(frame)
        except codec.MalformedRequest as exc:
            raise ProtocolViolation(str(exc)) from exc
        if api_key in LARGE_ANSWER_APIS:
            await pending.join()
        return self._start_request(frame, info, api_key, version, correlation_id)

    def _start_request(
        self, frame: bytes, info: ConnectionInfo, api_key: int, version: int, correlation_id: int
    ) -> tuple[int, codec.ApiCodec | None, Awaitable[Any] | bytes]:
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
        handling = asyncio.get_running_loop().create_task(
            self._dispatcher.dispatch(header, request, info)
        )
        return correlation_id, api, handling


async def _write_responses(
    pending: AnswerQueue[PendingAnswer],
    writer: asyncio.StreamWriter,
    connection: _Connection,
) -> None:
    """Write a connection's answers in the order its requests came, each once ready."""
    loop = asyncio.get_running_loop()
    transport = writer.transport
    while True:
        correlation_id, api, outcome = await pending.get()
        try:
            if isinstance(outcome, bytes):
                _send(writer, outcome)
            else:
                assert api is not None
                answer = await _answer(correlation_id, api, outcome, connection.peer)
                if answer is not None:
                    _send(writer, answer)
            # drain() waits only while the transport is paused, and a transport pauses
            # only above its high-water mark, so with nothing buffered it would not wait;
            # it raises once the connection is lost (or the reader failed), which a
            # closing transport always sends through it. With neither it would return at
            # once, so it is skipped: most answers, on the request path of every
            # transaction (tests/broker/test_responder_drain.py pins both conditions).
            if transport.get_write_buffer_size() or transport.is_closing():
                connection.writing_since = loop.time()
                await writer.drain()
                connection.writing_since = None
            connection.last_activity = loop.time()
        except (ConnectionError, OSError):
            _drain_queue(pending)
            return
        except _Unanswerable as exc:
            log.warning("closing connection from %s: %s", connection.peer, exc)
            writer.close()
            _drain_queue(pending)
            return
        finally:
            connection.unanswered -= 1
            pending.task_done()


def _send(writer: asyncio.StreamWriter, data: bytes) -> None:
    """Write ``data``; ConnectionResetError if the client has gone: uvloop's write on a
    closing transport raises RuntimeError, which would end the responder with an exception
    no one retrieves and leave its queue undrained. Asked only after a failed write: every
    answer goes through here."""
    try:
        writer.write(data)
    except RuntimeError:
        if not writer.transport.is_closing():
            raise
        raise ConnectionResetError("the connection is closing") from None


def _authenticate(
    authenticator: SaslServerAuthenticator, frame: bytes, info: ConnectionInfo
) -> bytes | None:
    """Let the connection's SASL state see a frame first: the bytes to answer when it takes
    the frame itself, None when the broker is to handle it as a request."""
    decision = authenticator.receive(frame, wall_clock_ms())
    if isinstance(decision, Refuse):
        raise AuthenticationEnded(decision.reason, decision.frame)
    if isinstance(decision, Authenticated):
        if info.principal != decision.principal:
            log.debug(
                "%s authenticated as %s with %s on %s",
                info.peer,
                decision.principal,
                decision.mechanism,
                info.listener,
            )
        info.principal = decision.principal
        return decision.frame
    if isinstance(decision, Send):
        return decision.frame
    return None


def _certificate_principal(listener: Listener, writer: asyncio.StreamWriter) -> KafkaPrincipal:
    """The principal a TLS client's certificate names (ANONYMOUS without one)."""
    if listener.principal_of is None:
        return ANONYMOUS
    tls = writer.get_extra_info("ssl_object")
    der = tls.getpeercert(binary_form=True) if tls is not None else None
    return listener.principal_of(der)


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


async def _all_answered(pending: AnswerQueue[Any], responder: asyncio.Task[None]) -> None:
    """Wait until every queued request is answered, or the responder gave up."""
    joined = asyncio.ensure_future(pending.join())
    try:
        await asyncio.wait((joined, responder), return_when=asyncio.FIRST_COMPLETED)
    finally:
        joined.cancel()


def _release_when_handled(
    outcome: Awaitable[Any] | bytes, pool: RequestMemoryPool, size: int
) -> None:
    """Give a request's reserved bytes back once its handling is over."""
    if isinstance(outcome, asyncio.Future):
        outcome.add_done_callback(lambda _: pool.release(size))
    else:
        pool.release(size)


def _drain_queue(pending: AnswerQueue[Any]) -> None:
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


def _peer_ip(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    if isinstance(peer, tuple) and peer:
        return str(peer[0])
    return str(peer)
