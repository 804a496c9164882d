"""What the abuse tests share: a broker subprocess whose memory can be read, and a probe
client that measures how long a normal produce/fetch round trip takes meanwhile.

Everything runs on 127.0.0.1, bounded in time and count. Latencies and memory are
printed (run pytest with -s to see them); the tests assert that the probe is answered
throughout and that the broker's memory stays within its documented bound, never a
wall-clock limit.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from oncelog.client.connection import KafkaConnection
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import Record, build_batch, iter_stored_batches
from oncelog.testing import BrokerProcess

from ..broker.raw_requests import FETCH_BY_NAME, create_topics, fetch_body, produce

MIB = 1024 * 1024
TIMEOUT_S = 120.0
PROBE_TOPIC = "probe"
PROBE_INTERVAL_S = 0.01


def memory_kib(pid: int) -> int:
    """The resident memory of process `pid`, in KiB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise LookupError(f"no VmRSS for process {pid}")


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as `uptime` shows them."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


@dataclass(frozen=True)
class Latencies:
    """The probe's round trips: how many, how many failed, and how long they took."""

    count: int
    errors: int
    p50_ms: float
    p99_ms: float
    max_ms: float

    def __str__(self) -> str:
        return (
            f"{self.count} round trips, {self.errors} errors: p50 {self.p50_ms:.1f} ms, "
            f"p99 {self.p99_ms:.1f} ms, max {self.max_ms:.1f} ms"
        )

    def served_throughout(self) -> bool:
        """Answered all along: many round trips, none failed."""
        return self.count > 20 and self.errors == 0


class Probe:
    """A normal client in a thread: produce one record, fetch it back, every
    PROBE_INTERVAL_S; each round trip timed, and the broker's resident memory read after
    each (`peak_kib`: what the broker held at its fullest during the abuse)."""

    def __init__(self, broker: BrokerProcess) -> None:
        self._pid = broker.pid
        self._conn = KafkaConnection(
            broker.bootstrap_servers, client_id="probe", timeout_s=TIMEOUT_S
        )
        self._stop = threading.Event()
        self._samples: list[float] = []
        self._errors = 0
        self.peak_kib = memory_kib(self._pid)
        self._thread = threading.Thread(target=self._run, name="probe", daemon=True)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> Latencies:
        self._stop.set()
        self._thread.join(TIMEOUT_S)
        self._conn.close()
        return self.latencies()

    def latencies(self) -> Latencies:
        samples = sorted(self._samples) or [0.0]
        p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
        return Latencies(
            len(self._samples),
            self._errors,
            statistics.median(samples) * 1000,
            p99 * 1000,
            samples[-1] * 1000,
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            try:
                self._round_trip()
            except Exception:
                self._errors += 1
            else:
                self._samples.append(time.perf_counter() - started)
            self.peak_kib = max(self.peak_kib, memory_kib(self._pid))
            self._stop.wait(PROBE_INTERVAL_S)

    def _round_trip(self) -> None:
        batch = build_batch([Record(None, b"probe")], timestamp_ms=int(time.time() * 1000))
        answer = produce(self._conn, PROBE_TOPIC, 0, batch)
        if answer.error_code != ErrorCode.none:
            raise RuntimeError(f"produce: {answer.error_code!r}")
        fetched = self._conn.request(
            ApiKey.FETCH,
            fetch_body(PROBE_TOPIC, max_bytes=64 * 1024, offset=answer.base_offset),
            version=FETCH_BY_NAME,
        )
        ((part,),) = [t.partitions for t in fetched.responses]
        offsets = [h.base_offset for _, h in iter_stored_batches(part.records)]
        if answer.base_offset not in offsets:
            raise RuntimeError(f"fetch at {answer.base_offset} returned {offsets}")


def created(conn: KafkaConnection, partitions: dict[str, int]) -> bool:
    """CreateTopics; whether every topic was created."""
    results = create_topics(conn, partitions)
    return all(result.error_code == ErrorCode.none for result in results.values())


@contextmanager
def running_broker(
    data_dir: Path, config: dict[str, str] | None = None, python: str | None = None
) -> Iterator[BrokerProcess]:
    """A broker subprocess with the probe's topic, stopped (by its pid) at the end;
    `python`: another interpreter (tests/patched_python.py)."""
    with BrokerProcess(
        data_dir, config, python=python or sys.executable, start_timeout_s=TIMEOUT_S
    ) as broker:
        with KafkaConnection(broker.bootstrap_servers, timeout_s=TIMEOUT_S) as conn:
            assert created(conn, {PROBE_TOPIC: 1})
        yield broker


def report(
    scenario: str, latencies: Latencies, base_kib: int, grew_kib: int, **figures: object
) -> None:
    """One line per scenario (pytest -s): the probe, the broker's memory before the abuse
    and what it grew by at its fullest, the scenario's own figures, the load average."""
    extra = "".join(f", {k.replace('_', ' ')} {v}" for k, v in figures.items())
    print(
        f"\n[abuse] {scenario}: probe {latencies}; broker memory {base_kib / 1024:.0f} MiB"
        f" + {grew_kib / 1024:.1f} MiB{extra}; load {load_average()}"
    )
