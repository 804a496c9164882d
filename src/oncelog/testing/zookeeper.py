"""A ZooKeeper server in a child process, for cluster tests and `oncelog cluster`.

    with ZooKeeperServer(tmp_path / "zk") as zk:
        config = {"zookeeper.connect": zk.connect_string, "broker.id": "1"}
        ...
        zk.restart()   # same port, same data: sessions survive a restart shorter than their timeout

It runs Debian's ZooKeeper 3.8 (``apt-get install -y zookeeper``, which scripts/test.sh does
when it is missing) on the Java the project already needs for Spark::

    java -cp /usr/share/java/zookeeper.jar:... \
        org.apache.zookeeper.server.ZooKeeperServerMain zoo.cfg

standalone, on a free port of 127.0.0.1, with ``tickTime`` 200 ms by default so that session
timeouts of a few seconds are allowed (ZooKeeper accepts 2 to 20 ticks unless told otherwise;
the maximum is raised here). Readiness is ZooKeeper's own ``ruok`` answered ``imok``. Output
goes to ``zookeeper.log`` in the data directory. Every start is paired with a stop of that
pid, as for :class:`~oncelog.testing.BrokerProcess`.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from oncelog.testing.children import ManagedChild, kill_process, terminate_process

__all__ = ["ZooKeeperError", "ZooKeeperServer", "zookeeper_classpath"]

log = logging.getLogger(__name__)

MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
# Debian's zookeeper.jar names its dependencies in its manifest; slf4j-simple gives it a log.
DEBIAN_JARS = ("/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-simple.jar")
CLASSPATH_ENV = "ONCELOG_ZOOKEEPER_CLASSPATH"
INSTALL_HINT = "install it with: apt-get update && apt-get install -y zookeeper"
LOG_FILE = "zookeeper.log"
_POLL_S = 0.05


class ZooKeeperError(RuntimeError):
    """ZooKeeper is not installed, did not start, or did not stop."""


def zookeeper_classpath() -> str:
    """The server's class path: $ONCELOG_ZOOKEEPER_CLASSPATH, else Debian's jars."""
    configured = os.environ.get(CLASSPATH_ENV)
    if configured:
        return configured
    if not Path(DEBIAN_JARS[0]).exists():
        raise ZooKeeperError(
            f"ZooKeeper is not installed ({DEBIAN_JARS[0]} is missing): {INSTALL_HINT}"
        )
    return ":".join(jar for jar in DEBIAN_JARS if Path(jar).exists())


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the server binds it a moment later)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


class ZooKeeperServer(ManagedChild):
    """One standalone ZooKeeper server on 127.0.0.1 with a data directory that outlives it."""

    error = ZooKeeperError
    what = "the ZooKeeper server"

    def __init__(
        self,
        data_dir: Path | str,
        *,
        port: int = 0,
        tick_time_ms: int = 200,
        max_session_timeout_ms: int = 60_000,
        start_timeout_s: float = 30.0,
        stop_timeout_s: float = 15.0,
        java: str | None = None,
    ) -> None:
        super().__init__()
        self.data_dir = Path(data_dir)
        self.host = "127.0.0.1"
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._java = java or shutil.which("java") or "java"
        self._port = port or None

    @property
    def port(self) -> int:
        if self._port is None:
            raise ZooKeeperError("the ZooKeeper server has not started")
        return self._port

    @property
    def connect_string(self) -> str:
        """Kafka's ``zookeeper.connect`` value for this server."""
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / LOG_FILE

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> ZooKeeperServer:
        """Start and wait (bounded) until it answers ``ruok``; raise with its log if not."""
        if self._proc is not None:
            raise ZooKeeperError(f"ZooKeeper {self._proc.pid} is already running")
        classpath = zookeeper_classpath()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self._port is None:
            self._port = free_port(self.host)
        config = self._write_config()
        with open(self.log_path, "ab") as out:
            out.write(f"=== ZooKeeperServer start on port {self._port}\n".encode())
            out.flush()
            proc = subprocess.Popen(
                [self._java, "-Xmx256m", "-cp", classpath, MAIN_CLASS, str(config)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        self._adopt(proc)
        try:
            self._wait_ready()
        except BaseException:
            self.kill()
            raise
        log.info("ZooKeeper %d serving %s", proc.pid, self.connect_string)
        return self

    def stop(self) -> None:
        """SIGTERM and wait (bounded; SIGKILL after); nothing if not running."""
        proc = self._take_process()
        if proc is None:
            return
        terminate_process(proc, self.stop_timeout_s, ZooKeeperError)

    def kill(self) -> None:
        """SIGKILL (a crash) and reap."""
        proc = self._take_process()
        if proc is None:
            return
        kill_process(proc, self.stop_timeout_s, ZooKeeperError)

    def restart(self) -> ZooKeeperServer:
        """Stop (cleanly if running) and start again on the same port and data."""
        self.stop()
        return self.start()

    # -- internals ------------------------------------------------------------------------

    def _write_config(self) -> Path:
        config = self.data_dir / "zoo.cfg"
        config.write_text(
            f"tickTime={self.tick_time_ms}\n"
            f"dataDir={self.data_dir / 'data'}\n"
            f"clientPort={self._port}\n"
            f"clientPortAddress={self.host}\n"
            f"maxSessionTimeout={self.max_session_timeout_ms}\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr\n"
            # One standalone server: nothing to gain from syncing every write to disk twice.
            "forceSync=no\n"
        )
        return config

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout_s
        while not _answers_ruok(self.host, self.port):
            status = self._proc.poll()
            if status is not None:
                raise ZooKeeperError(
                    f"ZooKeeper exited with status {status} before serving\n{self._log_tail()}"
                )
            if time.monotonic() > deadline:
                raise ZooKeeperError(
                    f"ZooKeeper did not serve within {self.start_timeout_s} s\n{self._log_tail()}"
                )
            time.sleep(_POLL_S)

    def _log_tail(self, lines: int = 30) -> str:
        try:
            tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except FileNotFoundError:
            tail = []
        return "zookeeper log:\n" + "\n".join("  " + line for line in tail)


def _answers_ruok(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0) as conn:
            conn.sendall(b"ruok")
            return conn.recv(4) == b"imok"
    except OSError:
        return False
