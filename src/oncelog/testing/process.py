"""A broker in a child process, for crash and chaos tests.

    with BrokerProcess(tmp_path / "data") as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers})
        ...
        broker.kill()      # SIGKILL: no flush, no clean-shutdown marker
        broker.restart()   # same data directory, same port when it is still free

The child runs ``python -m oncelog broker --data-dir D --port P --ready-file F`` in its own
process group (a Ctrl-C in the terminal does not reach it), with stdout and stderr
appended to ``broker.log`` in the data directory, where each start is headed by a marker
line. Every start is paired with a stop of that very pid: leaving the ``with`` block,
:meth:`stop`, :meth:`kill`, :meth:`terminate`, or (a last resort) interpreter exit.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from oncelog.broker.stall_report import STALL_REPORT_MARK
from oncelog.testing.children import ManagedChild, kill_process, terminate_process

__all__ = ["BrokerProcess", "BrokerProcessError"]

log = logging.getLogger(__name__)

READY_FILE = ".oncelog-ready"
LOG_FILE = "broker.log"
_POLL_S = 0.02


class BrokerProcessError(RuntimeError):
    """The broker process did not start, did not stop in time, or stopped with an error."""


class BrokerProcess(ManagedChild):
    """One broker subprocess on a data directory that outlives it.

    ``config`` holds broker keys passed as ``--set key=value``. ``port=0`` lets the first
    start pick a free port; :meth:`restart` then asks for the same port again (the server
    listens with SO_REUSEADDR, so connections in TIME_WAIT do not block it) and falls back
    to a fresh one only if another process took it meanwhile.
    """

    error = BrokerProcessError
    what = "the broker process"

    def __init__(
        self,
        data_dir: Path | str,
        config: Mapping[str, str] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        start_timeout_s: float = 30.0,
        stop_timeout_s: float = 30.0,
        python: str = sys.executable,
        extra_args: tuple[str, ...] = (),
        metrics_port: int | None = None,
    ) -> None:
        super().__init__()
        self.data_dir = Path(data_dir)
        self.config = dict(config or {})
        self.host = host
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._python = python
        self._extra_args = tuple(extra_args)
        self._requested_port = port
        self._ports: dict[str, int] | None = None  # of the running (or last) process
        self._requested_metrics_port = metrics_port
        self.metrics_port: int | None = None  # where the running broker serves Prometheus
        self._starts = 0
        self._log_start = 0  # where the current run's output begins in the log file
        self.returncode: int | None = None  # of the last process stopped

    # -- what tests need ------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port of the first listener."""
        return next(iter(self.ports.values()))

    @property
    def ports(self) -> dict[str, int]:
        """The port of each listener, by name, first listener first."""
        if self._ports is None:
            raise BrokerProcessError("the broker process has not started")
        return dict(self._ports)

    @property
    def bootstrap_servers(self) -> str:
        """The first listener's address."""
        return f"{self.host}:{self.port}"

    def bootstrap_servers_for(self, listener: str) -> str:
        return f"{self.host}:{self.ports[listener.upper()]}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / LOG_FILE

    @property
    def ready_path(self) -> Path:
        return self.data_dir / READY_FILE

    def read_log(self, *, current_run: bool = False) -> str:
        """The broker's output: all runs, or only the one started last."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_start if current_run else 0)
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> BrokerProcess:
        """Start the broker and wait (bounded) until it serves; raise with its log if not."""
        if self._proc is not None:
            raise BrokerProcessError(f"the broker process {self._proc.pid} is already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._spawn(None)
        return self

    def restart(self, *, reuse_port: bool = True) -> BrokerProcess:
        """Start again on the same data directory; a running process is first stopped
        cleanly (use :meth:`kill` before to simulate a crash)."""
        if self._proc is not None:
            self.terminate()
        if self._ports is None or not reuse_port:
            return self.start()
        old = self._ports
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._spawn(old)
        except BrokerProcessError:
            if "address already in use" not in self.read_log(current_run=True).lower():
                raise
            log.warning("ports %s were taken while the broker was down; using new ones", old)
            self._spawn(None)
        return self

    def kill(self) -> int:
        """SIGKILL the process (a crash: nothing flushed, no marker) and reap it."""
        proc = self._take_process()
        if proc is None:
            return self.returncode if self.returncode is not None else 0
        self.returncode = kill_process(proc, self.stop_timeout_s, BrokerProcessError)
        return self.returncode

    def terminate(self, *, check: bool = True) -> int:
        """SIGTERM and wait for the clean shutdown (bounded). If it does not end in time
        the process is killed and BrokerProcessError raised; with ``check`` a nonzero
        exit status raises too."""
        proc = self._take_process()
        if proc is None:
            return self.returncode if self.returncode is not None else 0
        self.returncode, clean = terminate_process(proc, self.stop_timeout_s, BrokerProcessError)
        if not clean:
            raise BrokerProcessError(
                f"broker {proc.pid} did not stop within {self.stop_timeout_s} s of SIGTERM; "
                f"killed it\n{self._stall_report()}{self._log_tail()}"
            )
        if check and self.returncode != 0:
            raise BrokerProcessError(
                f"broker {proc.pid} exited with status {self.returncode} on SIGTERM\n"
                f"{self._log_tail()}"
            )
        return self.returncode

    def stop(self) -> None:
        """Clean stop if running; nothing otherwise."""
        self.terminate()

    # -- internals ------------------------------------------------------------------------

    def _command(self, ports: Mapping[str, int] | None) -> list[str]:
        command = [
            self._python,
            "-m",
            "oncelog",
            "broker",
            "--data-dir",
            str(self.data_dir),
            "--ready-file",
            str(self.ready_path),
        ]
        for key, value in self.config.items():
            command += ["--set", f"{key}={value}"]
        if self._requested_metrics_port is not None:
            command += ["--metrics-port", str(self._requested_metrics_port)]
        return command + self._address_args(ports) + list(self._extra_args)

    def _address_args(self, ports: Mapping[str, int] | None) -> list[str]:
        """``--host``/``--port``, or, with ``listeners`` configured, those listeners at the
        ports ``ports`` names (the last run's: a later ``--set`` wins)."""
        listeners = self.config.get("listeners")
        if listeners is None:
            port = self._requested_port if ports is None else next(iter(ports.values()))
            return ["--host", self.host, "--port", str(port)]
        if ports is None:
            return []
        return ["--set", f"listeners={_with_ports(listeners, ports)}"]

    def _spawn(self, ports: Mapping[str, int] | None) -> None:
        self.ready_path.unlink(missing_ok=True)
        self._starts += 1
        command = self._command(ports)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(self.log_path, "ab") as log_file:
            self._log_start = log_file.tell()
            log_file.write(
                f"=== BrokerProcess start {self._starts}: {' '.join(command)}\n".encode()
            )
            log_file.flush()
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # own session and process group
                close_fds=True,
            )
        self.returncode = None
        # The reaper is the last resort: a test that forgets to stop us must not leave a
        # broker behind.
        self._adopt(proc)
        try:
            self._ports, self.metrics_port = self._wait_ready(proc)
        except BaseException:
            self.kill()
            raise
        log.info("broker process %d serving %s", proc.pid, self.bootstrap_servers)

    def _wait_ready(self, proc: subprocess.Popen[bytes]) -> tuple[dict[str, int], int | None]:
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            ports = _read_ports(self.ready_path)
            if ports is not None:
                return ports
            status = proc.poll()
            if status is not None:
                raise BrokerProcessError(
                    f"broker process {proc.pid} exited with status {status} before serving\n"
                    f"{self._log_tail()}"
                )
            if time.monotonic() > deadline:
                raise BrokerProcessError(
                    f"broker process {proc.pid} did not serve within {self.start_timeout_s} s\n"
                    f"{self._log_tail()}"
                )
            time.sleep(_POLL_S)

    def _stall_report(self, lines: int = 150) -> str:
        """The broker's own account of a shutdown that hangs (where each task waited,
        oncelog.broker.stall_report), which the tail alone may have scrolled past."""
        log_lines = self.read_log(current_run=True).splitlines()
        starts = [i for i, line in enumerate(log_lines) if STALL_REPORT_MARK in line]
        if not starts:
            return ""
        report = log_lines[starts[-1] : starts[-1] + lines]
        return "stall report:\n" + "\n".join("  " + line for line in report) + "\n"

    def _log_tail(self, lines: int = 40) -> str:
        tail = self.read_log(current_run=True).splitlines()[-lines:]
        return "broker log:\n" + "\n".join("  " + line for line in tail)


def _read_ports(path: Path) -> tuple[dict[str, int], int | None] | None:
    """The listeners' ports and the metrics port (None: no metrics) of the ready file
    (``LISTENER PORT`` lines, then ``metrics PORT``), once it exists (it is replaced
    atomically, never seen half written)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    ports: dict[str, int] = {}
    for line in text.splitlines():
        name, _, port = line.partition(" ")
        ports[name] = int(port)
    metrics = ports.pop("metrics", None)
    return (ports, metrics) if ports else None


def _with_ports(listeners: str, ports: Mapping[str, int]) -> str:
    """``listeners`` with each listener's port replaced by the one ``ports`` gives it."""
    entries = []
    for entry in listeners.split(","):
        name, sep, address = entry.strip().partition("://")
        host = address.rpartition(":")[0]
        port = ports.get(name.upper())
        entries.append(entry.strip() if port is None else f"{name}{sep}{host}:{port}")
    return ",".join(entries)
