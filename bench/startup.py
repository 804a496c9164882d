"""Start-up with many idempotent producers on one partition (issue 12).

    .venv/bin/python bench/startup.py                      # 1,000,000 producers
    .venv/bin/python bench/startup.py --producers 200000 --more 20000

Writes one small batch from each of N distinct idempotent producers (producer ids
1..N, epoch 0, sequence 0) into a one-partition topic of a broker subprocess, then measures
how long the broker takes to be ready (process start to listening, the ready file) and
how much memory it holds:

1. after a clean stop (SIGTERM: the producer state is snapshotted at close);
2. after SIGKILL, with ``--more`` further producers written since that restart (their
   state is only in the log: the start replays the tail after the newest snapshot).

Memory per producer is the broker's resident set after the first load minus that of an
empty broker, divided by N (the figures of a live broker before any restart are printed
too). The time an empty broker takes to be ready is printed first, measured the same
way: what the producers add is the difference.

The broker runs as an installed package would: its modules compiled to bytecode once
(pip does it at install; here the first start writes them into a cache in the bench's
temporary directory, even where PYTHONDONTWRITEBYTECODE is set), so no start measured
here compiles the sources.

The batches are produced over one connection with acks=0 (a produce request carries one
batch per partition, so there is one request per producer), then the log end offset is
polled until every one was appended. The broker is always stopped, by pid.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

import crc32c

from common import uptime
from oncelog.client.connection import KafkaConnection
from oncelog.protocol import codec
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.record_batch import Record, build_batch
from throughput import BrokerProcess, machine

TOPIC = "startup"
PRODUCE_VERSION = 3
# Offsets inside a v2 batch (see protocol/record_batch.py): the CRC covers attributes..end.
CRC_AT, ATTRIBUTES_AT, PRODUCER_ID_AT = 17, 21, 43
CORRELATION_AT = 8  # size, api key, api version, then the correlation id
WINDOW = 2000  # requests sent before reading the socket's answers (acks=0: none)
EMPTY_STARTS = 3


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc")


def produce_one_batch_each(bootstrap: str, first_pid: int, count: int) -> float:
    """One batch from each producer id in ``first_pid .. first_pid+count-1``; seconds."""
    template_batch = build_batch(
        [Record(None, b"x" * 16)],
        producer_id=first_pid,
        producer_epoch=0,
        base_sequence=0,
        timestamp_ms=int(time.time() * 1000),
    )
    api = codec.api_codec(ApiKey.PRODUCE, PRODUCE_VERSION)

    def request(acks: int, correlation_id: int) -> bytearray:
        body = {
            "transactional_id": None,
            "acks": acks,
            "timeout": 30_000,
            "topic_data": [
                {"name": TOPIC, "partition_data": [{"index": 0, "records": template_batch}]}
            ],
        }
        return bytearray(codec.encode_request(api, correlation_id, "startup-bench", body))

    frame = request(0, 0)
    at = bytes(frame).index(template_batch)
    host, _, port = bootstrap.rpartition(":")
    started = time.perf_counter()
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        pending = bytearray()
        for i in range(count):
            pid = first_pid + i
            frame[CORRELATION_AT : CORRELATION_AT + 4] = i.to_bytes(4, "big")
            frame[at + PRODUCER_ID_AT : at + PRODUCER_ID_AT + 8] = pid.to_bytes(8, "big")
            crc = crc32c.crc32c(memoryview(frame)[at + ATTRIBUTES_AT :])
            frame[at + CRC_AT : at + CRC_AT + 4] = crc.to_bytes(4, "big")
            pending += frame
            if len(pending) > WINDOW * len(frame):
                sock.sendall(pending)
                pending.clear()
            if i % 100_000 == 0 and i:
                print(f"  {i:,} producers written", file=sys.stderr)
        sock.sendall(pending)
    # acks=0 has no answers: an acks=1 request behind them on a new connection would not
    # be ordered after them, so ask for the log end until every batch is there.
    with KafkaConnection(bootstrap, timeout_s=60) as conn:
        while True:
            answer = conn.request(
                ApiKey.LIST_OFFSETS,
                {
                    "replica_id": -1,
                    "isolation_level": 0,
                    "timeout": 30_000,
                    "topics": [
                        {"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1}]}
                    ],
                },
            )
            end = answer.topics[0].partitions[0].offset
            if end >= first_pid - 1 + count:
                break
            time.sleep(0.05)
    return time.perf_counter() - started


def create_topic(bootstrap: str) -> None:
    with KafkaConnection(bootstrap) as conn:
        conn.request(
            ApiKey.CREATE_TOPICS,
            {
                "topics": [
                    {
                        "name": TOPIC,
                        "num_partitions": 1,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [],
                    }
                ],
                "timeout": 30_000,
                "validate_only": False,
            },
        )


def start_timed(broker: BrokerProcess) -> float:
    broker.ready_file.unlink(missing_ok=True)
    started = time.perf_counter()
    broker.start(timeout_s=600)
    return time.perf_counter() - started


def installed_environment(work: Path) -> dict[str, str]:
    """This environment, with bytecode written to (and read from) a cache under ``work``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    return env


