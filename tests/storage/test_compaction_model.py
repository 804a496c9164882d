"""The log cleaner against a reference model of Kafka's compaction rules.

Hypothesis writes a random partition (plain, idempotent and transactional batches, keys,
tombstones and keyless records, commit and abort markers, segment rolls) through the real
partition code, then runs cleaning passes at increasing times with the real cleaner
(pure decisions and file I/O, swap included). After every pass the log read back from disk
must be exactly what the model predicts batch by batch, and what a consumer can see must
not have changed: under read_committed the last value of every key (a tombstone counts as
"no value"), no aborted record, every record at or past the cleanable end untouched, and
the producer state rebuilt from the log alone keeps every live producer's epoch and last
sequence, so a retry is still recognised.

The model is written over the whole log at once (what transaction a batch belongs to, is
found by looking ahead for its marker), where the cleaner streams batch by batch with the
transaction index; the two must agree.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from oncelog.broker.log_cleaner import clean_now
from oncelog.broker.partition import Partition, PartitionSettings
from oncelog.producers.loader import load_producer_state
from oncelog.producers.state import ProducerStateManager
from oncelog.protocol.record_batch import (
    Record,
    build_batch,
    control_marker,
    decode_records,
    iter_stored_batches,
    split_batches,
)
from oncelog.storage import LogConfig, PartitionLog
from oncelog.storage.cleaner import CleaningResult
from oncelog.storage.compaction import delete_horizon_ms

RETENTION_MS = 1_000
KEY_MAP_BYTES = 1 << 20
SETTINGS = PartitionSettings(
    max_message_bytes=1 << 20,
    log_append_time=False,
    flush_messages=1,
    flush_ms=1 << 62,
    records=None,
)
CONFIG = LogConfig(
    segment_bytes=1 << 20,
    segment_ms=10,
    index_interval_bytes=100,
    compact=True,
    delete=False,
    delete_retention_ms=RETENTION_MS,
)

KEYS = st.sampled_from([b"a", b"b", b"c", b"d", None])
VALUES = st.sampled_from([b"1", b"2", b"3", None])
RECORDS = st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=3)
IDEMPOTENT = [1, 2]
TRANSACTIONAL = [10, 11, 12]

OPS = st.one_of(
    st.tuples(st.just("plain"), RECORDS),
    st.tuples(st.just("idempotent"), st.sampled_from(IDEMPOTENT), RECORDS),
    st.tuples(st.just("txn"), st.sampled_from(TRANSACTIONAL), RECORDS),
    st.tuples(st.just("end"), st.sampled_from(TRANSACTIONAL), st.booleans()),
    st.tuples(st.just("end"), st.sampled_from(TRANSACTIONAL), st.booleans()),
    st.tuples(st.just("roll")),
)


# --- the log as the model sees it ------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    segment: int  # base offset of the segment holding it
    base: int
    last: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool
    control: str | None  # "commit", "abort", "empty" for control batches
    horizon: int | None
    records: tuple[tuple[int, bytes | None, bytes | None], ...]  # (offset, key, value)


def read_back(partition_log: PartitionLog) -> list[Batch]:
    out = []
    for info in partition_log.segments():
        data = info.path.read_bytes()
        for pos, header in iter_stored_batches(data):
            view = memoryview(data)[pos : pos + header.size]
            control = None
            if header.is_control:
                marker = control_marker(view) if header.record_count else None
                control = "empty" if marker is None else ("commit" if marker[0] else "abort")
            out.append(
                Batch(
                    info.base_offset,
                    header.base_offset,
                    header.last_offset,
                    header.producer_id,
                    header.producer_epoch,
                    header.base_sequence,
                    header.is_transactional,
                    control,
                    delete_horizon_ms(header),
                    tuple((r.offset, r.key, r.value) for r in decode_records(view)),
                )
            )
    return out


def marker_after(log: list[Batch], i: int) -> Batch | None:
    """The control batch that ends the transaction of transactional batch ``log[i]``."""
    pid = log[i].producer_id
    return next((b for b in log[i + 1 :] if b.control and b.producer_id == pid), None)


def is_aborted(log: list[Batch], i: int) -> bool:
    if log[i].control or not log[i].transactional:
        return False
    marker = marker_after(log, i)
    return marker is not None and marker.control == "abort"


def has_data(log: list[Batch], i: int) -> bool:
    """Whether any data batch of the transaction ``log[i]`` (a marker) ends is left."""
    pid = log[i].producer_id
    for b in reversed(log[:i]):
        if b.producer_id != pid:
            continue
        if b.control:
            return False
        if b.transactional:
            return True
    return False


def model_pass(
    log: list[Batch],
    *,
    dirty_from: int,
    end: int,
    now: int,
    keep: set[int],  # last offsets of the batches kept for their producer (or markers)
    group_last: set[int],  # base offsets of each cleaned group's last batch
) -> list[Batch]:
    latest: dict[bytes, int] = {}
    for i, b in enumerate(log):
        if b.control or is_aborted(log, i) or b.base >= end:
            continue
        for offset, key, _ in b.records:
            if key is not None and dirty_from <= offset < end:
                latest[key] = max(latest.get(key, -1), offset)
    out = []
    for i, b in enumerate(log):
        if b.base >= end:
            out.append(b)
            continue
        must_keep = b.base in group_last or b.last in keep
        emptied = replace(b, records=(), horizon=None, control="empty" if b.control else None)
        empty = emptied if must_keep else None
        if b.control:
            gone = b.control == "empty" or not has_data(log, i)
            if not b.records or (gone and b.horizon is not None and b.horizon <= now):
                out += [empty] if empty else []
            elif gone and b.horizon is None:
                out.append(replace(b, horizon=now + RETENTION_MS))
            else:
                out.append(b)
            continue
        if is_aborted(log, i):
            out += [empty] if empty else []
            continue
        kept = tuple(
            (offset, key, value)
            for offset, key, value in b.records
            if offset >= end
            or (
                key is not None
                and offset >= latest.get(key, -1)
                and (value is not None or b.horizon is None or now < b.horizon)
            )
        )
        if not kept:
            out += [empty] if empty else []
            continue
        horizon = b.horizon
        if horizon is None and any(value is None for _, _, value in kept):
            horizon = now + RETENTION_MS
        out.append(replace(b, records=kept, horizon=horizon))
    return out


def without_segments(log: list[Batch]) -> list[Batch]:
    return [replace(b, segment=0) for b in log]


# --- what a consumer sees ----------------------------------------------------------------


def committed_view(log: list[Batch], below: int) -> dict[bytes, bytes]:
    """Last value of each key under read_committed, among records below ``below``."""
    view: dict[bytes, bytes] = {}
    for i, b in enumerate(log):
        if b.control or is_aborted(log, i):
            continue
        for offset, key, value in b.records:
            if key is None or offset >= below:
                continue
            if value is None:
                view.pop(key, None)
            else:
                view[key] = value
    return view


# --- writing the random log -------------------------------------------------------------


class Writer:
    def __init__(self, directory: Path) -> None:
        self.log = PartitionLog.open(directory, CONFIG, clean_shutdown=True)
        self.partition = Partition("t", 0, self.log, ProducerStateManager(), SETTINGS)
        self.sequences: dict[int, int] = {}
        self.open: set[int] = set()
        self.now = 0

    def apply(self, op: tuple) -> None:
        kind = op[0]
        if kind == "roll":
            self.now += 20
            self.log.maybe_roll(self.now)
            return
        if kind == "end":
            pid, commit = op[1], op[2]
            if pid in self.open:
                self.partition.append_marker(pid, 0, commit, 0, self.now)
                self.open.discard(pid)
            return
        pid = op[1] if kind != "plain" else -1
        records = op[-1]
        sequence = self.sequences.get(pid, 0)
        batch = build_batch(
            [Record(k, v) for k, v in records],
            producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1,
            base_sequence=sequence if pid >= 0 else -1,
            transactional=kind == "txn",
            timestamp_ms=self.now,
        )
        if pid >= 0:
            self.sequences[pid] = sequence + len(records)
        if kind == "txn":
            self.open.add(pid)
        [(header, view)] = split_batches(batch)
        self.partition.append_client_batch(view, header, self.now)


def kept_for_producers(partition: Partition) -> set[int]:
    """Last offsets of the batches the producer state points at."""
    keep = set()
    for entry in partition.producers.entries.values():
        if entry.batches:
            keep.add(entry.last_offset)
    return keep


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    rounds=st.lists(
        st.tuples(st.lists(OPS, max_size=25), st.integers(0, 3 * RETENTION_MS)),
        min_size=1,
        max_size=8,
    )
)
def test_cleaner_matches_model(rounds: list[tuple[list[tuple], int]]) -> None:
    """Rounds of appends then a pass; the same appends go to a shadow log never cleaned."""
    with tempfile.TemporaryDirectory(prefix="compaction-model-") as tmp:
        directory = Path(tmp)
        writer = Writer(directory / "t-0")
        shadow = Writer(directory / "shadow-0")
        try:
            dirty_from = 0
            for ops, pause in rounds:
                for op in ops:
                    writer.apply(op)
                    shadow.apply(op)
                writer.now += pause + 20
                writer.log.maybe_roll(writer.now)  # all so far becomes cleanable (LSO allowing)
                current = read_back(writer.log)
                end_before = writer.log.log_end_offset
                result = clean_now(writer.partition, writer.now, KEY_MAP_BYTES)
                if result is None:
                    continue
                expected = model_pass(
                    current,
                    dirty_from=dirty_from,
                    end=result.end_offset,
                    now=writer.now,
                    keep=kept_for_producers(writer.partition),
                    group_last=group_last_bases(current, result),
                )
                _note_coverage(current, expected)
                cleaned = read_back(writer.log)
                assert without_segments(cleaned) == without_segments(expected)
                assert writer.log.log_end_offset == end_before
                _check_consumer_view(read_back(shadow.log), cleaned, result.end_offset, writer.log)
                dirty_from = result.end_offset
            _check_producers(writer, directory / "t-0")
        finally:  # written files left open would crowd the process-wide file cache
            writer.log.close()
            shadow.log.close()


def group_last_bases(current: list[Batch], result: CleaningResult) -> set[int]:
    """Base offsets of each cleaned group's last batch (kept, maybe empty)."""
    bases = set()
    for group in result.groups:
        segments = {s.base_offset for s in group.replaced}
        inside = [b for b in current if b.segment in segments]
        if inside:
            bases.add(inside[-1].base)
    return bases


