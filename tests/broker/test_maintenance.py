"""Maintenance: retention, scheduled flushes and checkpoints, driven by an explicit clock."""

from __future__ import annotations

import asyncio
from pathlib import Path

from oncelog.broker.config import BrokerConfig
from oncelog.broker.durability import GroupCommitFlusher
from oncelog.broker.maintenance import Maintenance
from oncelog.broker.topics import TopicRegistry
from oncelog.protocol.record_batch import Record, build_batch

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
    registry.create("old", 1, {"segment.bytes": "1000", "retention.ms": str(HOUR_MS)}, 0)

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
