"""Maintenance: retention, scheduled flushes and checkpoints, driven by an explicit clock."""

from __future__ import annotations

import asyncio
import errno
import threading
from pathlib import Path

import pytest

import oncelog.storage.log as log_module
from oncelog.broker.config import BrokerConfig
from oncelog.broker.durability import GroupCommitFlusher
from oncelog.broker.maintenance import Maintenance
from oncelog.broker.topics import TopicRegistry
from oncelog.protocol.record_batch import Record, build_batch

from ..storage.failures import fail_with_one_fsync, file_of

HOUR_MS = 3_600_000


def append(registry: TopicRegistry, topic: str, count: int, timestamp_ms: int) -> None:
    partition = registry.partition(topic, 0)
    for _i in range(count):
        batch = build_batch([Record(b"k", b"x" * 100)], timestamp_ms=timestamp_ms)
        partition.append_records(batch, timestamp_ms)


def test_retention_and_flush_run_when_due(tmp_path: Path) -> None:
    config = BrokerConfig.load(
        None,
        {
            "log.flush.interval.messages": "1000000",
            "log.flush.interval.ms": "5000",
            "log.retention.check.interval.ms": "60000",
        },
    )
    registry = TopicRegistry(tmp_path, config)
    asyncio.run(
        registry.create("old", 1, {"segment.bytes": "1000", "retention.ms": str(HOUR_MS)}, 0)
    )

    async def scenario() -> None:
        flusher = GroupCommitFlusher()
        flusher.start()
        maintenance = Maintenance(registry, flusher, config, clock_ms=lambda: 0)
        partition = registry.partition("old", 0)
        append(registry, "old", 30, timestamp_ms=1_000)
        assert len(partition.log.segments()) > 2
        assert partition.log.recovery_point == 0

        await maintenance.tick(2_000)  # first sight of unflushed data; nothing expired
        assert partition.log.log_start_offset == 0
        await maintenance.tick(6_000)  # still inside flush.ms
        await asyncio.sleep(0.1)
        assert partition.log.recovery_point == 0
        await maintenance.tick(7_001)  # flush.ms passed since the data was first seen
        for _ in range(50):
            await asyncio.sleep(0.02)
            if partition.log.recovery_point == 30:
                break
        assert partition.log.recovery_point == 30

        await maintenance.tick(HOUR_MS + 10_000)  # the batches are now past retention.ms
        assert partition.log.log_start_offset > 0
        start = partition.log.log_start_offset
        assert start == partition.log.segments()[0].base_offset
        assert len(partition.log.segments()) == 1, "only the active segment survives"
        await flusher.stop()

    asyncio.run(scenario())
    registry.close()


def test_retention_leaves_a_failed_log_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log whose fsync failed is offline until a restart recovers it: retention deletes
    none of its segments (as Kafka leaves the logs of an offline directory), while a healthy
    log beside it is trimmed."""
    config = BrokerConfig.load(None, {"log.retention.check.interval.ms": "60000"})
    registry = TopicRegistry(tmp_path, config)
    topic_config = {"segment.bytes": "1000", "retention.ms": str(HOUR_MS)}
    for topic in ("healthy", "failed"):
        asyncio.run(registry.create(topic, 1, topic_config, 0))
        append(registry, topic, 30, timestamp_ms=1_000)
    failed = registry.partition("failed", 0).log
    failed_segments = failed.segments()

    fail_with_one_fsync(failed)

    async def scenario() -> None:
        flusher = GroupCommitFlusher()
        flusher.start()
        await Maintenance(registry, flusher, config, clock_ms=lambda: 0).tick(HOUR_MS + 10_000)
        await flusher.stop()

    asyncio.run(scenario())
    assert len(registry.partition("healthy", 0).log.segments()) == 1
    assert failed.segments() == failed_segments and failed.log_start_offset == 0
    assert all(segment.path.exists() for segment in failed_segments)
    registry.close()


def test_a_failed_index_fsync_at_the_checkpoint_reports_its_log_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The periodic checkpoint fsyncs the offset indexes first; one that fails takes its
    log offline, and the partition's owner is told (in a cluster: marked offline in
    ZooKeeper, leadership moves), as after a failed data fsync. The other log is not."""
    config = BrokerConfig.load(None, {})
    registry = TopicRegistry(tmp_path, config)
    offline: list[str] = []
    for topic in ("healthy", "failing"):
        asyncio.run(registry.create(topic, 1, {"index.interval.bytes": "100"}, 0))
        append(registry, topic, 5, timestamp_ms=1_000)
        partition = registry.partition(topic, 0)
        partition.log.flush()  # the data is durable; its index entries are not yet
        partition.on_offline = lambda p: offline.append(p.topic)
    real = log_module.fsync_together

    def failing_index(fds: list[int]) -> None:
        if any("failing-0" in file_of(fd) and file_of(fd).endswith(".index") for fd in fds):
            raise OSError(errno.EIO, "Input/output error (injected)")
        real(fds)

    monkeypatch.setattr(log_module, "fsync_together", failing_index)

    async def scenario() -> None:
        flusher = GroupCommitFlusher()
        flusher.start()
        await Maintenance(registry, flusher, config, clock_ms=lambda: 0).tick(0)
        await flusher.stop()

    asyncio.run(scenario())
    assert offline == ["failing"]
    assert registry.partition("failing", 0).log.failed
    assert not registry.partition("healthy", 0).log.failed
    registry.close()