def kill(broker: BrokerProcess) -> None:
    assert broker.proc is not None
    os.kill(broker.proc.pid, signal.SIGKILL)
    broker.proc.wait(30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--producers", type=int, default=1_000_000)
    parser.add_argument("--more", type=int, default=100_000, help="written before the SIGKILL")
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="oncelog-startup-"))
    broker = BrokerProcess(work, [], installed_environment(work))
    rows: list[tuple[str, str]] = []
    load_before = uptime()
    try:
        broker.start()  # compiles the modules into the cache
        empty = []
        for _ in range(EMPTY_STARTS):
            broker.stop()
            empty.append(start_timed(broker))
        rows.append(
            (f"ready, empty data directory (median of {EMPTY_STARTS})", f"{median(empty):.2f} s")
        )
        assert broker.proc is not None
        empty_kib = rss_kib(broker.proc.pid)
        create_topic(broker.bootstrap)
        print(f"writing {args.producers:,} producers ...", file=sys.stderr)
        seconds = produce_one_batch_each(broker.bootstrap, 1, args.producers)
        live_kib = rss_kib(broker.proc.pid)
        rows.append(("write N producers (acks=0 pipeline)", f"{seconds:.1f} s"))
        rows.append(
            (
                "memory per producer, live (RSS delta / N)",
                f"{(live_kib - empty_kib) * 1024 / args.producers:.0f} B",
            )
        )
        broker.stop()
        ready = start_timed(broker)
        rows.append(("ready after a clean stop", f"{ready:.2f} s"))
        loaded_kib = rss_kib(broker.proc.pid)
        rows.append(
            (
                "memory per producer, after that start",
                f"{(loaded_kib - empty_kib) * 1024 / args.producers:.0f} B",
            )
        )
        if args.more:
            print(f"writing {args.more:,} more producers ...", file=sys.stderr)
            produce_one_batch_each(broker.bootstrap, args.producers + 1, args.more)
        kill(broker)
        ready = start_timed(broker)
        rows.append(
            (f"ready after SIGKILL ({args.more:,} producers in the tail)", f"{ready:.2f} s")
        )
        broker.stop()
    except KeyboardInterrupt:
        return 130
    finally:
        broker.stop()
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print("oncelog start-up benchmark")
    print(f"command:  {shlex.join([Path(sys.executable).name, *sys.argv])}")
    print(f"machine:  {machine()}")
    print(f"load before: {load_before}")
    print(f"load after:  {uptime()}")
    print(f"{args.producers:,} idempotent producers, one 16-byte record each, one partition")
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"  {name:<{width}}  {value:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
