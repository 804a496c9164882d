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
the maximum is raised here). Output goes to ``zookeeper.log`` in the data directory. Every
start is paired with a stop of that pid, as for :class:`~oncelog.testing.BrokerProcess`.

The port is asked of the kernel and handed to ZooKeeper a moment later, so another process
(another test, another suite on the machine) can take it in between. Two things keep that
harmless: readiness is ZooKeeper's ``conf`` answered with *this* server's data directory (a
server that answers on the port but is not ours is not taken for ours; ``ruok`` answers
``imok`` from any ZooKeeper, and before it serves), and a server that exits because its port
was taken is started again on a new one, when the port was picked here. A restart keeps its
port (the brokers' ``zookeeper.connect`` names it), so it has no such fallback.
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
# Starts on freshly picked ports before giving up: each lost race needs another process to
# take the very port the kernel just offered, so more than one in a row is already unlikely.
PORT_ATTEMPTS = 3
_PORT_TAKEN = "java.net.BindException: Address already in use"


class ZooKeeperError(RuntimeError):
    """ZooKeeper is not installed, did not start, or did not stop."""


class ZooKeeperPortTaken(ZooKeeperError):
    """ZooKeeper exited at start because something else listens on its port."""


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
        """Start and wait (bounded) until it serves; raise with its log if not. On a port
        picked here, a start that lost its port to another process is tried on a new one."""
        if self._proc is not None:
            raise ZooKeeperError(f"ZooKeeper {self._proc.pid} is already running")
        classpath = zookeeper_classpath()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self._port is not None:
            return self._start_on_port(classpath, self._port)
        for _ in range(PORT_ATTEMPTS - 1):
            try:
                return self._start_on_port(classpath, free_port(self.host))
            except ZooKeeperPortTaken:
                log.warning(
                    "ZooKeeper lost port %d to another process; trying a new one", self._port
                )
        return self._start_on_port(classpath, free_port(self.host))

    def _start_on_port(self, classpath: str, port: int) -> ZooKeeperServer:
        self._port = port
        config = self._write_config()
        with open(self.log_path, "ab") as out:
            out.write(f"=== ZooKeeperServer start on port {self._port}\n".encode())
            out.flush()
            log_start = out.tell()
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
            self._wait_serving(log_start)
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
            f"dataDir={self._data_path}\n"
            f"clientPort={self._port}\n"
            f"clientPortAddress={self.host}\n"
            f"maxSessionTimeout={self.max_session_timeout_ms}\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=conf\n"
            # One standalone server: nothing to gain from syncing every write to disk twice.
            "forceSync=no\n"
        )
        return config

    @property
    def _data_path(self) -> Path:
        """Absolute, as ZooKeeper's ``conf`` answer names it (with ``/version-2``)."""
        return self.data_dir.absolute() / "data"

    def _wait_serving(self, log_start: int) -> None:
        """Until ``conf`` on our port names our data directory: our server, serving."""
        assert self._proc is not None
        ours = f"dataDir={self._data_path / 'version-2'}"
        deadline = time.monotonic() + self.start_timeout_s
        while ours not in _conf(self.host, self.port).splitlines():
            status = self._proc.poll()
            if status is not None:
                error = ZooKeeperPortTaken if self._logged_since(log_start, _PORT_TAKEN) else None
                raise (error or ZooKeeperError)(
                    f"ZooKeeper exited with status {status} before serving\n{self._log_tail()}"
                )
            if time.monotonic() > deadline:
                raise ZooKeeperError(
                    f"ZooKeeper did not serve within {self.start_timeout_s} s\n{self._log_tail()}"
                )
            time.sleep(_POLL_S)

    def _logged_since(self, offset: int, text: str) -> bool:
        with open(self.log_path, "rb") as log_file:
            log_file.seek(offset)
            return text.encode() in log_file.read()

    def _log_tail(self, lines: int = 30) -> str:
        try:
            tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except FileNotFoundError:
            tail = []
        return "zookeeper log:\n" + "\n".join("  " + line for line in tail)


def _conf(host: str, port: int) -> str:
    """ZooKeeper's ``conf`` answer on this port, read to the server's close; "" if nothing
    answers. Before it serves, ZooKeeper answers that it is not serving requests."""
    answer = bytearray()
    try:
        with socket.create_connection((host, port), timeout=1.0) as conn:
            conn.sendall(b"conf")
            while chunk := conn.recv(4096):
                answer += chunk
    except OSError:
        return ""
    return answer.decode(errors="replace")
