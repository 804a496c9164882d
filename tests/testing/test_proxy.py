"""The fault-injection proxy: framing-aware pass-through, each fault on its own with raw
sockets (exact counts), then real clients (confluent-kafka) through it."""

from __future__ import annotations

import asyncio
import collections
import gc
import random
import socket
import statistics
import struct
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from oncelog.broker.config import ConfigError
from oncelog.protocol.api_versions import ApiKey
from oncelog.testing import BrokerProcess, EmbeddedBroker, FaultInjectionProxy
from oncelog.testing.proxy import FaultConfig, _Link

TIMEOUT_S = 20.0
NOT_LEADER_OR_FOLLOWER = 6
# Fast reconnects: every drop closes a connection, librdkafka's default reconnect backoff
# grows to 10 s, and with a single broker each disconnect makes librdkafka 2.16 re-bootstrap
# (forget the broker, wait for a metadata refresh: 1-2 s per drop, 25 s instead of 4 s for
# the duplicates test below) unless metadata.recovery.strategy is none.
FAST_RECONNECT = {
    "metadata.recovery.strategy": "none",
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 100,
    "retry.backoff.ms": 10,
    "retry.backoff.max.ms": 100,
}


@pytest.fixture(scope="module")
def embedded() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture
def topic() -> str:
    return f"proxy-{uuid.uuid4().hex[:10]}"


# -- raw protocol helpers ------------------------------------------------------------------


def api_versions_request(correlation_id: int) -> bytes:
    client_id = b"proxy-test"
    body = struct.pack(">hhih", ApiKey.API_VERSIONS, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


def recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def read_correlation_id(sock: socket.socket) -> int | None:
    """The correlation id of the next response; None when the proxy closed the connection."""
    try:
        prefix = recv_exactly(sock, 4)
    except ConnectionResetError:
        return None
    if prefix is None:
        return None
    frame = recv_exactly(sock, struct.unpack(">i", prefix)[0])
    assert frame is not None, "connection closed inside a response"
    return struct.unpack(">i", frame[:4])[0]


def connect(proxy: FaultInjectionProxy, timeout_s: float = 5.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def wait_for(condition, timeout_s: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


# -- real-client helpers -------------------------------------------------------------------


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions)])[name].result(TIMEOUT_S)


