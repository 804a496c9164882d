"""The responder awaits ``drain()`` only where it could wait or fail: bytes the socket has
not taken (the watchdog then sees an answer waiting for its client), or a connection that
is closing (``drain()`` raises, the responder ends and empties its queue). With neither,
``drain()`` would return at once, and it is skipped (issue 12)."""

from __future__ import annotations

import asyncio

from oncelog.broker.answer_queue import AnswerQueue
from oncelog.broker.server import PendingAnswer, _Connection, _write_responses


class FakeTransport:
    def __init__(self, buffered: int, closing: bool) -> None:
        self.buffered = buffered
        self.closing = closing

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def is_closing(self) -> bool:
        return self.closing


class FakeWriter:
    """A StreamWriter's surface: ``drain`` waits on ``gate`` or raises once closing."""

    def __init__(self, transport: FakeTransport) -> None:
        self.transport = transport
        self.written: list[bytes] = []
        self.drains = 0
        self.gate: asyncio.Future[None] | None = None

    def write(self, data: bytes) -> None:
        self.written.append(data)

    async def drain(self) -> None:
        self.drains += 1
        if self.transport.closing:
            raise ConnectionResetError("Connection lost")
        if self.gate is not None:
            await self.gate

    def close(self) -> None:
        self.transport.closing = True


async def _responding(
    transport: FakeTransport, answers: list[bytes], gate: bool = False
) -> tuple[FakeWriter, _Connection, AnswerQueue[PendingAnswer], asyncio.Task[None]]:
    writer = FakeWriter(transport)
    if gate:
        writer.gate = asyncio.get_running_loop().create_future()
    task = asyncio.current_task()
    assert task is not None
    connection = _Connection(task, "peer", "127.0.0.1", 0.0)
    pending: AnswerQueue[PendingAnswer] = AnswerQueue(8)
    for answer in answers:
        connection.unanswered += 1
        await pending.put((0, None, answer))
    responder = asyncio.ensure_future(_write_responses(pending, writer, connection))  # type: ignore[arg-type]
    for _ in range(5):
        await asyncio.sleep(0)
    return writer, connection, pending, responder


def test_an_answer_the_socket_took_is_not_drained() -> None:
    async def scenario() -> None:
        transport = FakeTransport(buffered=0, closing=False)
        writer, connection, pending, responder = await _responding(transport, [b"a", b"b"])
        assert writer.written == [b"a", b"b"] and writer.drains == 0
        assert connection.writing_since is None and connection.unanswered == 0
        await asyncio.wait_for(pending.join(), 1)
        responder.cancel()

    asyncio.run(scenario())


def test_bytes_left_buffered_are_drained_and_watched() -> None:
    async def scenario() -> None:
        transport = FakeTransport(buffered=5, closing=False)
        writer, connection, pending, responder = await _responding(
            transport, [b"a", b"b"], gate=True
        )
        assert writer.written == [b"a"] and writer.drains == 1
        assert connection.writing_since is not None, "the watchdog must see the wait"
        assert writer.gate is not None
        writer.gate.set_result(None)
        await asyncio.wait_for(pending.join(), 1)
        assert writer.written == [b"a", b"b"] and writer.drains == 2
        assert connection.writing_since is None
        responder.cancel()

    asyncio.run(scenario())


def test_a_closing_connection_ends_the_responder_and_empties_its_queue() -> None:
    async def scenario() -> None:
        transport = FakeTransport(buffered=0, closing=True)
        writer, _, pending, responder = await _responding(transport, [b"a", b"b"])
        await asyncio.wait_for(responder, 1)  # ended, not waiting for more answers
        assert writer.drains == 1 and writer.written == [b"a"]
        assert pending.empty()  # "b" taken off unanswered, so the reader's join ends
        await asyncio.wait_for(pending.join(), 1)

    asyncio.run(scenario())