def _note_coverage(before: list[Batch], after: list[Batch]) -> None:
    """Name what a pass did, so ``--hypothesis-show-statistics`` shows the rules ran."""
    records = lambda log: sum(len(b.records) for b in log if not b.control)  # noqa: E731
    if records(after) < records(before):
        event("records removed")
    markers = lambda log: sum(1 for b in log if b.control in ("commit", "abort"))  # noqa: E731
    if markers(after) < markers(before):
        event("marker removed or emptied")
    if any(not b.records for b in after if b.control != "empty" and not b.control):
        event("empty data batch kept")
    if any(b.horizon is not None for b in after):
        event("delete horizon set")
    if any(b.control == "abort" for b in before):
        event("aborted transaction in log")


def _check_consumer_view(
    original: list[Batch], current: list[Batch], end: int, partition_log: PartitionLog
) -> None:
    assert committed_view(current, 1 << 62) == committed_view(original, 1 << 62)
    assert without_segments([b for b in current if b.base >= end]) == without_segments(
        [b for b in original if b.base >= end]
    )
    for i, b in enumerate(current):
        if b.records and not b.control:
            assert not is_aborted(current, i) or b.base >= end, "aborted data survived"
    # The transaction index still names every aborted batch a read_committed fetch
    # returns, so consumers can drop it.
    aborted = partition_log.aborted_txns(0, 1 << 62)
    for i, b in enumerate(current):
        if b.records and is_aborted(current, i):
            assert any(
                t.producer_id == b.producer_id and t.first_offset <= b.base <= t.last_offset
                for t in aborted
            ), f"aborted batch at {b.base} not in the transaction index"


def _check_producers(writer: Writer, directory: Path) -> None:
    """The producer state rebuilt from the cleaned log alone equals the live one."""
    for snapshot in directory.glob("*.snapshot"):
        snapshot.unlink()
    rebuilt = load_producer_state(directory, writer.log, writer.now, 1 << 62)
    for pid, entry in writer.partition.producers.entries.items():
        got = rebuilt.entries.get(pid)
        assert got is not None, f"producer {pid} lost"
        assert (got.producer_epoch, got.last_seq, got.last_offset) == (
            entry.producer_epoch,
            entry.last_seq,
            entry.last_offset,
        )
        assert got.current_txn_first_offset == entry.current_txn_first_offset
