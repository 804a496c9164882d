"""`oncelog cluster start|status|stop` run as a user runs them: separate processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from confluent_kafka.admin import AdminClient


def oncelog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "oncelog", "cluster", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_start_status_stop(tmp_path: Path) -> None:
    data = tmp_path / "dev"
    pids: list[int] = []
    try:
        started = oncelog("start", "--brokers", "2", "--data-dir", str(data))
        state = json.loads((data / "cluster.json").read_text())
        pids = [state["zookeeper"]["pid"], *(b["pid"] for b in state["brokers"].values())]
        assert started.returncode == 0, started.stderr
        servers = started.stdout.splitlines()[-1].removeprefix("bootstrap servers: ")
        metadata = AdminClient({"bootstrap.servers": servers}).list_topics(timeout=30)
        assert sorted(metadata.brokers) == [1, 2]

        status = oncelog("status", "--data-dir", str(data))
        assert status.returncode == 0
        assert "ZooKeeper" in status.stdout and status.stdout.count("running") == 3
        assert status.stdout.count("registered") == 2 and "controller" in status.stdout

        again = oncelog("start", "--data-dir", str(data))
        assert again.returncode == 1 and "is already running" in again.stderr
    finally:
        stopped = oncelog("stop", "--data-dir", str(data))
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.count("stopped (pid") == 3
    for pid in pids:
        assert (
            not Path(f"/proc/{pid}/cmdline").exists()
            or not Path(f"/proc/{pid}/cmdline").read_bytes()
        ), f"pid {pid} still runs"
    assert oncelog("status", "--data-dir", str(data)).returncode == 1
