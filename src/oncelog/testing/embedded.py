"""A real broker inside your Python process, for tests: no JVM, no Docker.

    with EmbeddedBroker() as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers})

The broker runs on its own event loop in a daemon thread, listens on a free port of
127.0.0.1 and keeps its data in a temporary directory made at start and removed at stop,
or when the start fails (unless you pass `data_dir`, which is then kept, so a test can
restart a broker on the same data). It never removes a directory it did not make.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from oncelog.broker.broker import Broker
from oncelog.broker.config import BrokerConfig
from oncelog.testing.lifecycle import Lifecycle, LoopThread

START_TIMEOUT_S = 30.0


class EmbeddedBroker(Lifecycle):
    """A real broker on its own event loop in a daemon thread (see the module docstring)."""

    def __init__(
        self,
        config: Mapping[str, str] | None = None,
        data_dir: Path | str | None = None,
        host: str | None = None,
        port: int | None = None,
        metrics_port: int | None = None,
    ) -> None:
        """``host`` and ``port``: the PLAINTEXT listener (127.0.0.1 and a free port by
        default); with ``listeners`` in ``config`` (several listeners, TLS, SASL) leave
        them out."""
        self._overrides = dict(config or {})
        self._metrics_port = metrics_port
        self._owns_data_dir = data_dir is None
        self._data_dir = None if data_dir is None else Path(data_dir)
        if "listeners" not in self._overrides:
            host, port = host or "127.0.0.1", 0 if port is None else port
        self._host = host
        self._port = port
        self._loop_thread = LoopThread("oncelog-embedded-broker", START_TIMEOUT_S)
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

    def bootstrap_servers_for(self, listener: str) -> str:
        """The address of one listener (``SASL_SSL``, ...) for a client on this machine."""
        if self.broker is None:
            raise RuntimeError("the broker is not running")
        return self.broker.bootstrap_servers_for(listener.upper())

    @property
    def port(self) -> int:
        """The first listener's port."""
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

        async def serve() -> None:
            self.broker = Broker(
                config, data_dir, self._host, self._port, metrics_port=self._metrics_port
            )
            await self.broker.start()

        try:
            self._loop_thread.start(serve)
        except BaseException:
            self.broker = None
            raise
        return self

    def stop(self) -> None:
        """Stop the broker cleanly (flush, clean-shutdown marker) and end its thread."""
        if not self._loop_thread.running:
            return
        broker = self.broker
        try:
            self._loop_thread.stop(broker.stop if broker is not None else None)
        finally:  # a failed stop still removes the temporary directory
            self.broker = None
            self._remove_own_data_dir()

    def _remove_own_data_dir(self) -> None:
        if self._owns_data_dir and self._data_dir is not None:
            shutil.rmtree(self._data_dir, ignore_errors=True)
            self._data_dir = None

    def restart(self) -> None:
        """Stop cleanly and start again on the same data directory and ports."""
        assert self.broker is not None, "the broker is not running"
        plan, port = self.broker.listeners, self.port
        bound = [str(self.broker.bound_endpoint(e.listener)) for e in plan.listeners]
        owns, self._owns_data_dir = self._owns_data_dir, False
        self.stop()
        self._owns_data_dir = owns
        if "listeners" in self._overrides:
            self._overrides["listeners"] = ",".join(bound)
        else:
            self._port = port
        self.start()
