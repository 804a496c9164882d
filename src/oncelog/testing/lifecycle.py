"""Start and stop, shared by the test tools: :class:`EmbeddedBroker`,
:class:`FaultInjectionProxy`, :class:`LocalCluster`, and the child processes
(:class:`BrokerProcess`, :class:`ZooKeeperServer`, through
:class:`~oncelog.testing.children.ManagedChild`).

:class:`Lifecycle` gives each one the same ``with`` behaviour. :class:`LoopThread` is the
asyncio event loop in a daemon thread that the two in-process tools (the embedded broker and
the proxy) serve from: started by a setup coroutine whose failure reaches the caller, and
stopped by a shutdown coroutine, every wait bounded.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, Self, TypeVar

from oncelog.broker.runner import new_event_loop

__all__ = ["Lifecycle", "LoopThread"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class Lifecycle:
    """``start()`` returns the started object, ``stop()`` is safe to call when stopped, and
    ``with`` does both. If stopping fails while the block already raised, the block's
    exception is the one that propagates (the stop failure is logged)."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.stop()
        except Exception:
            if exc_type is None:
                raise
            log.exception("stopping %s after a failure also failed", type(self).__name__)


class LoopThread:
    """An asyncio event loop running in a daemon thread named ``name``."""

    def __init__(self, name: str, timeout_s: float) -> None:
        self.name = name
        self.timeout_s = timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def start(self, setup: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``setup()`` on a new loop in a new thread, then keep the loop running.
        Returns once setup finished; if it failed (or did not finish within the timeout),
        the thread is ended and the error raised here."""
        if self._thread is not None:
            raise RuntimeError(f"{self.name} is already running")
        loop = new_event_loop()
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(setup())
            except BaseException as exc:  # reported to the caller of start()
                failure.append(exc)
                started.set()
                return
            started.set()
            loop.run_forever()

        thread = threading.Thread(target=run, name=self.name, daemon=True)
        thread.start()
        if not started.wait(self.timeout_s) or failure:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(self.timeout_s)
            if not thread.is_alive():
                loop.close()
            if failure:
                raise failure[0]
            raise RuntimeError(f"{self.name} did not start within {self.timeout_s} s")
        self._loop, self._thread = loop, thread

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop from another thread and wait (bounded) for it."""
        if self._loop is None:
            coroutine.close()
            raise RuntimeError(f"{self.name} is not running")
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError(f"call this from another thread than {self.name}'s own")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(self.timeout_s)

    def stop(self, shutdown: Callable[[], Coroutine[Any, Any, None]] | None = None) -> None:
        """Run ``shutdown()`` on the loop (if given), then stop the loop and end the thread;
        nothing if not running. The loop is closed even if shutdown failed."""
        if self._loop is None or self._thread is None:
            return
        loop, thread = self._loop, self._thread
        try:
            if shutdown is not None:
                asyncio.run_coroutine_threadsafe(shutdown(), loop).result(self.timeout_s)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(self.timeout_s)
            if not thread.is_alive():
                loop.close()
            self._loop = self._thread = None
