"""The sink's guard against a client call that ignores its timeout (librdkafka #5456:
send_offsets_to_transaction with a kept producer whose group coordinator went away)."""

from __future__ import annotations

import threading
import time

import pytest

from oncelog.spark.writer import ClientCallStuck, _bounded


def test_a_call_that_never_returns_is_given_up_on() -> None:
    released = threading.Event()
    started = time.monotonic()
    with pytest.raises(ClientCallStuck, match="send_offsets_to_transaction"):
        _bounded(lambda: released.wait(30), 0.2, "send_offsets_to_transaction")
    assert time.monotonic() - started < 10  # bounded, not the call's 30 s
    released.set()  # the stuck thread ends with the test


def test_a_call_that_returns_or_raises_is_passed_through() -> None:
    calls: list[str] = []
    _bounded(lambda: calls.append("done"), 5, "call")
    assert calls == ["done"]

    def fails() -> None:
        raise ValueError("fenced")

    with pytest.raises(ValueError, match="fenced"):
        _bounded(fails, 5, "call")
