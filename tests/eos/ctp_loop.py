"""Running seed 001's consume-transform-produce worker (ctp_worker.py) as a process and
reading what it left: shared by the single-node and the cluster EOS tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import deque
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

WORKER = Path(__file__).with_name("ctp_worker.py")
IO_TIMEOUT_S = 30.0


class Worker:
    """One worker process; its progress file and stderr live in `run_dir`."""

    def __init__(self, run_dir: Path, index: int, argv: list[str]) -> None:
        self.progress = run_dir / f"run{index:02d}.progress"
        self.stderr_path = run_dir / f"run{index:02d}.stderr"
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(WORKER), *argv, "--progress-file", str(self.progress)],
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=subprocess.STDOUT,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
                close_fds=True,
            )
        self.started = time.monotonic()

    def lines(self) -> list[str]:
        try:
            return self.progress.read_text().splitlines()
        except FileNotFoundError:
            return []

    def commits(self) -> int:
        return sum(1 for line in self.lines() if " committed n=" in line or " produced n=" in line)

    def in_txn(self) -> int:
        """Transactions whose records were produced, uncommitted (eos mode)."""
        return sum(1 for line in self.lines() if " in txn n=" in line)

    def killed_inside_txn(self) -> bool:
        """The last progress line is an open transaction with its records already written."""
        lines = self.lines()
        return bool(lines) and " in txn n=" in lines[-1] and "flushed=True" in lines[-1]

    def wait_while_progressing(self, stall_s: float) -> int | None:
        """Wait for the exit status while the progress file keeps growing; None once it
        stood still for ``stall_s``. The whole run is bounded by the worker's own
        --max-run-s (it exits with status 3): a loaded machine only makes it slower, a
        stuck rebalance or transaction still fails here."""
        seen, deadline = -1, 0.0
        while True:
            try:
                return self.proc.wait(0.5)
            except subprocess.TimeoutExpired:
                pass
            lines = len(self.lines())
            if lines != seen:
                seen, deadline = lines, time.monotonic() + stall_s
            elif time.monotonic() > deadline:
                return None

    def kill(self) -> None:
        """SIGKILL this pid only, and reap it."""
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(30)

    def diagnostics(self, stderr_lines: int = 60) -> str:
        """The progress file's last lines and stderr's (a retry loop's repeats squeezed)."""
        stderr = squeezed(self.stderr_path.read_text(errors="replace").splitlines())
        tail = [line[:400] for line in stderr[-stderr_lines:]]
        return (
            "progress:\n  " + "\n  ".join(self.lines()[-20:]) + "\nstderr:\n  " + "\n  ".join(tail)
        )


TIMESTAMP = len("2026-11-23 04:01:06,641 ")


def squeezed(lines: list[str], window: int = 8) -> list[str]:
    """``lines`` without those whose text after the timestamp is among the last ``window``
    kept: a client's retry loop (thousands of FindCoordinator lines while its coordinator
    is down) shows once, with how many lines were left out where it ended."""
    kept: list[str] = []
    recent: deque[str] = deque(maxlen=window)
    left_out = 0
    for line in lines:
        text = line[TIMESTAMP:]
        if text in recent:
            left_out += 1
            continue
        if left_out:
            kept.append(f"[{left_out} repeated lines left out]")
            left_out = 0
        recent.append(text)
        kept.append(line)
    if left_out:
        kept.append(f"[{left_out} repeated lines left out]")
    return kept


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4()}"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=IO_TIMEOUT_S)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def read_all(
    bootstrap: str, topic: str, isolation: str, partitions: int
) -> list[tuple[int, int, bytes, bytes]]:
    """Every record of `topic` visible at `isolation`: (partition, offset, key, value), read
    from the beginning until each partition reports its end (bounded)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4()}",
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    out: list[tuple[int, int, bytes, bytes]] = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        at_eof: set[int] = set()
        deadline = time.monotonic() + 60
        while len(at_eof) < partitions:
            assert time.monotonic() < deadline, (
                f"reading {topic} ({isolation}) did not reach the end"
            )
            for m in consumer.consume(1000, timeout=0.5):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        at_eof.add(m.partition())
                        continue
                    raise AssertionError(f"reading {topic}: {m.error()}")
                at_eof.discard(m.partition())
                out.append((m.partition(), m.offset(), m.key(), m.value()))
    finally:
        consumer.close()
    return out


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        tps = consumer.committed(
            [TopicPartition(topic, p) for p in range(partitions)], timeout=IO_TIMEOUT_S
        )
        return {tp.partition: tp.offset for tp in tps}
    finally:
        consumer.close()