def read_values(bootstrap: str, topic: str, partitions: int = 1) -> list[bytes]:
    """Every record value of the topic, up to the high watermarks read first."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            **FAST_RECONNECT,
        }
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), TIMEOUT_S)[1]
            for p in range(partitions)
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(values) < sum(ends.values()):
            assert time.monotonic() < deadline, f"read {len(values)} of {sum(ends.values())}"
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            values.append(msg.value())
        return values
    finally:
        consumer.close()


def produce_numbered(producer: Producer, topic: str, numbers: range) -> None:
    errors: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for i in numbers:
        while True:
            try:
                producer.produce(topic, value=b"%d" % i, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(TIMEOUT_S * 2) == 0, "records still undelivered"
    assert errors == []


# -- configuration and safety ------------------------------------------------------------


@pytest.mark.parametrize(
    "upstream",
    [
        ("10.0.0.1", 9092),
        ("192.168.1.2", 9092),
        "example.com:9092",
        ("8.8.8.8", 53),
        ("0.0.0.0", 9092),
        ("::", 9092),
    ],
)
def test_refuses_upstreams_off_this_machine(upstream: object) -> None:
    with pytest.raises(ValueError, match="loopback"):
        FaultInjectionProxy(upstream=upstream)  # type: ignore[arg-type]
    proxy = FaultInjectionProxy()
    host, port = upstream if isinstance(upstream, tuple) else upstream.rsplit(":", 1)  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="loopback"):
        proxy.set_upstream(host, int(port))
    assert proxy.upstream is None


def test_accepts_loopback_upstreams_and_pins_localhost() -> None:
    assert FaultInjectionProxy(upstream=("localhost", 9092)).upstream == ("127.0.0.1", 9092)
    assert FaultInjectionProxy(upstream="127.0.0.1:9093").upstream == ("127.0.0.1", 9093)
    assert FaultInjectionProxy(upstream=("::1", 9094)).upstream == ("::1", 9094)
    assert FaultInjectionProxy(upstream=("127.0.0.2", 9095)).upstream == ("127.0.0.2", 9095)
    with pytest.raises(ValueError, match="port"):
        FaultInjectionProxy(upstream=("127.0.0.1", 0))


@pytest.mark.parametrize(
    "bad",
    [
        {"drop_response_rate": 1.5},
        {"drop_request_rate": -0.1},
        {"cut_connection_rate": 2},
        {"delay_ms": (50, 10)},
        {"delay_ms": -1},
        {"close_after_drop_ms": -5},
    ],
)
def test_fault_settings_are_validated(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        FaultInjectionProxy(**bad)  # type: ignore[arg-type]
    proxy = FaultInjectionProxy()
    with pytest.raises(ValueError):
        proxy.set_faults(**bad)
    assert proxy.faults == FaultConfig()


def test_delay_ms_number_means_a_fixed_delay() -> None:
    assert FaultInjectionProxy(delay_ms=30).faults.delay_ms == (30.0, 30.0)
    assert FaultInjectionProxy(delay_ms=(5, 40)).faults.delay_ms == (5.0, 40.0)


# -- each fault with a raw socket: exact counts ------------------------------------------------


def test_pipelined_responses_keep_their_order_under_random_delays(embedded: EmbeddedBroker) -> None:
    with FaultInjectionProxy(
        upstream=("127.0.0.1", embedded.port), delay_ms=(0, 60), seed=3
    ) as proxy:
        with connect(proxy) as sock:
            sock.sendall(b"".join(api_versions_request(cid) for cid in range(1, 31)))
            assert [read_correlation_id(sock) for _ in range(30)] == list(range(1, 31))
        stats = proxy.stats
    assert stats.responses_delayed == 30
    assert stats.responses_forwarded == stats.requests_forwarded == 30
    assert 0 < stats.delay_ms_total < 30 * 60


def test_a_client_half_close_still_gets_its_responses(embedded: EmbeddedBroker) -> None:
    with FaultInjectionProxy(upstream=("127.0.0.1", embedded.port)) as proxy:
        with connect(proxy) as sock:
            sock.sendall(api_versions_request(1) + api_versions_request(2))
            sock.shutdown(socket.SHUT_WR)
            assert [read_correlation_id(sock) for _ in range(3)] == [1, 2, None]
        wait_for(lambda: proxy.stats.connections_open == 0)


def test_dropped_response_kills_the_connection_shortly_after(embedded: EmbeddedBroker) -> None:
    # Long enough for the second request to reach the proxy before it closes, even with the
    # test's thread descheduled for a while on a loaded machine (150 ms was not).
    close_after_s = 1.0
    with FaultInjectionProxy(
        upstream=("127.0.0.1", embedded.port),
        drop_response_rate=1.0,
        close_after_drop_ms=int(close_after_s * 1000),
    ) as proxy:
        with connect(proxy) as sock:
            sent = time.monotonic()
            sock.sendall(api_versions_request(1))
            wait_for(lambda: proxy.stats.responses_dropped == 1)
            sock.sendall(api_versions_request(2))  # on a dead connection: goes nowhere
            assert read_correlation_id(sock) is None  # no response, then the close
            assert time.monotonic() - sent >= close_after_s - 0.01
        stats = proxy.stats
    assert stats.requests_forwarded == 1 and stats.responses_forwarded == 0
    assert stats.responses_dropped == 1 and stats.requests_discarded == 1
    assert stats.connections_closed_after_drop == 1


def test_without_close_after_drop_a_dead_connection_stays_open_and_silent(
    embedded: EmbeddedBroker,
) -> None:
    with FaultInjectionProxy(
        upstream=("127.0.0.1", embedded.port), drop_response_rate=1.0, close_after_drop_ms=None
    ) as proxy:
        with connect(proxy, timeout_s=0.5) as sock:
            sock.sendall(api_versions_request(1))
            with pytest.raises(socket.timeout):
                read_correlation_id(sock)  # what a client's request.timeout.ms then sees
            proxy.pause()  # even without faults, a dead connection stays dead
            sock.sendall(api_versions_request(2))
            with pytest.raises(socket.timeout):
                read_correlation_id(sock)
        wait_for(lambda: proxy.stats.connections_open == 0)  # the client's close ends it
        stats = proxy.stats
    assert stats.responses_dropped == 1 and stats.requests_discarded == 1
    assert stats.connections_closed_after_drop == 0


def test_dropped_request_never_reaches_the_broker(embedded: EmbeddedBroker) -> None:
    with FaultInjectionProxy(
        upstream=("127.0.0.1", embedded.port), drop_request_rate=1.0, close_after_drop_ms=0
    ) as proxy:
        with connect(proxy) as sock:
            sock.sendall(api_versions_request(1))
            assert read_correlation_id(sock) is None
        stats = proxy.stats
    assert stats.requests_dropped == 1
    assert stats.requests_forwarded == 0 and stats.responses_forwarded == 0


def test_cut_forwards_the_request_then_closes_both_sides(embedded: EmbeddedBroker) -> None:
    with FaultInjectionProxy(
        upstream=("127.0.0.1", embedded.port), cut_connection_rate=1.0
    ) as proxy:
        with connect(proxy) as sock:
            sock.sendall(api_versions_request(1))
            assert read_correlation_id(sock) is None
        wait_for(lambda: proxy.stats.connections_open == 0)
        stats = proxy.stats
    assert stats.connections_cut == 1 and stats.requests_forwarded == 1
    assert stats.responses_forwarded == 0


def test_api_keys_limit_the_faults_and_pause_resume_switches_them(embedded: EmbeddedBroker) -> None:
    with FaultInjectionProxy(
        upstream=("127.0.0.1", embedded.port),
        drop_response_rate=1.0,
        api_keys={ApiKey.PRODUCE},
        close_after_drop_ms=0,
    ) as proxy:
        with connect(proxy) as sock:  # ApiVersions is not targeted
            sock.sendall(api_versions_request(1))
            assert read_correlation_id(sock) == 1
        proxy.set_faults(api_keys=None)
        proxy.pause()
        assert proxy.paused
        with connect(proxy) as sock:
            sock.sendall(api_versions_request(2))
            assert read_correlation_id(sock) == 2
            proxy.resume()
            sock.sendall(api_versions_request(3))
            assert read_correlation_id(sock) is None
        stats = proxy.stats
    assert stats.responses_forwarded == 2 and stats.responses_dropped == 1


def test_the_seed_fixes_the_sequence_of_decisions(embedded: EmbeddedBroker) -> None:
    """One request per connection, one after another: the drop pattern is exactly the
    seeded generator's, run after run."""

    def pattern(seed: int) -> list[bool]:
        answered = []
        with FaultInjectionProxy(
            upstream=("127.0.0.1", embedded.port),
            drop_request_rate=0.5,
            close_after_drop_ms=0,
            seed=seed,
        ) as proxy:
            assert proxy.seed == seed
            for cid in range(16):
                with connect(proxy) as sock:
                    sock.sendall(api_versions_request(cid))
                    answered.append(read_correlation_id(sock) == cid)
            assert proxy.stats.requests_dropped == answered.count(False)
        return answered

    rng = random.Random(1234)
    expected = [rng.random() >= 0.5 for _ in range(16)]
    assert pattern(1234) == expected
    assert pattern(1234) == expected
    assert pattern(99) != expected
    assert FaultInjectionProxy().seed != FaultInjectionProxy().seed  # logged, for a replay