def _cancel_a_tick_while_it_checkpoints(
    registry: TopicRegistry, writing: threading.Event, release: threading.Event
) -> bool:
    """Run a maintenance tick, cancel it once a checkpoint write has begun (``writing``),
    then let the writes end (``release``). Whether the tick had returned before that."""

    async def scenario() -> bool:
        flusher = GroupCommitFlusher()
        flusher.start()
        maintenance = Maintenance(registry, flusher, BrokerConfig.load(None, {}), lambda: 0)
        tick = asyncio.ensure_future(maintenance.tick(0))
        while not writing.is_set():
            await asyncio.sleep(0.01)
        tick.cancel()
        await asyncio.sleep(0.2)  # the tick takes the cancellation while the write is held
        returned_early = tick.done()
        release.set()
        await asyncio.gather(tick, return_exceptions=True)
        await flusher.stop()
        assert tick.cancelled()
        return returned_early

    return asyncio.run(scenario())


def test_a_cancelled_tick_waits_for_its_checkpoint_thread(tmp_path: Path) -> None:
    """Broker.stop cancels maintenance, then closes the logs: a checkpoint thread left
    running would write beside the close (two writers of one temporary file)."""
    registry = TopicRegistry(tmp_path, BrokerConfig.load(None, {}))
    asyncio.run(registry.create("t", 1, {}, 0))
    writing, release = threading.Event(), threading.Event()
    finished: list[str] = []

    def slow_checkpoint() -> None:
        writing.set()
        release.wait(10)
        finished.append("checkpoint")

    registry.partition("t", 0).log.write_recovery_checkpoint = (  # type: ignore[method-assign]
        slow_checkpoint
    )
    returned_early = _cancel_a_tick_while_it_checkpoints(registry, writing, release)
    finished.append("tick")
    assert not returned_early, "the cancelled tick returned while its thread still wrote"
    assert finished == ["checkpoint", "tick"]
    registry.close()


def test_a_cancelled_tick_leaves_the_other_partitions_checkpoints_to_their_close(
    tmp_path: Path,
) -> None:
    """On a loaded disk each checkpoint's fsyncs can take a second: a broker stopping
    must wait for the one under way, not for one per partition. Each log writes its own
    when it closes."""
    registry = TopicRegistry(tmp_path, BrokerConfig.load(None, {}))
    asyncio.run(registry.create("t", 5, {}, 0))
    writing, release = threading.Event(), threading.Event()
    written: list[int] = []

    def slow_checkpoint(index: int) -> None:
        writing.set()
        release.wait(10)
        written.append(index)

    for index in range(5):
        log = registry.partition("t", index).log
        log.write_recovery_checkpoint = (  # type: ignore[method-assign]
            lambda index=index: slow_checkpoint(index)
        )
    _cancel_a_tick_while_it_checkpoints(registry, writing, release)
    assert len(written) == 1, f"checkpoints written after the cancellation: {written}"
    registry.close()
