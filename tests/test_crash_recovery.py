"""Crash recovery of a broker subprocess: SIGKILL under load, and torn tails on disk.

What a crash may and may not do (acks=-1, idempotence off, retries off):
- every acknowledged record is stored exactly once, at the offset its ack named;
- a record whose ack was lost to the crash is stored at most once, and only after every
  acknowledged record of its partition (the partition's acked records are a prefix);
- nothing else is stored, offsets stay contiguous, every stored batch passes its CRC;
- a torn tail is cut back to the last whole batch (and logged), and producing continues
  at the offset right after it.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import struct
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.broker.broker import CLEAN_SHUTDOWN_MARKER
from oncelog.client.connection import KafkaConnection
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.record_batch import (
    Record,
    build_batch,
    crc_is_valid,
    decode_records,
    iter_stored_batches,
)
from oncelog.testing import BrokerProcess, BrokerProcessError

from .broker.raw_requests import FETCH_BY_NAME, fetch_body

RDKAFKA_LOG = logging.getLogger("rdkafka")


# -- helpers ---------------------------------------------------------------------------


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", start_timeout_s=30, stop_timeout_s=30)
    process.start()
    try:
        yield process
    finally:
        # A test may leave it killed or running; either way the pid is reaped here.
        if process.running:
            process.kill()


def create_topic(bootstrap: str, name: str, partitions: int, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": RDKAFKA_LOG})
    futures = admin.create_topics(
        [NewTopic(name, partitions, 1, config=dict(configs))], operation_timeout=10
    )
    futures[name].result(15)


def consume_all(
    bootstrap: str, topic: str, partitions: int, timeout_s: float = 30.0
) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of every partition, read with assign() from the beginning up to the
    high watermark: {partition: [(offset, value), ...]}."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "crash-recovery-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "logger": RDKAFKA_LOG,
        }
    )
    try:
        ends = {}
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            assert low == 0, f"partition {p} starts at {low}"
            ends[p] = high
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + timeout_s
        remaining = {p for p, end in ends.items() if end > 0}
        while remaining:
            assert time.monotonic() < deadline, f"reading back timed out; left: {remaining}"
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            p = message.partition()
            out[p].append((message.offset(), message.value()))
            if message.offset() + 1 >= ends[p]:
                remaining.discard(p)
        return out
    finally:
        consumer.close()


def scan_segments(partition_dir: Path) -> list[tuple[int, bytes]]:
    """(offset, value) of every record in the partition's segment files, checking that
    each file is whole batches only, every batch passes its CRC and offsets are
    contiguous across segments."""
    records: list[tuple[int, bytes]] = []
    expected = 0
    segments = sorted(partition_dir.glob("*.log"))
    assert segments, f"no segment in {partition_dir}"
    for path in segments:
        data = path.read_bytes()
        assert int(path.stem) == expected, f"{path.name} should start at offset {expected}"
        end = 0
        for position, header in iter_stored_batches(data):
            batch = data[position : position + header.size]
            assert crc_is_valid(batch), f"{path.name}: CRC mismatch at position {position}"
            assert header.base_offset == expected, (
                path.name,
                position,
                header.base_offset,
                expected,
            )
            for record in decode_records(batch):
                records.append((record.offset, record.value))
            expected = header.next_offset
            end = position + header.size
        assert end == len(data), f"{path.name}: {len(data) - end} bytes after the last whole batch"
    return records


def active_segment(partition_dir: Path) -> Path:
    return max(partition_dir.glob("*.log"), key=lambda p: int(p.stem))


# -- (a) SIGKILL under acks=-1 load ----------------------------------------------------

PARTITIONS = 3
KILL_AFTER_ACKED = 20_000


@pytest.mark.slow
def test_sigkill_under_load_keeps_every_acknowledged_record_once(broker: BrokerProcess) -> None:
    topic = "crash-load"
    # Small segments so the crash lands after several rolls.
    create_topic(broker.bootstrap_servers, topic, PARTITIONS, **{"segment.bytes": "16384"})

    acked: dict[bytes, tuple[int, int]] = {}  # value -> (partition, offset)
    failed: dict[bytes, str] = {}
    killed = False
    late_acks = 0

    def on_delivery(err: KafkaError | None, message: object) -> None:
        nonlocal late_acks
        value = message.value()  # type: ignore[attr-defined]
        if err is None:
            acked[value] = (message.partition(), message.offset())  # type: ignore[attr-defined]
            if killed:
                late_acks += 1  # answered before the kill, reported after it
        else:
            failed[value] = err.name()

    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "acks": "all",
            "enable.idempotence": False,
            "retries": 0,  # no record is ever sent twice: any duplicate is the broker's
            "max.in.flight.requests.per.connection": 5,
            "linger.ms": 2,
            "batch.num.messages": 50,
            "message.timeout.ms": 60_000,
            "logger": RDKAFKA_LOG,
        }
    )
    produced = 0
    deadline = time.monotonic() + 40
    while len(acked) < KILL_AFTER_ACKED or len(producer) == 0:
        assert time.monotonic() < deadline, f"only {len(acked)} records acknowledged in time"
        assert not failed, f"deliveries failed before the crash: {Counter(failed.values())}"
        if len(producer) > 3000:
            producer.poll(0.001)
            continue
        value = b"%09d" % produced
        producer.produce(topic, value, partition=produced % PARTITIONS, on_delivery=on_delivery)
        produced += 1
        if produced % 64 == 0:
            producer.poll(0)

    in_flight_at_kill = len(producer)
    broker.kill()  # SIGKILL, reaped: from here no response can come
    killed = True
    # Nothing may be re-sent to the restarted broker: void every outstanding message and
    # drop the producer before the restart.
    producer.purge()
    assert producer.flush(30) == 0
    del producer

    assert in_flight_at_kill > 0
    assert len(acked) + len(failed) == produced, "every produced record got a delivery report"
    assert len(acked) >= KILL_AFTER_ACKED
    assert failed, "the kill should have left some records unacknowledged"

    broker.restart()
    assert "recovering logs" in broker.read_log(current_run=True)
    stored = consume_all(broker.bootstrap_servers, topic, PARTITIONS)

    produced_values = set(acked) | set(failed)
    all_values: Counter[bytes] = Counter()
    for p, records in stored.items():
        offsets = [offset for offset, _ in records]
        assert offsets == list(range(len(records))), f"partition {p}: offsets not contiguous"
        all_values.update(value for _, value in records)
        numbers = [int(value) for _, value in records]
        assert numbers == sorted(numbers), f"partition {p}: records out of order"
        assert all(n % PARTITIONS == p for n in numbers), f"partition {p}: foreign record"
        # The acknowledged records of a partition are exactly its first offsets, each at
        # the offset its ack named; what follows was in flight at the crash.
        acked_here = sorted(off for part, off in acked.values() if part == p)
        assert acked_here == list(range(len(acked_here))), (
            f"partition {p}: acked offsets have holes"
        )
        assert len(records) >= len(acked_here), (
            f"partition {p}: {len(acked_here)} records acknowledged, {len(records)} stored"
        )
        for offset, value in records[: len(acked_here)]:
            assert acked.get(value) == (p, offset), f"partition {p} offset {offset}: {value!r}"
        for offset, value in records[len(acked_here) :]:
            assert value in failed, f"partition {p} offset {offset}: {value!r} was acked elsewhere"

    duplicated = {v: n for v, n in all_values.items() if n > 1}
    assert not duplicated, f"records stored more than once: {sorted(duplicated)[:10]}"
    missing = set(acked) - set(all_values)
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:10]}"
    unknown = set(all_values) - produced_values
    assert not unknown, f"records nobody produced: {sorted(unknown)[:10]}"

    # The files themselves: whole batches with valid CRCs, the same records the consumer saw.
    broker.terminate()
    for p in range(PARTITIONS):
        assert len(list((broker.data_dir / f"{topic}-{p}").glob("*.log"))) > 2, (
            "expected rolled segments"
        )
        assert scan_segments(broker.data_dir / f"{topic}-{p}") == stored[p]
    print(
        f"produced {produced}, acked {len(acked)} ({late_acks} reported after the kill), "
        f"in flight at kill {in_flight_at_kill}, unacked but stored "
        f"{sum(len(r) for r in stored.values()) - len(acked)}"
    )


# -- (b) torn tails ---------------------------------------------------------------------

TORN_RECORDS = 500
ROUNDS = 25


def _tail(kind: str, next_offset: int) -> bytes:
    rng = random.Random(kind)
    batch = build_batch(
        [Record(None, b"never-acknowledged-%d" % i) for i in range(20)],
        base_offset=next_offset,
        timestamp_ms=int(time.time() * 1000),
    )
    if kind == "half_batch":
        return batch[: len(batch) // 2]
    if kind == "bad_crc_batch":  # whole length, one flipped bit in a record
        corrupt = bytearray(batch)
        corrupt[-3] ^= 0x01
        return bytes(corrupt)
    if kind == "garbage":
        return bytes(rng.getrandbits(8) for _ in range(333))
    if kind == "zeros":  # what a filesystem may show after a crash: allocated, unwritten
        return bytes(4096)
    raise AssertionError(kind)


def _produce(bootstrap: str, topic: str, values: list[bytes], flush_every: int) -> list[int]:
    offsets: dict[bytes, int] = {}
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, message: object) -> None:
        if err is None:
            offsets[message.value()] = message.offset()  # type: ignore[attr-defined]
        else:
            errors.append(err.name())

    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1, "logger": RDKAFKA_LOG}
    )
    for i, value in enumerate(values, 1):
        producer.produce(topic, value, partition=0, on_delivery=on_delivery)
        if i % flush_every == 0:
            assert producer.flush(15) == 0
    assert producer.flush(15) == 0
    assert not errors, errors
    return [offsets[v] for v in values]


@pytest.mark.parametrize("how", ["clean_stop_marker_removed", "kill9_after_write"])
@pytest.mark.parametrize("kind", ["half_batch", "bad_crc_batch", "garbage", "zeros"])
def test_torn_tail_is_truncated_and_produce_continues(
    broker: BrokerProcess, kind: str, how: str
) -> None:
    topic = "torn"
    create_topic(broker.bootstrap_servers, topic, 1, **{"segment.bytes": "4096"})
    values = [b"rec-%05d" % i for i in range(TORN_RECORDS)]
    assert _produce(broker.bootstrap_servers, topic, values, TORN_RECORDS // ROUNDS) == list(
        range(TORN_RECORDS)
    )
    partition_dir = broker.data_dir / f"{topic}-0"
    assert len(list(partition_dir.glob("*.log"))) > 1, "expected several segments"

    if how == "clean_stop_marker_removed":
        broker.terminate()
        assert (broker.data_dir / CLEAN_SHUTDOWN_MARKER).exists()
    segment = active_segment(partition_dir)
    whole_size = segment.stat().st_size
    earlier = {p: p.stat().st_size for p in partition_dir.glob("*.log") if p != segment}
    tail = _tail(kind, TORN_RECORDS)
    with open(segment, "ab") as f:
        f.write(tail)
        f.flush()
        os.fsync(f.fileno())
    if how == "clean_stop_marker_removed":
        (broker.data_dir / CLEAN_SHUTDOWN_MARKER).unlink()
    else:
        broker.kill()

    broker.restart()
    run_log = broker.read_log(current_run=True)
    assert f"truncating {len(tail)} bytes" in run_log and segment.name in run_log, run_log
    assert segment.stat().st_size == whole_size, "tail not cut back to the last whole batch"
    assert {p: p.stat().st_size for p in earlier} == earlier, "earlier segments changed"

    stored = consume_all(broker.bootstrap_servers, topic, 1)[0]
    assert stored == list(enumerate(values))

    more = [b"after-%03d" % i for i in range(10)]
    assert _produce(broker.bootstrap_servers, topic, more, 5) == list(
        range(TORN_RECORDS, TORN_RECORDS + len(more))
    )
    broker.terminate()
    assert scan_segments(partition_dir) == list(enumerate(values + more))


# -- an offset index that lost its unsynced tail ------------------------------------------

INDEX_ENTRY = struct.Struct(">II")  # relative offset, position (storage/offset_index.py)
INDEXED_RECORDS = 80  # per half; 4 records of 1 KiB a batch: an index entry at every batch


def _read_at(conn: KafkaConnection, topic: str, offset: int) -> tuple[int, bytes | None]:
    """(offset, value) of the first record at or after ``offset`` in what a Fetch from
    ``offset`` returns (what a client delivers first)."""
    answer = conn.request(ApiKey.FETCH, fetch_body(topic, offset=offset), version=FETCH_BY_NAME)
    ((part,),) = [t.partitions for t in answer.responses]
    data = memoryview(part.records)
    for position, header in iter_stored_batches(part.records):
        for record in decode_records(data[position : position + header.size]):
            if record.offset >= offset:
                return record.offset, record.value
    raise AssertionError(f"nothing read from offset {offset}")


@pytest.mark.parametrize("checkpoint", ["as_written", "ahead_of_the_index"])
def test_an_index_tail_garbled_by_a_crash_is_rebuilt_and_every_acked_record_read_by_offset(
    broker: BrokerProcess, checkpoint: str
) -> None:
    """An acks=all produce waits for the fsync of the segment's .log file only; its index
    entries are fsynced with the next recovery-point checkpoint. Records acknowledged after
    the last checkpoint, then SIGKILL, and the index's entries past the checkpoint garbled
    as a crash may leave them (one plausible entry pointing too far): the next start
    rebuilds them from the log and every acknowledged record reads back at its offset.
    The control puts the checkpoint at the log end, as if it had been written before the
    index was fsynced: recovery trusts the garbled entry and serves the wrong records.
    (This tests recovery's trust rule, which main had too; the order of index fsync and
    checkpoint is tested in tests/storage/test_index_durability.py.)"""
    topic = "indexed"
    create_topic(broker.bootstrap_servers, topic, 1)
    values = [b"idx-%05d-" % i + bytes(1014) for i in range(2 * INDEXED_RECORDS)]
    half = INDEXED_RECORDS
    assert _produce(broker.bootstrap_servers, topic, values[:half], 4) == list(range(half))
    broker.restart()  # a clean stop: indexes fsynced, the checkpoint at the log end
    time.sleep(2)  # past the first maintenance tick, which may write a checkpoint
    assert _produce(broker.bootstrap_servers, topic, values[half:], 4) == list(
        range(half, 2 * half)
    )
    broker.kill()
    partition_dir = broker.data_dir / f"{topic}-0"
    checkpointed = int((partition_dir / "recovery-point").read_text().split()[-1])
    assert checkpointed <= 2 * half - 70, f"a checkpoint at {checkpointed} leaves no tail"
    index_path = partition_dir / f"{0:020d}.index"
    entries = list(INDEX_ENTRY.iter_unpack(index_path.read_bytes()))
    assert any(offset >= checkpointed for offset, _ in entries), "no entry past it"
    far, far_base = next(
        (position, header.base_offset)
        for position, header in iter_stored_batches((partition_dir / f"{0:020d}.log").read_bytes())
        if header.base_offset >= checkpointed + 60
    )
    kept = [entry for entry in entries if entry[0] < checkpointed]
    garbled_at = checkpointed + 10  # said to be in a batch 50 offsets further on
    garbled = [*kept, (garbled_at, far)]
    index_path.write_bytes(b"".join(INDEX_ENTRY.pack(*e) for e in garbled))
    if checkpoint == "ahead_of_the_index":
        (partition_dir / "recovery-point").write_text(f"0\n{2 * half}\n")
    broker.restart()

    with KafkaConnection(broker.bootstrap_servers) as conn:
        read = {offset: _read_at(conn, topic, offset) for offset in range(2 * half)}
    wrong = [offset for offset, got in read.items() if got != (offset, values[offset])]
    if checkpoint == "as_written":
        assert wrong == []
        assert "recovering 1 segment(s)" in broker.read_log(current_run=True)
    else:
        # the offsets from the garbled one up to that batch are looked up there
        assert wrong == list(range(garbled_at, far_base)), "the control showed no anomaly"


# -- the BrokerProcess harness itself ----------------------------------------------------


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_broker_process_restart_kill_and_clean_stop(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data") as process:
        first_pid, port = process.pid, process.port
        process.kill()
        assert _gone(first_pid) and not process.running
        assert not (process.data_dir / CLEAN_SHUTDOWN_MARKER).exists()
        process.restart()
        assert process.port == port, "restart should reuse the port clients know"
        assert process.pid != first_pid
        second_pid = process.pid
        assert process.terminate() == 0
        assert _gone(second_pid)
        assert (process.data_dir / CLEAN_SHUTDOWN_MARKER).exists()
        process.restart()
        third_pid = process.pid
    assert _gone(third_pid), "leaving the with block stops the process"
    assert "broker stopped cleanly" in process.read_log(current_run=True)
    assert process.read_log().count("=== BrokerProcess start") == 3


def test_broker_process_stops_on_exception(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        with BrokerProcess(tmp_path / "data") as process:
            pid = process.pid
            raise RuntimeError("boom")
    assert _gone(pid)


def test_broker_process_falls_back_to_a_new_port_when_the_old_one_is_taken(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data") as process:
        old = process.port
        process.kill()
        squatter = socket.socket()
        try:
            squatter.bind(("127.0.0.1", old))
            squatter.listen()
            process.restart()
            assert process.port != old
        finally:
            squatter.close()


def test_broker_process_start_failure_reports_the_log(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "data", {"num.partitions": "0"}, start_timeout_s=20)
    with pytest.raises(
        BrokerProcessError, match=r"exited with status 2 before serving[\s\S]*num.partitions"
    ):
        process.start()
    assert not process.running