def test_no_upstream_yet_closes_client_connections() -> None:
    with FaultInjectionProxy() as proxy:
        with connect(proxy) as sock:
            sock.sendall(api_versions_request(1))
            assert read_correlation_id(sock) is None
        assert proxy.stats.upstream_connect_failures == 1


# -- real clients ------------------------------------------------------------------------------


def test_pass_through_and_metadata_advertises_the_proxy(
    embedded: EmbeddedBroker, topic: str
) -> None:
    with FaultInjectionProxy(seed=1) as proxy:
        proxy.attach(embedded)
        assert proxy.upstream == ("127.0.0.1", embedded.port)
        # Even a client bootstrapping at the broker itself is sent to the proxy.
        for bootstrap in (proxy.bootstrap_servers, embedded.bootstrap_servers):
            brokers = (
                AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=TIMEOUT_S).brokers
            )
            assert [(b.host, b.port) for b in brokers.values()] == [("127.0.0.1", proxy.port)]
        create_topic(proxy.bootstrap_servers, topic, partitions=2)
        producer = Producer({"bootstrap.servers": proxy.bootstrap_servers, "linger.ms": 5})
        produce_numbered(producer, topic, range(500))
        values = read_values(proxy.bootstrap_servers, topic, partitions=2)
        stats = proxy.stats
    assert sorted(values) == sorted(b"%d" % i for i in range(500))
    assert stats.faults == 0 and stats.requests_forwarded > 0 and stats.responses_forwarded > 0


