"""Coordinator records: written durably to an internal partition, read back in order."""

from __future__ import annotations

import asyncio
from pathlib import Path

from oncelog.broker.config import BrokerConfig
from oncelog.broker.coordinator_log import (
    InternalTopicLog,
    StoredMarker,
    StoredRecord,
    read_records,
)
from oncelog.broker.durability import GroupCommitFlusher
from oncelog.broker.internal_topics import CONSUMER_OFFSETS, ensure_internal_topic
from oncelog.broker.topics import TopicRegistry

NOW = 1_795_000_000_000


def test_records_and_markers_come_back_in_order_after_a_restart(tmp_path: Path) -> None:
    config = BrokerConfig.load(None, {})
    registry = TopicRegistry(tmp_path, config)
    topic = asyncio.run(ensure_internal_topic(registry, CONSUMER_OFFSETS, 3, NOW))
    assert asyncio.run(ensure_internal_topic(registry, CONSUMER_OFFSETS, 3, NOW)) is topic
    assert topic.configs["cleanup.policy"] == "compact" and topic.is_internal
    partition = topic.partitions[1]

    async def write() -> None:
        flusher = GroupCommitFlusher()
        flusher.start()
        internal = InternalTopicLog(registry, flusher, CONSUMER_OFFSETS, 3, lambda: NOW)
        assert internal.exists() and await internal.ensure() == internal.partition_count() == 3
        end = internal.append(1, [(b"k1", b"v1"), (b"k2", None)], NOW) + 1
        last = internal.append(1, [(b"k3", b"v3")], NOW, producer_id=77, producer_epoch=2)
        assert last == end == 2
        assert partition.log.recovery_point < last, "appended, not yet durable"
        await internal.wait_durable(1, last + 1)
        assert partition.log.recovery_point > last
        assert partition.last_stable_offset == 2, "the transactional record is not stable yet"
        internal.append_marker(1, 77, 2, committed=True, coordinator_epoch=0, now_ms=NOW)
        await flusher.stop()

    asyncio.run(write())
    registry.close()
    reopened = TopicRegistry(tmp_path, config)
    reopened.load(clean_shutdown=False, now_ms=NOW)
    stored = list(read_records(reopened.partition(CONSUMER_OFFSETS, 1)))
    assert stored == [
        StoredRecord(0, b"k1", b"v1", -1, False),
        StoredRecord(1, b"k2", None, -1, False),
        StoredRecord(2, b"k3", b"v3", 77, True),
        StoredMarker(3, 77, True),
    ]
    reopened.close()
