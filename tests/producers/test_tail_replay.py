"""The start-up replay of a log tail (``load_producer_state``) against the general path.

The loader reads a data batch's producer fields with one compiled ``struct`` and no
``BatchHeader``; ``ProducerStateManager.replay`` on each parsed header is the reference.
Hypothesis writes logs of idempotent and transactional batches, markers of either kind,
batches without a producer id, epoch changes in both directions and sequences at the
2**31-1 -> 0 wrap, over several segments, and checks that both rebuild the same entries
and open transactions, from the log start and from a snapshot taken part-way.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.producers.loader import load_producer_state
from oncelog.producers.snapshot import write_snapshot
from oncelog.producers.state import (
    BatchMetadata,
    ProducerStateEntry,
    ProducerStateManager,
    TxnMarker,
)
from oncelog.protocol.record_batch import (
    Record,
    build_batch,
    build_control_batch,
    control_marker,
    parse_header,
)
from oncelog.storage.log import LogConfig, PartitionLog

NOW = 1_795_000_000_000
NEVER_EXPIRE = 1 << 62
SEQ_WRAP = 2**31

DATA = st.tuples(
    st.just("data"),
    st.sampled_from([1, 2, 3]),  # producer id
    st.integers(0, 2),  # epoch
    st.sampled_from([0, 5, SEQ_WRAP - 2, SEQ_WRAP - 1]),  # base sequence
    st.integers(1, 3),  # records
    st.booleans(),  # transactional
)
MARKER = st.tuples(
    st.just("marker"),
    st.sampled_from([1, 2, 3]),
    st.integers(0, 2),
    st.booleans(),  # commit
    st.integers(0, 3),  # coordinator epoch
)
PLAIN = st.tuples(st.just("plain"))


def encode(spec: tuple, timestamp_ms: int) -> bytes:
    if spec[0] == "data":
        _, pid, epoch, seq, count, transactional = spec
        return build_batch(
            [Record(None, b"v%d" % i) for i in range(count)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            transactional=transactional,
            timestamp_ms=timestamp_ms,
        )
    if spec[0] == "marker":
        _, pid, epoch, commit, coordinator_epoch = spec
        return build_control_batch(
            commit,
            producer_id=pid,
            producer_epoch=epoch,
            coordinator_epoch=coordinator_epoch,
            base_offset=0,
            timestamp_ms=timestamp_ms,
        )
    return build_batch([Record(None, b"plain")], timestamp_ms=timestamp_ms)


def replayed_header_by_header(log: PartitionLog, start: int, upto: int) -> ProducerStateManager:
    """The reference: every batch with ``start <= base offset < upto``, parsed and
    replayed through ``ProducerStateManager.replay``."""
    manager = ProducerStateManager()
    for _, header in log.scan_headers(start):
        if header.base_offset >= upto:
            break
        marker = None
        if header.is_control:
            found = control_marker(log.read(header.base_offset, header.size))
            marker = None if found is None else TxnMarker(*found)
        manager.replay(header, marker=marker)
    return manager


@settings(max_examples=60, deadline=None)
@given(
    specs=st.lists(st.one_of(DATA, DATA, MARKER, PLAIN), min_size=1, max_size=40),
    cut=st.integers(0, 40),
)
def test_tail_replay_matches_replaying_each_header(specs: list[tuple], cut: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "t-0"
        log = PartitionLog.open(directory, LogConfig(segment_bytes=600), clean_shutdown=True)
        try:
            for i, spec in enumerate(specs):
                batch = encode(spec, NOW + i)
                log.append(batch, parse_header(batch), NOW + i)
            end = log.log_end_offset
            expected = replayed_header_by_header(log, 0, end)

            from_start = load_producer_state(directory, log, NOW, NEVER_EXPIRE)
            assert dict(from_start.entries) == dict(expected.entries)
            assert dict(from_start.open_transactions) == dict(expected.open_transactions)

            # A snapshot at a batch boundary part-way: only the batches after it replayed.
            boundaries = [h.base_offset for _, h in log.scan_headers(0)] + [end]
            snapshot_at = boundaries[cut % len(boundaries)]
            write_snapshot(directory, snapshot_at, replayed_header_by_header(log, 0, snapshot_at))
            from_snapshot = load_producer_state(directory, log, NOW, NEVER_EXPIRE)
            assert dict(from_snapshot.entries) == dict(expected.entries)
            assert dict(from_snapshot.open_transactions) == dict(expected.open_transactions)
        finally:
            log.close()


@given(
    epoch=st.integers(0, 3),
    first_seq=st.integers(0, 5),
    count=st.integers(1, 3),
    first_offset=st.integers(0, 100),
    transactional=st.booleans(),
)
def test_a_new_producer_is_replayed_as_the_empty_entry_with_its_batch(
    epoch: int, first_seq: int, count: int, first_offset: int, transactional: bool
) -> None:
    """``replay_data`` builds a new producer's entry in one step; it must be what the
    general rule (an empty entry, then ``with_batch``) gives."""
    batch = BatchMetadata(
        first_seq, first_seq + count - 1, first_offset, first_offset + count - 1, NOW
    )
    manager = ProducerStateManager()
    manager.replay_data(7, epoch, batch, transactional)
    assert manager.entries[7] == ProducerStateEntry(7).with_batch(epoch, batch, transactional)
    assert dict(manager.open_transactions) == ({7: first_offset} if transactional else {})