def test_dropped_responses_reach_the_client_as_duplicates(
    embedded: EmbeddedBroker, topic: str
) -> None:
    """No idempotence: each lost acknowledgement makes librdkafka resend a stored batch."""
    with FaultInjectionProxy(drop_response_rate=0.2, seed=20) as proxy:
        proxy.attach(embedded)
        proxy.pause()
        create_topic(proxy.bootstrap_servers, topic)
        producer = Producer(
            {
                "bootstrap.servers": proxy.bootstrap_servers,
                "enable.idempotence": False,
                "acks": "all",
                "retries": 1_000_000,
                "max.in.flight.requests.per.connection": 5,
                "linger.ms": 2,
                "batch.num.messages": 40,
                "request.timeout.ms": 5000,
                "message.timeout.ms": 45_000,
                **FAST_RECONNECT,
            }
        )
        producer.list_topics(topic, timeout=TIMEOUT_S)
        proxy.resume()
        produce_numbered(producer, topic, range(2000))
        proxy.pause()
        stats = proxy.stats
        values = read_values(proxy.bootstrap_servers, topic)
    counts = collections.Counter(values)
    assert set(counts) == {b"%d" % i for i in range(2000)}  # acks=all: nothing lost
    duplicates = len(values) - len(counts)
    assert duplicates > 0, stats
    assert stats.responses_dropped > 0
    assert stats.connections_closed_after_drop > 0
    assert stats.connections_accepted > 1  # the client reconnected after the drops


def test_delay_slows_responses(embedded: EmbeddedBroker, topic: str) -> None:
    def median_round_trip_s(producer: Producer) -> float:
        times = []
        for i in range(5):
            started = time.monotonic()
            producer.produce(topic, value=b"%d" % i)
            assert producer.flush(TIMEOUT_S) == 0
            times.append(time.monotonic() - started)
        return statistics.median(times)

    with FaultInjectionProxy(delay_ms=200, api_keys={ApiKey.PRODUCE}) as proxy:
        proxy.attach(embedded)
        proxy.pause()
        create_topic(proxy.bootstrap_servers, topic)
        producer = Producer(
            {"bootstrap.servers": proxy.bootstrap_servers, "linger.ms": 0, "acks": 1}
        )
        produce_numbered(producer, topic, range(1))  # warm up: connections and metadata
        baseline = median_round_trip_s(producer)
        proxy.resume()
        delayed = median_round_trip_s(producer)
        stats = proxy.stats
    assert stats.responses_delayed == 5 and stats.delay_ms_total == pytest.approx(1000)
    assert delayed >= 0.19  # a response cannot come back before its delay
    assert delayed / max(baseline, 1e-3) > 3, (baseline, delayed)
    assert delayed < 5.0  # generous: only catches a delay applied many times over


