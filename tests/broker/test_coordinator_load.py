"""A coordinator record that cannot be read never stops a start.

Corrupt batches are planted in `__consumer_offsets` and `__transaction_state` on disk
(through the storage layer, with valid CRCs, as a disk or an old bug could leave them).
The broker must start, skip them with a warning, count them, and keep serving the groups
and transactional ids whose records are intact. Before, the first such batch raised
`ValueError: record runs past the end of the batch` and the broker never started again.

Also: a `__consumer_offsets` that exists with fewer partitions than
offsets.topic.num.partitions (earlier versions created it with 1 from a Metadata
request) is used with the partitions it has, as Kafka does, instead of failing with
`KeyError` for every group hashed beyond them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import crc32c
import pytest
from confluent_kafka import Producer

from oncelog.broker.config import BrokerConfig
from oncelog.broker.internal_topics import CONSUMER_OFFSETS, TRANSACTION_STATE
from oncelog.broker.topics import TopicRegistry
from oncelog.coordinator_partitions import partition_for
from oncelog.protocol.record_batch import (
    HEADER_SIZE,
    Record,
    build_batch,
    build_control_batch,
    parse_header,
)
from oncelog.testing import EmbeddedBroker

from .group_clients import TIMEOUT_S, commit_offset, committed, consume_as_group, produce_values

CONFIG = {
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
}
CRC_AT, ATTRIBUTES_AT = 17, 21  # where a v2 batch keeps its CRC and what it covers


def with_garbage_records(batch: bytes) -> bytes:
    """`batch` with its records overwritten by garbage, the CRC recomputed to match."""
    data = bytearray(batch)
    data[HEADER_SIZE:] = b"\xff" * (len(batch) - HEADER_SIZE)
    data[CRC_AT:ATTRIBUTES_AT] = crc32c.crc32c(bytes(data[ATTRIBUTES_AT:])).to_bytes(4, "big")
    return bytes(data)


def garbage_batches() -> list[bytes]:
    now = int(time.time() * 1000)
    return [
        # records that run past the end of the batch
        with_garbage_records(build_batch([Record(b"k" * 20, b"v" * 50)], timestamp_ms=now)),
        # a well-formed batch whose key has a known version (0) and a cut-short string
        build_batch([Record(b"\x00\x00\x7f\xffcut", b"\x00\x01junk")], timestamp_ms=now),
        # a transaction marker whose control record is garbage
        with_garbage_records(
            build_control_batch(
                True,
                producer_id=5,
                producer_epoch=0,
                coordinator_epoch=0,
                base_offset=0,
                timestamp_ms=now,
            )
        ),
    ]


def plant(data_dir: Path, topic: str, partition: int) -> int:
    """Append the garbage batches to `topic`-`partition` of a stopped broker's data."""
    registry = TopicRegistry(data_dir, BrokerConfig.load(None, CONFIG))
    registry.load(clean_shutdown=True, now_ms=int(time.time() * 1000))
    log = registry.partition(topic, partition).log
    for batch in garbage_batches():
        log.append(batch, parse_header(batch), int(time.time() * 1000))
    registry.close()
    return len(garbage_batches())


@pytest.mark.parametrize("clean", [True, False], ids=["clean-restart", "after-a-crash"])
def test_corrupt_consumer_offsets_records_are_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, clean: bool
) -> None:
    with EmbeddedBroker(CONFIG, data_dir=tmp_path) as broker:
        produce_values(broker.bootstrap_servers, "data", 4)
        commit_offset(broker.bootstrap_servers, "survivor", "data", 3)
    planted = plant(tmp_path, CONSUMER_OFFSETS, partition_for("survivor", 3))
    if not clean:
        (tmp_path / ".oncelog_cleanshutdown").unlink()

    caplog.set_level(logging.WARNING, logger="oncelog")
    with EmbeddedBroker(CONFIG, data_dir=tmp_path) as broker:
        assert broker.broker is not None
        assert committed(broker.bootstrap_servers, "survivor", "data") == 3
        assert consume_as_group(broker.bootstrap_servers, "newcomer", "data", 4, commit=False) == 4
        assert broker.broker.groups.skipped_records == planted
    assert "skipping unreadable batch" in caplog.text


def test_corrupt_transaction_state_records_are_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with EmbeddedBroker(CONFIG, data_dir=tmp_path) as broker:
        producer = Producer(
            {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "t"}
        )
        producer.init_transactions(TIMEOUT_S)
        del producer
    planted = plant(tmp_path, TRANSACTION_STATE, partition_for("t", 3))

    caplog.set_level(logging.WARNING, logger="oncelog")
    with EmbeddedBroker(CONFIG, data_dir=tmp_path) as broker:
        assert broker.broker is not None
        # The id is still known: a new instance gets its producer id with a bumped epoch.
        (shard,) = [s for s in broker.broker.transactions.shards.values() if "t" in s.metadata]
        known = shard.metadata["t"]
        producer = Producer(
            {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "t"}
        )
        producer.init_transactions(TIMEOUT_S)
        now = shard.metadata["t"]
        assert (now.producer_id, now.producer_epoch) == (
            known.producer_id,
            known.producer_epoch + 1,
        )
        del producer
        assert broker.broker.transactions.skipped_records == planted
    assert "skipping" in caplog.text


def test_an_existing_consumer_offsets_keeps_its_partition_count(tmp_path: Path) -> None:
    """A data directory where `__consumer_offsets` was made with 1 partition."""
    registry = TopicRegistry(tmp_path, BrokerConfig.load(None, CONFIG))
    asyncio.run(
        registry.create(CONSUMER_OFFSETS, 1, {"cleanup.policy": "compact"}, 0, internal=True)
    )
    registry.close()
    (tmp_path / ".oncelog_cleanshutdown").touch()

    with EmbeddedBroker(CONFIG, data_dir=tmp_path) as broker:
        assert broker.broker is not None
        produce_values(broker.bootstrap_servers, "data", 1)
        groups = [f"group-{i}" for i in range(6)]
        assert {partition_for(g, 3) for g in groups} != {0}, "groups beyond partition 0"
        for group in groups:
            assert consume_as_group(broker.bootstrap_servers, group, "data", 1, commit=True) == 1
            assert committed(broker.bootstrap_servers, group, "data") == 1
        assert broker.broker.groups.num_partitions == 1
