"""A fault-injection proxy between Kafka clients and a broker, for chaos tests.

    with EmbeddedBroker() as broker, FaultInjectionProxy(drop_response_rate=0.05, seed=7) as proxy:
        proxy.attach(broker)   # forward to this broker; its Metadata now names the proxy
        producer = confluent_kafka.Producer({"bootstrap.servers": proxy.bootstrap_servers})
        ...
        print(proxy.stats)

The proxy listens on a free port of 127.0.0.1 (or ``listen_port``) and runs its own event
loop in a daemon thread, so synchronous client code can use it. It reads Kafka's framing
(a 4-byte big-endian size before every request and response) in both directions, so every
fault applies to one whole request or response, never to a stray byte. PLAINTEXT only.

Faults, each drawn from one seeded ``random.Random`` (``seed``; the proxy picks and logs
one when none is given, see :attr:`FaultInjectionProxy.seed`):

``drop_response_rate``
    The broker handled the request but its response never reaches the client: the
    "lost acknowledgement" of an idempotent producer.
``drop_request_rate``
    The request never reaches the broker.
``delay_ms``
    Every response is held for a time drawn uniformly from ``(low, high)`` (one number:
    exactly that long). Responses of one connection keep their order: a response is never
    released before the one ahead of it.
``cut_connection_rate``
    Drawn per request: the request is forwarded, then both sides of the connection are
    closed at once. The client cannot know whether the broker handled it (it did when it
    read the whole request before the close, which is the usual case). Cutting *before*
    forwarding is ``drop_request_rate`` with ``close_after_drop_ms=0``.
    :meth:`FaultInjectionProxy.cut_all_connections` cuts every open connection on demand.

Two more, on demand rather than drawn, and outside ``api_keys`` and :meth:`pause`:

:meth:`FaultInjectionProxy.answer_errors`
    The next N responses to one API reach the client with every ``error_code`` in them
    set to one code: the broker handled the request, the client sees it fail, as it does
    when a leader moves or a coordinator loads. For a client's retries of a read-only
    request (ListOffsets, Metadata), counted exactly, with no election to wait for.
:meth:`FaultInjectionProxy.recorded`
    The decoded requests of the APIs named in ``record_api_keys``: what a client really
    sent (the group id of a FindCoordinator, say), where the broker keeps no trace of it.

What happens to a connection after a dropped request or response
-----------------------------------------------------------------
TCP never loses one message in the middle of a stream, and Kafka answers the requests of a
connection in order, matched by correlation id. A client that saw response 7 missing and
then response 8 arrive would be looking at something no network produces: the Java client
fails with a correlation-id mismatch, librdkafka times the request out and disconnects
(``socket.max.fails``). So a drop is modelled as the moment that connection died: from the
drop on, the connection is *dead* -- nothing more passes in either direction (later
requests are not forwarded, later responses are swallowed; both are counted as
``*_discarded``) -- and ``close_after_drop_ms`` later (default 50 ms) the proxy closes both
sides. The client sees a disconnect, reconnects and retries what was in flight, which is
exactly what a lost acknowledgement looks like to it. With ``close_after_drop_ms=None``
the dead connection stays open until the client gives up on it (``request.timeout.ms``)
and closes it: the slower "silent network" case. Responses already released before the
drop are delivered; a response still held by ``delay_ms`` is lost with the close.

Reproducibility: the same seed gives the same sequence of decisions. Which request meets
which decision follows arrival order across connections, so runs are reproducible when the
client's traffic is (one connection, one request at a time), and statistically alike
otherwise.

Advertising the proxy
---------------------
Clients bootstrap through the proxy, then connect to whatever address Metadata returns;
the broker must return the proxy's, or clients go around it after the first request.

* :class:`~oncelog.testing.EmbeddedBroker`: :meth:`FaultInjectionProxy.attach` sets the
  upstream and calls ``Broker.advertise`` (a new Broker after ``EmbeddedBroker.restart()``
  advertises itself again: call ``attach`` again, or use the config route below, which
  survives restarts).
* :class:`~oncelog.testing.BrokerProcess` (or any broker started from configuration): start
  the proxy first, pass ``advertised.listeners`` set to :attr:`advertised_listener`, then
  point the proxy at the broker::

      with FaultInjectionProxy(drop_response_rate=0.05) as proxy:
          listener = {"advertised.listeners": proxy.advertised_listener}
          broker = BrokerProcess(tmp_path, config=listener)
          with broker:
              proxy.set_upstream("127.0.0.1", broker.port)
              ...

  ``listen_port`` fixes the proxy's port in advance when the broker must start first.

Safety: the proxy only ever connects to a loopback upstream (127.0.0.0/8, ::1,
``localhost``); any other address is refused with ValueError, so a test can never send
traffic elsewhere.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import ipaddress
import logging
import random
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oncelog.protocol.codec import (
    api_codec,
    decode_request,
    decode_response,
    encode_response_entity,
)
from oncelog.protocol.errors import ErrorCode
from oncelog.testing.lifecycle import Lifecycle, LoopThread

if TYPE_CHECKING:
    from oncelog.testing.embedded import EmbeddedBroker

__all__ = ["FaultConfig", "FaultInjectionProxy", "ProxyStats"]

log = logging.getLogger(__name__)

LISTEN_HOST = "127.0.0.1"
START_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 5.0
# Larger than any request or response a broker accepts or sends (socket.request.max.bytes
# defaults to 100 MiB, fetch.max.bytes to 55 MiB); a bigger size prefix is garbage.
DEFAULT_MAX_FRAME_BYTES = 256 * 1024 * 1024
# Responses waiting (delayed) per connection before the proxy stops reading the broker.
_RESPONSE_QUEUE = 256


@dataclass(frozen=True)
class FaultConfig:
    """What the proxy injects. Immutable: change it with :meth:`FaultInjectionProxy.set_faults`.

    ``api_keys`` limits every fault (drops, delays, cuts) to requests with these API keys
    and their responses, e.g. ``{ApiKey.PRODUCE}``; ``None`` applies them to all.
    """

    drop_response_rate: float = 0.0
    drop_request_rate: float = 0.0
    delay_ms: tuple[float, float] = (0.0, 0.0)
    cut_connection_rate: float = 0.0
    close_after_drop_ms: float | None = 50.0
    api_keys: frozenset[int] | None = None

    def __post_init__(self) -> None:
        for name in ("drop_response_rate", "drop_request_rate", "cut_connection_rate"):
            rate = getattr(self, name)
            if not isinstance(rate, (int, float)) or not 0.0 <= rate <= 1.0:
                raise ValueError(f"{name} must be a fraction in 0..1, not {rate!r}")
        delay = self.delay_ms
        if isinstance(delay, (int, float)):
            delay = (float(delay), float(delay))
        low, high = delay
        if not 0.0 <= low <= high:
            raise ValueError(
                f"delay_ms must be a number >= 0 or a range (low, high), not {self.delay_ms!r}"
            )
        object.__setattr__(self, "delay_ms", (float(low), float(high)))
        if self.close_after_drop_ms is not None and self.close_after_drop_ms < 0:
            raise ValueError(
                f"close_after_drop_ms must be >= 0 or None, not {self.close_after_drop_ms!r}"
            )
        if self.api_keys is not None:
            object.__setattr__(self, "api_keys", frozenset(int(k) for k in self.api_keys))

    def applies_to(self, api_key: int | None) -> bool:
        return self.api_keys is None or api_key in self.api_keys


@dataclass(frozen=True)
class ProxyStats:
    """Counters since the proxy started (a snapshot: read :attr:`FaultInjectionProxy.stats`
    again for newer figures)."""

    connections_accepted: int = 0
    connections_open: int = 0
    upstream_connect_failures: int = 0
    requests_forwarded: int = 0
    responses_forwarded: int = 0
    requests_dropped: int = 0  # drop_request_rate hits
    responses_dropped: int = 0  # drop_response_rate hits
    requests_discarded: int = 0  # arrived on a connection already dead from a drop
    responses_discarded: int = 0  # ditto, from the broker
    connections_closed_after_drop: int = 0
    connections_cut: int = 0  # cut_connection_rate hits
    connections_cut_by_call: int = 0  # cut_all_connections()
    responses_delayed: int = 0
    delay_ms_total: float = 0.0
    responses_with_errors: int = 0  # answer_errors

    @property
    def faults(self) -> int:
        """Faults injected by choice (drops and cuts), not counting their consequences."""
        return (
            self.requests_dropped
            + self.responses_dropped
            + self.connections_cut
            + self.connections_cut_by_call
            + self.responses_with_errors
        )


class _FramingError(Exception):
    pass


class FaultInjectionProxy(Lifecycle):
    """A Kafka-aware TCP proxy on 127.0.0.1 that drops, delays and cuts (module docs)."""

    def __init__(
        self,
        upstream: tuple[str, int] | str | None = None,
        *,
        listen_port: int = 0,
        drop_response_rate: float = 0.0,
        drop_request_rate: float = 0.0,
        delay_ms: float | tuple[float, float] = 0.0,
        cut_connection_rate: float = 0.0,
        close_after_drop_ms: float | None = 50.0,
        api_keys: Iterable[int] | None = None,
        seed: int | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        record_api_keys: Iterable[int] = (),
    ) -> None:
        self._faults = FaultConfig(
            drop_response_rate=drop_response_rate,
            drop_request_rate=drop_request_rate,
            delay_ms=delay_ms,  # type: ignore[arg-type]  # normalised in __post_init__
            cut_connection_rate=cut_connection_rate,
            close_after_drop_ms=close_after_drop_ms,
            api_keys=frozenset(api_keys) if api_keys is not None else None,
        )
        self._upstream = _parse_upstream(upstream) if upstream is not None else None
        if not 0 <= listen_port <= 65535:
            raise ValueError(f"listen_port must be 0..65535, not {listen_port}")
        self._listen_port = listen_port
        self.seed: int = seed if seed is not None else random.SystemRandom().randrange(2**32)
        self._rng = random.Random(self.seed)
        self._max_frame_bytes = max_frame_bytes
        self._paused = False
        self._lock = threading.Lock()
        self._counts: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(ProxyStats)}
        self._loop_thread = LoopThread("oncelog-fault-proxy", START_TIMEOUT_S)
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._port: int | None = None
        self._record_api_keys = frozenset(record_api_keys)
        self._recorded: list[tuple[int, float, Any]] = []  # api key, time.monotonic(), body
        self._errors_to_answer: dict[int, tuple[int, int]] = {}  # api key: (code, how many)

    # -- addresses ------------------------------------------------------------------------

    @property
    def host(self) -> str:
        return LISTEN_HOST

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the proxy is not running")
        return self._port

    @property
    def bootstrap_servers(self) -> str:
        return f"{LISTEN_HOST}:{self.port}"

    @property
    def advertised_listener(self) -> str:
        """The broker's ``advertised.listeners`` value that sends clients through the proxy."""
        return f"PLAINTEXT://{LISTEN_HOST}:{self.port}"

    @property
    def upstream(self) -> tuple[str, int] | None:
        return self._upstream

    def set_upstream(self, host: str, port: int) -> None:
        """Forward new connections to host:port (loopback only). Open connections keep
        their broker; :meth:`cut_all_connections` moves them."""
        self._upstream = _parse_upstream((host, port))

    def attach(self, embedded: EmbeddedBroker) -> None:
        """Put the proxy in front of a running EmbeddedBroker: forward to it, and make its
        Metadata advertise the proxy. Call again after ``embedded.restart()``."""
        broker = getattr(embedded, "broker", None)
        if broker is None:
            if hasattr(embedded, "broker"):
                raise RuntimeError("start the EmbeddedBroker before attaching the proxy")
            raise TypeError(
                f"attach() takes a running EmbeddedBroker, not {type(embedded).__name__}; for a "
                "broker process, set advertised.listeners to proxy.advertised_listener"
            )
        self.set_upstream(LISTEN_HOST, broker.port)
        broker.advertise(LISTEN_HOST, self.port)

    # -- faults ---------------------------------------------------------------------------

    @property
    def faults(self) -> FaultConfig:
        return self._faults

    def set_faults(self, **changes: Any) -> FaultConfig:
        """Change some fault settings (names as in the constructor) from now on."""
        if "api_keys" in changes and changes["api_keys"] is not None:
            changes["api_keys"] = frozenset(changes["api_keys"])
        self._faults = dataclasses.replace(self._faults, **changes)
        return self._faults

    def pause(self) -> None:
        """Stop injecting faults (everything passes, undelayed) until :meth:`resume`.
        Connections already dead from a drop still close."""
        self._paused = True

    def resume(self) -> None:
        self._paused = False

    @property
    def paused(self) -> bool:
        return self._paused

    def answer_errors(self, api_key: int, error_code: int, count: int) -> None:
        """The next `count` responses to requests of `api_key` (on any connection) reach
        the client with every ``error_code`` field in them, at any depth, set to
        `error_code`; the broker still handles the requests. Replaces what is left of an
        earlier call for the same API; `count` 0 ends it. A response dropped by
        `drop_response_rate` is not counted."""
        if count < 0:
            raise ValueError(f"count must be >= 0, not {count}")
        with self._lock:
            self._errors_to_answer[api_key] = (error_code, count)

    def errors_left(self, api_key: int) -> int:
        """How many responses to `api_key` are still to be answered with an error."""
        with self._lock:
            return self._errors_to_answer.get(api_key, (0, 0))[1]

    def recorded(self, api_key: int) -> list[tuple[float, Any]]:
        """The requests of `api_key` forwarded so far, oldest first: when each arrived
        (``time.monotonic()``) and its decoded body (kio's entity). `api_key` must be in
        ``record_api_keys``. Kept for the proxy's life: record only what a test counts."""
        if api_key not in self._record_api_keys:
            raise ValueError(f"API {api_key} is not recorded (record_api_keys)")
        with self._lock:
            return [(at, body) for key, at, body in self._recorded if key == api_key]

    @property
    def stats(self) -> ProxyStats:
        with self._lock:
            return ProxyStats(**self._counts)

    def cut_all_connections(self) -> int:
        """Close every open client connection and its broker connection now; return how
        many. Clients reconnect (through the proxy) and retry what was in flight."""
        return self._loop_thread.run(self._cut_all())

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> FaultInjectionProxy:
        if self._loop_thread.running:
            raise RuntimeError("the proxy is already running")
        self._loop_thread.start(self._listen)
        log.info(
            "fault-injection proxy on %s -> %s, seed %d, %s",
            self.bootstrap_servers,
            self._upstream,
            self.seed,
            self._faults,
        )
        return self

    def stop(self) -> None:
        """Close the listener and every connection, and end the proxy's thread."""
        self._loop_thread.stop(self._shutdown)
        self._port = None

    # -- internals: on the proxy's loop -----------------------------------------------------

    def _count(self, name: str, amount: float = 1) -> None:
        with self._lock:
            self._counts[name] += amount

    def _active(self, api_key: int | None) -> FaultConfig | None:
        """The fault settings that apply to this request or response, if any do."""
        faults = self._faults
        if self._paused or not faults.applies_to(api_key):
            return None
        return faults

    def _draw(self, rate: float) -> bool:
        return rate > 0.0 and (rate >= 1.0 or self._rng.random() < rate)

    def _record(self, api_key: int, version: int, frame: bytes) -> None:
        if api_key in self._record_api_keys:
            arrived = time.monotonic()
            _, body = decode_request(frame[4:], api_codec(api_key, version))
            with self._lock:
                self._recorded.append((api_key, arrived, body))

    def _error_to_answer(self, api_key: int) -> int | None:
        """The error code this response to `api_key` is to carry instead of the broker's,
        if any; counts it."""
        with self._lock:
            code, left = self._errors_to_answer.get(api_key, (0, 0))
            if left <= 0:
                return None
            self._errors_to_answer[api_key] = (code, left - 1)
            return code

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, LISTEN_HOST, self._listen_port, reuse_address=True, limit=1 << 20
        )
        self._port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            link.close()
        tasks = [link.task for link in self._links if link.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=START_TIMEOUT_S)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _cut_all(self) -> int:
        links = [link for link in self._links if not link.done.is_set()]
        for link in links:
            link.close()
        self._count("connections_cut_by_call", len(links))
        return len(links)

    async def _serve(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        link = _Link(self, client_writer)
        self._links.add(link)
        self._count("connections_accepted")
        self._count("connections_open")
        try:
            upstream = self._upstream
            if upstream is None:
                log.warning("proxy: no upstream set; closing the client connection")
                self._count("upstream_connect_failures")
                return
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_S):
                    upstream_reader, link.upstream_writer = await asyncio.open_connection(
                        *upstream, limit=1 << 20
                    )
            except (TimeoutError, OSError) as exc:
                log.warning("proxy: cannot reach the broker at %s:%d: %s", *upstream, exc)
                self._count("upstream_connect_failures")
                return
            link.start(client_reader, upstream_reader)
            await link.done.wait()
        finally:
            link.close(graceful=True)  # a no-op after an abort (cut, drop)
            await link.finish()
            self._links.discard(link)
            self._count("connections_open", -1)


