"""A ZooKeeper call cancelled in the loop turn its reply arrives ends cancelled.

A stopping broker cancels its lease loop and waits for it. CI caught that loop renewing
for ever after the cancel: Python 3.11's ``asyncio.wait_for`` returned the reply that had
just arrived and dropped the cancellation, so the loop slept again and the stop never
ended. Nothing here needs a ZooKeeper server: kazoo's client stands in, answering when the
test says."""

import asyncio
from collections.abc import Callable
from typing import Any

from oncelog.cluster.zookeeper import ZooKeeperSession


class _Reply:
    """A kazoo IAsyncResult: its callback is called when the test settles it."""

    def __init__(self) -> None:
        self._callbacks: list[Callable[[Any], None]] = []

    def rawlink(self, callback: Callable[[Any], None]) -> None:
        self._callbacks.append(callback)

    def get_nowait(self) -> bytes:
        return b"reply"

    def arrive(self) -> None:
        for callback in self._callbacks:
            callback(self)


class _ConnectedKazoo:
    connected = True


def test_a_call_cancelled_as_its_reply_arrives_is_cancelled() -> None:
    async def scenario() -> asyncio.Task[Any]:
        session = ZooKeeperSession("127.0.0.1:1", session_timeout_ms=6000, connection_timeout_ms=1)
        session._loop = asyncio.get_running_loop()
        session._client = _ConnectedKazoo()  # type: ignore[assignment]
        reply = _Reply()
        call = asyncio.create_task(session._retry(lambda: reply))
        await asyncio.sleep(0)  # the call now awaits its reply
        reply.arrive()  # settles the reply's future at the loop's next turn...
        asyncio.get_running_loop().call_soon(call.cancel)  # ...and the cancel in that turn
        await asyncio.wait([call], timeout=5)
        return call

    call = asyncio.run(scenario())
    assert call.done()
    assert call.cancelled(), f"the cancel was lost: the call returned {call.result()!r}"
