"""A real broker inside your Python process, for tests: no JVM, no Docker.

    with EmbeddedBroker() as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers})

The broker runs on its own event loop in a daemon thread, listens on a free port of
127.0.0.1 and keeps its data in a temporary directory made at start and removed at stop,
or when the start fails (unless you pass `data_dir`, which is then kept, so a test can
restart a broker on the same data). It never removes a directory it did not make.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from oncelog.broker.broker import Broker
from oncelog.broker.config import BrokerConfig
from oncelog.broker.runner import new_event_loop

START_TIMEOUT_S = 30.0


class EmbeddedBroker:
    """A real broker on its own event loop in a daemon thread (see the module docstring)."""

    def __init__(
        self,
        config: Mapping[str, str] | None = None,
        data_dir: Path | str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        metrics_port: int | None = None,
    ) -> None:
        self._overrides = dict(config or {})
        self._metrics_port = metrics_port
        self._owns_data_dir = data_dir is None
        self._data_dir = None if data_dir is None else Path(data_dir)
        self._host = host
        self._port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.broker: Broker | None = None

    @property
    def data_dir(self) -> Path:
        """The data directory: the one given, or the temporary one made at start."""
        if self._data_dir is None:
            raise RuntimeError("the broker has no data directory until it starts")
        return self._data_dir

    @property
    def bootstrap_servers(self) -> str:
        if self.broker is None:
            raise RuntimeError("the broker is not running")
        return self.broker.bootstrap_servers

    @property
    def port(self) -> int:
        if self.broker is None:
            raise RuntimeError("the broker is not running")
        return self.broker.port

    def start(self) -> EmbeddedBroker:
        if self._data_dir is None:
            self._data_dir = Path(tempfile.mkdtemp(prefix="oncelog-"))
        try:
            return self._start(self._data_dir)
        except BaseException:
            self._remove_own_data_dir()
            raise

    def _start(self, data_dir: Path) -> EmbeddedBroker:
        config = BrokerConfig.load(None, self._overrides)
        self._loop = new_event_loop()
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            assert self._loop is not None
            asyncio.set_event_loop(self._loop)
            try:
                self.broker = Broker(
                    config, data_dir, self._host, self._port, metrics_port=self._metrics_port
                )
                self._loop.run_until_complete(self.broker.start())
            except BaseException as exc:  # reported to the caller of start()
                failure.append(exc)
                started.set()
                return
            started.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="oncelog-embedded-broker", daemon=True)
        self._thread.start()
        if not started.wait(START_TIMEOUT_S):
            raise RuntimeError(f"embedded broker did not start within {START_TIMEOUT_S} s")
        if failure:
            self._thread.join()
            self._loop.close()
            self._loop = self._thread = None
            raise failure[0]
        return self

    def stop(self) -> None:
        """Stop the broker cleanly (flush, clean-shutdown marker) and end its thread."""
        if self._loop is None or self._thread is None:
            return
        loop, thread = self._loop, self._thread
        try:
            if self.broker is not None:
                asyncio.run_coroutine_threadsafe(self.broker.stop(), loop).result(START_TIMEOUT_S)
        finally:  # a failed stop still ends the thread and removes the temporary directory
            loop.call_soon_threadsafe(loop.stop)
            thread.join(START_TIMEOUT_S)
            self._loop = self._thread = None
            self.broker = None
            self._remove_own_data_dir()
        loop.close()

    def _remove_own_data_dir(self) -> None:
        if self._owns_data_dir and self._data_dir is not None:
            shutil.rmtree(self._data_dir, ignore_errors=True)
            self._data_dir = None

    def restart(self) -> None:
        """Stop cleanly and start again on the same data directory and port."""
        port = self.port
        owns, self._owns_data_dir = self._owns_data_dir, False
        self.stop()
        self._owns_data_dir = owns
        self._port = port
        self.start()

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
