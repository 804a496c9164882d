"""Coordinator state in internal partitions: write records durably, read them back.

A coordinator (transactions, groups) turns each request into records; the records are
appended to its partition of an internal topic and the answer waits until they are on
disk. At start the same records are read back and replayed, so the state a coordinator
rebuilds is exactly what it had acknowledged.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from oncelog.protocol.record_batch import (
    Record,
    build_batch,
    control_marker,
    decode_records,
    iter_stored_batches,
)

if TYPE_CHECKING:
    from oncelog.broker.durability import GroupCommitFlusher
    from oncelog.broker.partition import Partition

READ_CHUNK_BYTES = 1 << 20
NO_PRODUCER = -1


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """A key/value record of an internal partition, with the producer that wrote it."""

    offset: int
    key: bytes | None
    value: bytes | None
    producer_id: int
    transactional: bool


@dataclass(frozen=True, slots=True)
class StoredMarker:
    """A transaction marker in an internal partition (transactional offset commits end so)."""

    offset: int
    producer_id: int
    committed: bool


async def write_records(
    partition: Partition,
    flusher: GroupCommitFlusher,
    records: Sequence[tuple[bytes, bytes | None]],
    now_ms: int,
    *,
    producer_id: int = NO_PRODUCER,
    producer_epoch: int = -1,
    transactional: bool = False,
) -> int:
    """Append `records` as one batch, wait until it is fsynced; the last offset."""
    batch = build_batch(
        [Record(key, value) for key, value in records],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=transactional,
        timestamp_ms=now_ms,
    )
    outcome = partition.append_from_coordinator(batch, now_ms)
    await flusher.wait_durable(partition, outcome.last_offset + 1)
    return outcome.last_offset


def read_records(partition: Partition) -> Iterator[StoredRecord | StoredMarker]:
    """Every record and transaction marker of `partition`, from its log start, in order."""
    offset = partition.log_start_offset
    end = partition.log.log_end_offset
    while offset < end:
        chunk = partition.log.read(offset, READ_CHUNK_BYTES)
        if not chunk:
            break
        for position, header in iter_stored_batches(chunk):
            batch = memoryview(chunk)[position : position + header.size]
            if header.is_control:
                marker = control_marker(batch)
                if marker is not None:
                    yield StoredMarker(header.base_offset, header.producer_id, marker[0])
            else:
                for record in decode_records(batch):
                    yield StoredRecord(
                        record.offset,
                        record.key,
                        record.value,
                        header.producer_id,
                        header.is_transactional,
                    )
            offset = header.next_offset