def test_cut_all_connections_clients_reconnect_and_continue(
    embedded: EmbeddedBroker, topic: str
) -> None:
    with FaultInjectionProxy() as proxy:
        proxy.attach(embedded)
        create_topic(proxy.bootstrap_servers, topic)
        producer = Producer(
            {"bootstrap.servers": proxy.bootstrap_servers, "linger.ms": 2, **FAST_RECONNECT}
        )
        produce_numbered(producer, topic, range(300))
        accepted = proxy.stats.connections_accepted
        assert proxy.cut_all_connections() >= 1
        wait_for(
            lambda: proxy.stats.connections_open == 0 or proxy.stats.connections_accepted > accepted
        )
        produce_numbered(producer, topic, range(300, 600))
        values = read_values(proxy.bootstrap_servers, topic)
        stats = proxy.stats
    assert set(values) == {b"%d" % i for i in range(600)}
    assert stats.connections_cut_by_call >= 1
    assert stats.connections_accepted > accepted


def test_attach_needs_a_running_embedded_broker() -> None:
    with FaultInjectionProxy() as proxy:
        with pytest.raises(RuntimeError, match="start"):
            proxy.attach(EmbeddedBroker())
        with pytest.raises(TypeError, match=r"advertised\.listeners"):
            proxy.attach(object())  # type: ignore[arg-type]


# -- advertised.listeners: the route for brokers started from configuration -----------------


def test_broker_process_advertises_the_proxy_from_its_config(tmp_path: Path, topic: str) -> None:
    with FaultInjectionProxy() as proxy:  # first, so its port is known
        config = {"advertised.listeners": proxy.advertised_listener}
        with BrokerProcess(tmp_path / "data", config=config) as broker:
            proxy.set_upstream("127.0.0.1", broker.port)
            brokers = (
                AdminClient({"bootstrap.servers": broker.bootstrap_servers})
                .list_topics(timeout=TIMEOUT_S)
                .brokers
            )
            assert [(b.host, b.port) for b in brokers.values()] == [("127.0.0.1", proxy.port)]
            create_topic(proxy.bootstrap_servers, topic)
            produce_numbered(
                Producer({"bootstrap.servers": proxy.bootstrap_servers}), topic, range(10)
            )
            assert proxy.stats.requests_forwarded > 0


def test_embedded_broker_config_route_survives_a_restart(tmp_path: Path) -> None:
    with FaultInjectionProxy(listen_port=0) as proxy:
        embedded = EmbeddedBroker(
            config={"advertised.listeners": proxy.advertised_listener}, data_dir=tmp_path / "data"
        )
        with embedded:
            proxy.set_upstream("127.0.0.1", embedded.port)
            assert embedded.broker is not None
            assert embedded.broker.advertised_address == ("127.0.0.1", proxy.port)
            embedded.restart()
            assert embedded.broker.advertised_address == ("127.0.0.1", proxy.port)


@pytest.mark.parametrize(
    "value",
    [
        "PLAINTEXT://127.0.0.1:0",
        "PLAINTEXT://127.0.0.1",
        "SSL://127.0.0.1:9093",
        "127.0.0.1:9093",
        "PLAINTEXT://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9094",
        "PLAINTEXT://127.0.0.1:99999",
    ],
)
def test_bad_advertised_listeners_are_refused_at_start(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError, match=r"advertised\.listeners"):
        EmbeddedBroker(config={"advertised.listeners": value}, data_dir=tmp_path).start()


@pytest.mark.parametrize(
    "value, expected",
    [
        ("PLAINTEXT://localhost:9093", ("localhost", 9093)),
        ("plaintext://[::1]:9094", ("::1", 9094)),
        ("PLAINTEXT://:9095", ("127.0.0.1", 9095)),  # empty host: the listen host
    ],
)
def test_advertised_listeners_forms(tmp_path: Path, value: str, expected: tuple[str, int]) -> None:
    with EmbeddedBroker(config={"advertised.listeners": value}, data_dir=tmp_path) as embedded:
        assert embedded.broker is not None
        assert embedded.broker.advertised_address == expected