class _Link:
    """One client connection and its broker connection."""

    def __init__(self, proxy: FaultInjectionProxy, client_writer: asyncio.StreamWriter) -> None:
        self.proxy = proxy
        self.client_writer = client_writer
        self.upstream_writer: asyncio.StreamWriter | None = None
        # (correlation id, api key, version) of forwarded requests, oldest first. A request
        # without a response (Produce with acks=0) is skipped when a later response arrives.
        self.in_flight: collections.deque[tuple[int, int, int]] = collections.deque()
        self.dead = False  # a request or response was dropped: nothing passes any more
        self.done = asyncio.Event()
        self.task = asyncio.current_task()
        self.responses: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue(_RESPONSE_QUEUE)
        self._last_release = 0.0
        self._tasks: list[asyncio.Task[None]] = []
        self._close_timer: asyncio.TimerHandle | None = None

    def start(
        self, client_reader: asyncio.StreamReader, upstream_reader: asyncio.StreamReader
    ) -> None:
        self._tasks = [
            asyncio.create_task(self._guard(lambda: self._pump_requests(client_reader))),
            asyncio.create_task(self._guard(lambda: self._pump_responses(upstream_reader))),
            asyncio.create_task(self._guard(self._write_responses, last=True)),
        ]

    async def _guard(self, work: Callable[[], Awaitable[None]], last: bool = False) -> None:
        """Run one direction; an error (or the end of the client-bound stream) ends the link.
        The direction's coroutine is made here: a link cut before this task first runs
        cancels it, and a coroutine made outside would be dropped unawaited (a warning)."""
        try:
            await work()
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            self.done.set()
        except _FramingError as exc:
            log.warning("proxy: closing a connection: %s", exc)
            self.done.set()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("proxy: unexpected error; closing the connection")
            self.done.set()
        else:
            if last:
                self.done.set()

    def close(self, graceful: bool = False) -> None:
        """Close both sides (idempotent): at once, or after sending what is buffered."""
        self.done.set()
        if self._close_timer is not None:
            self._close_timer.cancel()
        for writer in (self.client_writer, self.upstream_writer):
            if writer is not None:
                if graceful:
                    writer.close()
                else:
                    writer.transport.abort()

    async def finish(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def die(self, faults: FaultConfig) -> None:
        """A drop happened: nothing passes from now on; close both sides later."""
        if self.dead:
            return
        self.dead = True
        if faults.close_after_drop_ms is not None:
            loop = asyncio.get_running_loop()
            self._close_timer = loop.call_later(
                faults.close_after_drop_ms / 1000, self._close_after_drop
            )

    def _close_after_drop(self) -> None:
        self._close_timer = None
        if not self.done.is_set():
            self.proxy._count("connections_closed_after_drop")
            self.close()

    def _match(self, correlation_id: int) -> tuple[int, int] | None:
        """The API key and version of the request this response answers."""
        for i, (cid, _, _) in enumerate(self.in_flight):
            if cid == correlation_id:
                for _ in range(i):
                    self.in_flight.popleft()  # requests that get no response (acks=0)
                _, api_key, version = self.in_flight.popleft()
                return api_key, version
        return None

    async def _pump_requests(self, reader: asyncio.StreamReader) -> None:
        proxy = self.proxy
        assert self.upstream_writer is not None
        upstream = self.upstream_writer
        while True:
            frame = await _read_frame(reader, proxy._max_frame_bytes, "client")
            if frame is None:
                if self.dead or not upstream.can_write_eof():
                    self.done.set()
                else:  # the client closed its side: let the broker answer, then close
                    upstream.write_eof()
                return
            if self.dead:
                proxy._count("requests_discarded")
                continue
            if len(frame) < 12:
                raise _FramingError(f"a {len(frame) - 4}-byte request has no header")
            api_key = int.from_bytes(frame[4:6], "big", signed=True)
            version = int.from_bytes(frame[6:8], "big", signed=True)
            correlation_id = int.from_bytes(frame[8:12], "big", signed=True)
            faults = proxy._active(api_key)
            if faults is not None and proxy._draw(faults.drop_request_rate):
                proxy._count("requests_dropped")
                self.die(faults)
                continue
            proxy._record(api_key, version, frame)
            self.in_flight.append((correlation_id, api_key, version))
            upstream.write(frame)
            await upstream.drain()
            proxy._count("requests_forwarded")
            if faults is not None and proxy._draw(faults.cut_connection_rate):
                proxy._count("connections_cut")
                self.close()
                return

    async def _pump_responses(self, reader: asyncio.StreamReader) -> None:
        proxy = self.proxy
        loop = asyncio.get_running_loop()
        while True:
            frame = await _read_frame(reader, proxy._max_frame_bytes, "broker")
            if frame is None:
                # The broker closed: the client's side ends after the responses queued.
                await self.responses.put(None)
                return
            if len(frame) < 8:
                raise _FramingError(f"a {len(frame) - 4}-byte response has no correlation id")
            answered = self._match(int.from_bytes(frame[4:8], "big", signed=True))
            api_key = answered[0] if answered is not None else None
            if self.dead:
                proxy._count("responses_discarded")
                continue
            faults = proxy._active(api_key)
            delay_ms = 0.0
            if faults is not None:
                if proxy._draw(faults.drop_response_rate):
                    proxy._count("responses_dropped")
                    self.die(faults)
                    continue
                low, high = faults.delay_ms
                if high > 0.0:
                    delay_ms = low if low == high else proxy._rng.uniform(low, high)
                    proxy._count("responses_delayed")
                    proxy._count("delay_ms_total", delay_ms)
            if answered is not None:
                error_code = proxy._error_to_answer(answered[0])
                if error_code is not None:
                    frame = _with_error_code(frame, *answered, error_code)
                    proxy._count("responses_with_errors")
            # Never before the response ahead of it: order is kept per connection.
            release = max(loop.time() + delay_ms / 1000, self._last_release)
            self._last_release = release
            await self.responses.put((release, frame))

    async def _write_responses(self) -> None:
        loop = asyncio.get_running_loop()
        writer = self.client_writer
        while True:
            item = await self.responses.get()
            if item is None:
                return
            release, frame = item
            wait = release - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(frame)
            await writer.drain()
            self.proxy._count("responses_forwarded")


async def _read_frame(reader: asyncio.StreamReader, max_bytes: int, side: str) -> bytes | None:
    """One size-prefixed frame, prefix included; None at a clean end of stream."""
    try:
        prefix = await reader.readexactly(4)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise _FramingError(f"the {side} closed inside a size prefix") from exc
        return None
    size = int.from_bytes(prefix, "big", signed=True)
    if not 0 <= size <= max_bytes:
        raise _FramingError(f"the {side} sent a frame size of {size} (not Kafka framing?)")
    try:
        return prefix + await reader.readexactly(size)
    except asyncio.IncompleteReadError as exc:
        raise _FramingError(
            f"the {side} closed after {len(exc.partial)} of {size} frame bytes"
        ) from exc


def _with_error_code(frame: bytes, api_key: int, version: int, error_code: int) -> bytes:
    """The response `frame` (size prefix included) with every ``error_code`` set."""
    codec = api_codec(api_key, version)
    correlation_id, body = decode_response(codec, frame[4:])
    return encode_response_entity(correlation_id, codec, _set_error_codes(body, error_code))


def _set_error_codes(value: Any, error_code: int) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changed = {
            field.name: _set_error_codes(getattr(value, field.name), error_code)
            for field in dataclasses.fields(value)
        }
        if "error_code" in changed:
            changed["error_code"] = ErrorCode(error_code)
        return dataclasses.replace(value, **changed)
    if isinstance(value, tuple):
        return tuple(_set_error_codes(item, error_code) for item in value)
    return value


def _parse_upstream(upstream: tuple[str, int] | str) -> tuple[str, int]:
    """A loopback (host, port); anything else is refused so tests never leave the machine."""
    if isinstance(upstream, str):
        host, sep, port_text = upstream.rpartition(":")
        if not sep or not port_text.isdigit():
            raise ValueError(f"upstream must be 'host:port' or (host, port), not {upstream!r}")
        port: Any = int(port_text)
    else:
        host, port = upstream
    host = host.strip("[]")
    if host.lower() == "localhost":
        host = LISTEN_HOST  # never let name resolution pick the address
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(
            f"the fault-injection proxy only forwards to loopback addresses (127.0.0.1, ::1, "
            f"localhost), not {host!r}"
        )
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise ValueError(f"upstream port must be 1..65535, not {port!r}")
    return host, port
