"""A request the broker fails to answer gets Kafka's answer, never silence or a hang.

- Metadata v10/v11 naming a topic by id, or with a null name: INVALID_REQUEST for every
  requested topic (Kafka's InvalidRequestException and its error response), not a
  response that cannot be encoded; Metadata v12+ for an unknown topic id:
  UNKNOWN_TOPIC_ID with a null name.
- A handler that raises (a bug of ours): UNKNOWN_SERVER_ERROR where the response has a
  top-level error field, as Kafka answers an unexpected failure; otherwise the connection
  is closed with a log line. Other connections are served throughout.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
import struct
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import uvloop

from oncelog.broker.server import ConnectionInfo, _Connection, _write_responses
from oncelog.client.connection import KafkaConnection, ProtocolClientError
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.codec import RequestHeader
from oncelog.protocol.errors import ErrorCode
from oncelog.testing import EmbeddedBroker

TIMEOUT_S = 5.0
UNKNOWN_ID = uuid.UUID(int=0xDEADBEEF)


@pytest.fixture
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as embedded:
        yield embedded


def metadata(broker: EmbeddedBroker, version: int, topics: list[dict[str, Any]]) -> Any:
    with KafkaConnection(broker.bootstrap_servers, timeout_s=TIMEOUT_S) as conn:
        return conn.request(
            ApiKey.METADATA,
            {
                "topics": topics,
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            },
            version=version,
        )


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_before_v12_refuses_topic_ids(broker: EmbeddedBroker, version: int) -> None:
    response = metadata(
        broker,
        version,
        [{"name": "by-name", "topic_id": None}, {"name": "x", "topic_id": UNKNOWN_ID}],
    )
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("by-name", ErrorCode.invalid_request),
        ("x", ErrorCode.invalid_request),
    ]


@pytest.mark.parametrize("version", [12, 13])
def test_metadata_for_an_unknown_topic_id(broker: EmbeddedBroker, version: int) -> None:
    response = metadata(broker, version, [{"name": None, "topic_id": UNKNOWN_ID}])
    (topic,) = response.topics
    assert (topic.error_code, topic.name, topic.topic_id) == (
        ErrorCode.unknown_topic_id,
        None,
        UNKNOWN_ID,
    )


def test_metadata_v12_with_neither_name_nor_id(broker: EmbeddedBroker) -> None:
    response = metadata(broker, 12, [{"name": None, "topic_id": None}])
    assert [(t.name, t.error_code) for t in response.topics] == [(None, ErrorCode.invalid_request)]


def _break_handler(monkeypatch: pytest.MonkeyPatch, broker: EmbeddedBroker, api: int) -> None:
    async def broken(*args: object) -> None:
        raise RuntimeError("a bug in a handler")

    assert broker.broker is not None
    monkeypatch.setitem(broker.broker._handlers, api, broken)


def test_a_failing_handler_answers_unknown_server_error(
    broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _break_handler(monkeypatch, broker, ApiKey.LIST_GROUPS)
    with KafkaConnection(broker.bootstrap_servers, timeout_s=TIMEOUT_S) as conn:
        response = conn.request(ApiKey.LIST_GROUPS, {"states_filter": [], "types_filter": []})
        assert response.error_code == ErrorCode.unknown_server_error
        assert response.groups == ()
        # the same connection goes on
        assert conn.request(ApiKey.DESCRIBE_LOG_DIRS, {"topics": None}, version=1).results
    assert any("failed to answer LIST_GROUPS" in r.getMessage() for r in caplog.records)


def test_a_failing_handler_without_an_error_field_closes_the_connection(
    broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="oncelog")
    _break_handler(monkeypatch, broker, ApiKey.DESCRIBE_LOG_DIRS)
    with KafkaConnection(broker.bootstrap_servers, timeout_s=TIMEOUT_S) as conn:
        with pytest.raises(ProtocolClientError):
            conn.request(ApiKey.DESCRIBE_LOG_DIRS, {"topics": None}, version=1)
    closes = [r.getMessage() for r in caplog.records if "closing connection" in r.getMessage()]
    assert any("DESCRIBE_LOG_DIRS v1 request" in m for m in closes), closes
    with KafkaConnection(broker.bootstrap_servers, timeout_s=TIMEOUT_S) as fresh:
        assert fresh.request(ApiKey.LIST_GROUPS, {}).error_code == ErrorCode.none


def test_a_request_cancelled_before_its_handler_ran_leaves_nothing_unawaited(
    broker: EmbeddedBroker,
) -> None:
    """A connection that closes with requests queued cancels their tasks
    (server._drain_queue), maybe before they first ran: no handler coroutine may be left
    unawaited (it was, as a RuntimeWarning, in loaded runs of the idempotence chaos test)."""
    assert broker.broker is not None
    dispatcher = broker.broker
    header = RequestHeader(ApiKey.API_VERSIONS, 3, 1, "test")

    async def cancelled_at_once() -> None:
        task = asyncio.ensure_future(dispatcher.dispatch(header, {}, ConnectionInfo("test", 1)))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(cancelled_at_once())
        gc.collect()
    assert [str(w.message) for w in caught if w.category is RuntimeWarning] == []


def test_answers_for_a_client_that_reset_its_connection_end_the_responder_quietly() -> None:
    """The client resets its connection (RST) while answers are queued: uvloop's write on
    the closed transport raises RuntimeError, which ended the responder with an exception
    no one retrieved and left its queue undrained. The responder now takes the closing
    transport for the client gone: it returns and the queue is drained."""

    async def scenario() -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with pytest.raises(ConnectionResetError):
                await reader.read(1)
            assert writer.transport.is_closing()
            pending: asyncio.Queue[Any] = asyncio.Queue()
            never_answered = asyncio.get_running_loop().create_future()
            pending.put_nowait((1, None, b"an answer"))
            pending.put_nowait((2, None, never_answered))
            connection = _Connection(asyncio.current_task(), "peer", "127.0.0.1", 0.0)  # type: ignore[arg-type]
            connection.unanswered = 2
            try:
                await _write_responses(pending, writer, connection)
                async with asyncio.timeout(TIMEOUT_S):
                    await pending.join()
                assert never_answered.cancelled()
                done.set_result(None)
            except BaseException as exc:
                done.set_exception(exc)

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _, client = await asyncio.open_connection("127.0.0.1", port)
        client.get_extra_info("socket").setsockopt(
            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
        )
        client.close()  # with a zero linger: a reset
        try:
            async with asyncio.timeout(TIMEOUT_S):
                await done
        finally:
            server.close()

    uvloop.run(scenario())
