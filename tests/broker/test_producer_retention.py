"""KIP-360: retention deletes a producer's batches, not its state."""

from __future__ import annotations

import asyncio
from pathlib import Path

from oncelog.broker.config import BrokerConfig
from oncelog.broker.topics import TopicRegistry
from oncelog.producers.snapshot import list_snapshots
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.record_batch import Record, build_batch

HOUR_MS = 3_600_000
PRODUCER_ID = 4242


def idempotent_batch(sequence: int, timestamp_ms: int) -> bytes:
    return build_batch(
        [Record(b"k", b"x" * 200)],
        producer_id=PRODUCER_ID,
        producer_epoch=0,
        base_sequence=sequence,
        timestamp_ms=timestamp_ms,
    )


def test_idle_producer_survives_retention_of_its_batches_and_a_restart(tmp_path: Path) -> None:
    config = BrokerConfig.load(None, {})
    registry = TopicRegistry(tmp_path, config)
    asyncio.run(registry.create("t", 1, {"segment.bytes": "300", "retention.ms": str(HOUR_MS)}, 0))
    partition = registry.partition("t", 0)
    for sequence in range(5):
        partition.append_records(idempotent_batch(sequence, 1_000), 1_000)
    # another producer keeps the partition busy later, in a fresh segment
    partition.append_records(
        build_batch([Record(None, b"y" * 200)], timestamp_ms=2 * HOUR_MS), 2 * HOUR_MS
    )
    assert len(partition.log.segments()) == 6

    assert partition.log.apply_retention(2 * HOUR_MS) == 5
    partition.after_retention()
    assert partition.log_start_offset == 5
    assert min(list_snapshots(partition.log.directory)) >= 5, "snapshots below the log start go"

    # The idle producer's next batch continues its sequence: no OUT_OF_ORDER_SEQUENCE_NUMBER.
    outcome = partition.append_records(idempotent_batch(5, 2 * HOUR_MS), 2 * HOUR_MS)
    assert (outcome.base_offset, outcome.duplicate) == (6, False)

    registry.close()
    reopened = TopicRegistry(tmp_path, config)
    reopened.load(clean_shutdown=True, now_ms=2 * HOUR_MS)
    partition = reopened.partition("t", 0)
    retry = partition.append_records(idempotent_batch(5, 2 * HOUR_MS), 2 * HOUR_MS)
    assert (retry.base_offset, retry.duplicate) == (6, True)
    try:
        partition.append_records(idempotent_batch(7, 2 * HOUR_MS), 2 * HOUR_MS)
    except KafkaError as gap:
        assert gap.code == ErrorCode.out_of_order_sequence_number
    else:
        raise AssertionError("a gap after the restart must be refused")
    reopened.close()
