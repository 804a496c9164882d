"""The streaming driver as a subprocess, and what can be read of its progress from outside:
its checkpoint (batches planned but not committed) and the sink's progress group.

The demonstration aims its SIGKILL with these: after every task of a batch committed its
output, before Spark recorded the batch as done.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from oncelog.pipeline import PARTITIONS
from oncelog.spark.options import DEFAULT_PROGRESS_TOPIC, progress_group

client_log = logging.getLogger("oncelog.pipeline.client")
client_log.addHandler(logging.NullHandler())
client_log.propagate = False


def _children(pid: int) -> list[int]:
    """Every descendant of `pid` (read from /proc), children first."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Driver:
    """One run of ``python -m oncelog.pipeline.job``: stdout lines parsed into events,
    stderr (Spark's log) appended to a file."""

    def __init__(self, args: list[str], log_path: Path, run: int) -> None:
        self.run = run
        self.log_path = log_path
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        env = dict(
            os.environ,
            PYTHONUNBUFFERED="1",
            PYSPARK_PYTHON=sys.executable,
            PYSPARK_DRIVER_PYTHON=sys.executable,
        )
        with open(log_path, "ab") as log_file:
            log_file.write(f"=== driver run {run}: {' '.join(args)}\n".encode())
            log_file.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "oncelog.pipeline.job", *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log_file,
                env=env,
                start_new_session=True,
            )
        self._reader = threading.Thread(target=self._read, daemon=True, name=f"driver-{run}-stdout")
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                self.events.put(json.loads(raw))
            except json.JSONDecodeError:
                continue
        self.proc.stdout.close()

    def poll_events(self) -> list[dict[str, Any]]:
        out = []
        while True:
            try:
                out.append(self.events.get_nowait())
            except queue.Empty:
                return out

    def kill(self, timeout_s: float = 30.0) -> None:
        """SIGKILL the driver by pid, then its JVM and Python workers by pid, as a crash of
        the driver's machine would stop them all at once, and wait (at most `timeout_s`)
        until they are gone. Left to end on their own, the JVM would first run its shutdown
        hooks, and a Python worker waiting in the testing sink's held commit would wait on."""
        descendants = _children(self.pid)
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(timeout_s)
        for pid in descendants:
            if _alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + timeout_s
        while any(_alive(p) for p in descendants) and time.monotonic() < deadline:
            time.sleep(0.1)
        self._reader.join(5)

    def wait(self, timeout_s: float) -> int:
        code = self.proc.wait(timeout_s)
        self._reader.join(5)
        return code


# -- the checkpoint and the sink's progress, as seen from outside ---------------------------


def _batch_ids(directory: Path) -> list[int]:
    try:
        return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())
    except FileNotFoundError:
        return []


def planned_not_committed(checkpoint: Path) -> int | None:
    """The batch Spark planned (offsets/N) but has not recorded as done (no commits/N)."""
    planned, done = _batch_ids(checkpoint / "offsets"), _batch_ids(checkpoint / "commits")
    if planned and (not done or planned[-1] > done[-1]):
        return planned[-1]
    return None


class SinkProgress:
    """The committed offsets of the exactly-once sink's progress group: task t's offset
    N means it has committed its output of batches up to N - 1."""

    def __init__(self, bootstrap: str, sink_id: str, client: dict[str, str]) -> None:
        from confluent_kafka import Consumer

        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": progress_group(sink_id),
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "logger": client_log,
                **client,
            }
        )

    def tasks_done(self, batch: int, tasks: int = PARTITIONS) -> list[int]:
        from confluent_kafka import KafkaException, TopicPartition

        try:
            committed = self._consumer.committed(
                [TopicPartition(DEFAULT_PROGRESS_TOPIC, t) for t in range(tasks)], timeout=2.0
            )
        except KafkaException:
            return []
        return [tp.partition for tp in committed if tp.error is None and tp.offset == batch + 1]

    def close(self) -> None:
        self._consumer.close()
