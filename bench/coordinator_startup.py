"""Start-up time of the coordinators after a long history, compacted or not.

    .venv/bin/python bench/coordinator_startup.py                       # 1,000,000 commits
    .venv/bin/python bench/coordinator_startup.py --commits 200000 --transactions 20000

A benchmark, not a test. For two history sizes (a tenth of ``--commits`` and all of
them, transactions likewise) it writes the history the coordinators would have written
(one batch per offset commit of 10 groups to 3 partitions each; three transaction-state
records per transaction of 100 transactional ids: Ongoing, PrepareCommit,
CompleteCommit) straight into ``__consumer_offsets`` and ``__transaction_state`` of a
fresh data directory, through the same storage code, then measures how long a broker
takes to start (logs opened, every coordinator partition replayed) before and after
the log cleaner compacted the internal topics. Uncompacted, start-up grows with the
history; compacted, it stays with the live state (10 groups x 3 partitions, 100 ids) and
the active segments (``offsets.topic.segment.bytes`` and
``transaction.state.log.segment.bytes``, 1 MiB here).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path

from oncelog.broker.broker import Broker
from oncelog.broker.config import BrokerConfig
from oncelog.broker.internal_topics import (
    CONSUMER_OFFSETS,
    INTERNAL_SEGMENT_MS,
    TRANSACTION_STATE,
    ensure_internal_topic,
)
from oncelog.broker.log_cleaner import clean_now
from oncelog.broker.topics import TopicRegistry
from oncelog.coordinator_partitions import partition_for
from oncelog.groups.records import CoordinatorRecord, OffsetCommitKey, OffsetCommitValue
from oncelog.protocol.record_batch import Record, build_batch
from oncelog.transactions.log_records import encode_key, encode_value
from oncelog.transactions.state import TransactionMetadata, TxnState

PARTITIONS_PER_GROUP = 3
KEY_MAP_BYTES = 128 * 1024 * 1024


def config(segment_bytes: int) -> BrokerConfig:
    return BrokerConfig.load(
        None,
        {
            "offsets.topic.segment.bytes": str(segment_bytes),
            "transaction.state.log.segment.bytes": str(segment_bytes),
            "log.cleaner.enable": "false",  # the benchmark compacts when it means to
        },
    )


def write_history(
    data_dir: Path,
    broker_config: BrokerConfig,
    commits: int,
    transactions: int,
    groups: int,
    ids: int,
) -> None:
    registry = TopicRegistry(data_dir, broker_config)
    now = int(time.time() * 1000)
    offsets = asyncio.run(
        ensure_internal_topic(
            registry, CONSUMER_OFFSETS, broker_config.offsets_topic_num_partitions, now
        )
    )
    for i in range(commits):
        group = f"group-{i % groups}"
        record = CoordinatorRecord(
            OffsetCommitKey(group, "orders", (i // groups) % PARTITIONS_PER_GROUP),
            OffsetCommitValue(i, "", now, -1),
        )
        key, value = record.encode()
        partition = offsets.partitions[partition_for(group, len(offsets.partitions))]
        partition.append_from_coordinator(build_batch([Record(key, value)], timestamp_ms=now), now)
    state = asyncio.run(
        ensure_internal_topic(
            registry, TRANSACTION_STATE, broker_config.transaction_state_log_num_partitions, now
        )
    )
    for i in range(transactions):
        txn_id = f"txn-{i % ids}"
        partition = state.partitions[partition_for(txn_id, len(state.partitions))]
        for step in (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT):
            metadata = TransactionMetadata(
                txn_id,
                1000 + i % ids,
                i // ids % 30000,
                60_000,
                step,
                partitions=frozenset({("orders", 0)})
                if step is not TxnState.COMPLETE_COMMIT
                else frozenset(),
                txn_start_timestamp=now,
                txn_last_update_timestamp=now,
            )
            batch = build_batch(
                [Record(encode_key(txn_id), encode_value(metadata))], timestamp_ms=now
            )
            partition.append_from_coordinator(batch, now)
    registry.close()
    (data_dir / ".oncelog_cleanshutdown").touch()


def internal_bytes(data_dir: Path) -> int:
    return sum(
        f.stat().st_size
        for f in data_dir.glob("__*/*.log")
        if f.parent.name.startswith((CONSUMER_OFFSETS, TRANSACTION_STATE))
    )


def compact(data_dir: Path, broker_config: BrokerConfig) -> int:
    """What the broker's cleaner does over time: each internal partition's active segment
    rolls when ``segment.ms`` (one hour on internal topics) has passed, then passes clean
    the partition until nothing is dirty. The clock is moved, not waited for."""
    registry = TopicRegistry(data_dir, broker_config)
    later = int(time.time() * 1000) + INTERNAL_SEGMENT_MS
    registry.load(clean_shutdown=True, now_ms=later)
    passes = 0
    for topic in (CONSUMER_OFFSETS, TRANSACTION_STATE):
        for partition in registry.get(topic).partitions:  # type: ignore[union-attr]
            partition.log.maybe_roll(later)
            while clean_now(partition, later, KEY_MAP_BYTES) is not None:
                passes += 1
    registry.close()
    (data_dir / ".oncelog_cleanshutdown").touch()
    return passes


def start_seconds(data_dir: Path, broker_config: BrokerConfig) -> float:
    async def run() -> float:
        broker = Broker(broker_config, data_dir, "127.0.0.1", 0)
        started = time.perf_counter()
        await broker.start()
        elapsed = time.perf_counter() - started
        await broker.stop()
        return elapsed

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=1_000_000)
    parser.add_argument("--transactions", type=int, default=100_000)
    parser.add_argument("--groups", type=int, default=10)
    parser.add_argument("--transactional-ids", type=int, default=100)
    parser.add_argument("--segment-bytes", type=int, default=1 << 20)
    args = parser.parse_args()
    broker_config = config(args.segment_bytes)
    print(f"load average {os.getloadavg()[0]:.1f}; segment bytes {args.segment_bytes}")
    columns = f"{'MB':>7} {'start (s)':>9}"
    print(f"{'commits':>9} {'txns':>8} | {columns} | {columns} {'passes':>6}")
    print(f"{'':>9} {'':>8} | {'uncompacted':>17} | {'compacted':>24}")
    for fraction in (10, 1):
        commits, transactions = args.commits // fraction, args.transactions // fraction
        data_dir = Path(tempfile.mkdtemp(prefix="startup-bench-"))
        try:
            write_history(
                data_dir, broker_config, commits, transactions, args.groups, args.transactional_ids
            )
            raw_mb = internal_bytes(data_dir) / 1e6
            raw = start_seconds(data_dir, broker_config)
            passes = compact(data_dir, broker_config)
            compacted_mb = internal_bytes(data_dir) / 1e6
            compacted = start_seconds(data_dir, broker_config)
        finally:
            shutil.rmtree(data_dir, ignore_errors=True)
        print(
            f"{commits:>9} {transactions:>8} | {raw_mb:>7.1f} {raw:>9.2f} | "
            f"{compacted_mb:>7.1f} {compacted:>9.2f} {passes:>6}"
        )


if __name__ == "__main__":
    main()
