"""A partition's side of transactions: LSO, markers, the aborted-transaction index, and
what a restart rebuilds."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path

import pytest

from oncelog.broker.config import BrokerConfig
from oncelog.broker.topics import TopicRegistry
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.record_batch import Record, build_batch
from oncelog.storage.txn_index import AbortedTxn

from ..storage.failures import file_of

NOW = 1_795_000_000_000


def txn_batch(pid: int, seq: int, count: int = 1, epoch: int = 0) -> bytes:
    return build_batch(
        [Record(b"k", b"v%d" % i) for i in range(count)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=True,
        timestamp_ms=NOW,
    )


def plain_batch() -> bytes:
    return build_batch([Record(None, b"plain")], timestamp_ms=NOW)


@pytest.fixture
def registry(tmp_path: Path) -> TopicRegistry:
    registry = TopicRegistry(tmp_path, BrokerConfig.load(None, {}))
    asyncio.run(registry.create("t", 1, {"segment.bytes": "400"}, NOW))
    return registry


def test_lso_stops_at_the_oldest_open_transaction(registry: TopicRegistry) -> None:
    p = registry.partition("t", 0)
    p.append_records(plain_batch(), NOW)  # 0
    p.append_records(txn_batch(1, 0, 2), NOW)  # 1-2, producer 1 opens at 1
    p.append_records(txn_batch(2, 0), NOW)  # 3, producer 2 opens at 3
    p.append_records(plain_batch(), NOW)  # 4
    assert (p.high_watermark, p.last_stable_offset) == (5, 1)
    assert p.append_marker(1, 0, commit=True, coordinator_epoch=0, now_ms=NOW) == 5
    assert p.last_stable_offset == 3
    assert p.append_marker(2, 0, commit=False, coordinator_epoch=0, now_ms=NOW) == 6
    assert p.last_stable_offset == p.high_watermark == 7
    assert p.aborted_transactions(0, 7) == [AbortedTxn(2, 3, 6, 7)]
    assert p.aborted_transactions(0, 3) == [], "the abort starts at 3: nothing below overlaps"
    assert p.aborted_transactions(6, 7) == [AbortedTxn(2, 3, 6, 7)]
    assert p.aborted_transactions(7, 8) == []


def test_markers_are_fenced_by_epochs(registry: TopicRegistry) -> None:
    p = registry.partition("t", 0)
    p.append_records(txn_batch(1, 0, epoch=3), NOW)
    with pytest.raises(KafkaError) as stale:
        p.append_marker(1, 2, commit=True, coordinator_epoch=0, now_ms=NOW)
    assert stale.value.code == ErrorCode.invalid_producer_epoch
    p.append_marker(1, 3, commit=False, coordinator_epoch=5, now_ms=NOW)
    p.append_records(txn_batch(1, 1, epoch=3), NOW)
    with pytest.raises(KafkaError) as zombie:
        p.append_marker(1, 3, commit=True, coordinator_epoch=4, now_ms=NOW)
    assert zombie.value.code == ErrorCode.transaction_coordinator_fenced


def test_open_transactions_and_aborts_survive_restarts(
    tmp_path: Path, registry: TopicRegistry
) -> None:
    p = registry.partition("t", 0)
    for round_ in range(6):  # enough to roll several 400-byte segments
        p.append_records(txn_batch(7, round_ * 2, 2), NOW)
        p.append_marker(7, 0, commit=round_ % 2 == 0, coordinator_epoch=0, now_ms=NOW)
    p.append_records(txn_batch(8, 0), NOW)  # left open
    expected_aborts = p.aborted_transactions(0, p.high_watermark)
    lso, hw = p.last_stable_offset, p.high_watermark
    assert len(expected_aborts) == 3 and lso == hw - 1
    assert len(p.log.segments()) > 2
    registry.close()

    for clean in (True, False):
        reopened = TopicRegistry(tmp_path, BrokerConfig.load(None, {}))
        reopened.load(clean_shutdown=clean, now_ms=NOW)
        q = reopened.partition("t", 0)
        assert (q.last_stable_offset, q.high_watermark) == (lso, hw)
        assert q.aborted_transactions(0, hw) == expected_aborts
        reopened.close()


def test_a_lost_index_entry_is_rebuilt_from_the_marker(
    tmp_path: Path, registry: TopicRegistry
) -> None:
    p = registry.partition("t", 0)
    p.append_records(txn_batch(9, 0), NOW)
    p.append_marker(9, 0, commit=False, coordinator_epoch=0, now_ms=NOW)
    expected = p.aborted_transactions(0, p.high_watermark)
    registry.close()
    for index_file in (tmp_path / "t-0").glob("*.txnindex"):
        index_file.unlink()
    for snapshot in (tmp_path / "t-0").glob("*.snapshot"):
        snapshot.unlink()
    reopened = TopicRegistry(tmp_path, BrokerConfig.load(None, {}))
    reopened.load(clean_shutdown=False, now_ms=NOW)
    assert reopened.partition("t", 0).aborted_transactions(0, 10) == expected
    reopened.close()


class _IndexWrites:
    """Once armed, the next write to a ``.txnindex`` file fails: with ENOSPC, or ``short``
    (half of it written, as write(2) does when a full disk has room for part)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, short: bool) -> None:
        self.armed = False
        self.short = short
        self._write = os.write
        monkeypatch.setattr(os, "write", self.write)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        if not self.armed or not file_of(fd).endswith(".txnindex"):
            return self._write(fd, data)
        self.armed = False
        if self.short:
            return self._write(fd, memoryview(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("short", [False, True], ids=["enospc", "short-write"])
def test_an_abort_whose_index_entry_failed_stays_aborted_through_a_restart(
    tmp_path: Path, registry: TopicRegistry, monkeypatch: pytest.MonkeyPatch, short: bool
) -> None:
    """The marker is in the log and the stable offset past it: the entry is kept in memory,
    the log goes offline, nothing snapshots the producers past the marker (not the
    time-based roll's attempt, not the close), and the next start indexes it again."""
    p = registry.partition("t", 0)
    p.append_records(txn_batch(9, 0), NOW)
    faults = _IndexWrites(monkeypatch, short)
    faults.armed = True
    with pytest.raises(OSError):
        p.append_marker(9, 0, commit=False, coordinator_epoch=0, now_ms=NOW)
    expected = [AbortedTxn(9, 0, 1, 2)]
    assert p.log.failed
    assert (p.last_stable_offset, p.aborted_transactions(0, 2)) == (2, expected)
    p.log.maybe_roll(NOW + 30 * 24 * 3600 * 1000)  # past segment.ms
    registry.close()

    reopened = TopicRegistry(tmp_path, BrokerConfig.load(None, {}))
    reopened.load(clean_shutdown=False, now_ms=NOW)
    assert reopened.partition("t", 0).aborted_transactions(0, 2) == expected
    reopened.close()