def test_a_link_cut_before_its_pumps_ran_leaves_nothing_unawaited() -> None:
    """cut_all_connections may close a link whose three pump tasks have not run yet (seen
    as RuntimeWarnings in loaded runs of the idempotence chaos test): no coroutine of
    theirs may be left unawaited."""

    async def cut_at_once() -> None:
        link = _Link(FaultInjectionProxy(), writer)
        link.upstream_writer = writer
        link.start(asyncio.StreamReader(), asyncio.StreamReader())
        link.close()
        await link.finish()

    writer: Any = _NoTransport()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(cut_at_once())
        gc.collect()
    assert [str(w.message) for w in caught if w.category is RuntimeWarning] == []


class _NoTransport:
    """A stream writer's stand-in whose transport aborts without a connection."""

    @property
    def transport(self) -> _NoTransport:
        return self

    def abort(self) -> None:
        pass


def _latest(admin: AdminClient, topic: str) -> int:
    (future,) = admin.list_offsets(
        {TopicPartition(topic, 0): OffsetSpec.latest()}, request_timeout=TIMEOUT_S
    ).values()
    return future.result().offset


def test_answer_errors_fails_the_next_responses_of_one_api(
    embedded: EmbeddedBroker, topic: str
) -> None:
    with FaultInjectionProxy(record_api_keys=[ApiKey.LIST_OFFSETS]) as proxy:
        proxy.attach(embedded)
        create_topic(proxy.bootstrap_servers, topic)
        produce_numbered(Producer({"bootstrap.servers": proxy.bootstrap_servers}), topic, range(3))
        admin = AdminClient({"bootstrap.servers": proxy.bootstrap_servers})
        proxy.answer_errors(ApiKey.LIST_OFFSETS, NOT_LEADER_OR_FOLLOWER, 2)
        for _ in range(2):
            with pytest.raises(KafkaException) as failed:
                _latest(admin, topic)
            assert failed.value.args[0].code() == KafkaError.NOT_LEADER_FOR_PARTITION
        assert proxy.errors_left(ApiKey.LIST_OFFSETS) == 0
        assert _latest(admin, topic) == 3  # the broker's own answer again
        assert admin.list_topics(timeout=TIMEOUT_S).topics[topic].error is None  # other APIs
        stats = proxy.stats
        recorded = proxy.recorded(ApiKey.LIST_OFFSETS)
        with pytest.raises(ValueError, match="not recorded"):
            proxy.recorded(ApiKey.METADATA)
    assert stats.responses_with_errors == 2 and stats.faults == 2
    assert len(recorded) == 3  # the client did not retry the errors itself
    assert [p.timestamp for _, body in recorded for t in body.topics for p in t.partitions] == [
        -1
    ] * 3


def test_recorded_requests_show_what_a_client_sent(embedded: EmbeddedBroker, topic: str) -> None:
    with FaultInjectionProxy(record_api_keys=[ApiKey.FIND_COORDINATOR]) as proxy:
        proxy.attach(embedded)
        create_topic(proxy.bootstrap_servers, topic)
        consumer = Consumer({"bootstrap.servers": proxy.bootstrap_servers, "group.id": topic})
        try:
            consumer.assign([TopicPartition(topic, 0, 0)])
            wait_for(
                lambda: consumer.poll(0.05) is None and proxy.recorded(ApiKey.FIND_COORDINATOR),
                TIMEOUT_S,
            )
        finally:
            consumer.close()
        (at, body), *_ = proxy.recorded(ApiKey.FIND_COORDINATOR)
    assert body.key == topic and 0 < at <= time.monotonic()


def test_a_dropped_response_is_not_counted_as_answered_with_an_error(
    embedded: EmbeddedBroker,
) -> None:
    with FaultInjectionProxy(
        upstream=("127.0.0.1", embedded.port), drop_response_rate=1.0
    ) as proxy:
        with pytest.raises(ValueError, match="count must be >= 0"):
            proxy.answer_errors(ApiKey.API_VERSIONS, 35, -1)
        proxy.answer_errors(ApiKey.API_VERSIONS, 35, 1)
        with connect(proxy) as sock:
            sock.sendall(api_versions_request(1))
            wait_for(lambda: proxy.stats.responses_dropped == 1)
        assert proxy.errors_left(ApiKey.API_VERSIONS) == 1
        assert proxy.stats.responses_with_errors == 0
