"""An ABORT marker whose aborted-transaction index entry cannot be written.

The marker is appended, and it moves the last stable offset, before its entry is written
to the segment's ``.txnindex`` file. When that write fails (ENOSPC: the first abort of a
segment creates the file, which needs a block the marker did not), the log used to stay
online without the entry: read_committed consumers got the aborted records at once, and a
clean stop kept the file without the entry for good.

Now the entry is indexed in memory before the file is written, and the failed write takes
the log offline (as Kafka takes a log directory offline on any I/O error): reads skip the
aborted records, and the next start recovers the log and writes the entry again. The
fault is a real system-call failure inside an in-process broker: ``os.write`` on a
``.txnindex`` file fails once armed.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncelog.testing import EmbeddedBroker

from ..storage.failures import file_of
from .e2e_helpers import (
    FAST_START,
    TIMEOUT_S,
    create_topic,
    free_port,
    produce_flushed,
    read_confluent,
    transactions_ended,
    txn_producer,
    wait_until,
)


class IndexWriteFault:
    """Once armed, the next write to a ``.txnindex`` file fails with ENOSPC."""

    def __init__(self) -> None:
        self.armed = False
        self.fired = 0

    def fails(self, fd: int) -> bool:
        if not (self.armed and file_of(fd).endswith(".txnindex")):
            return False
        self.armed = False
        self.fired += 1
        return True


@pytest.fixture
def fault(monkeypatch: pytest.MonkeyPatch) -> Iterator[IndexWriteFault]:
    armed = IndexWriteFault()
    real_write = os.write

    def write(fd: int, data: bytes | memoryview) -> int:
        if armed.fails(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    yield armed


def read_committed(broker: EmbeddedBroker, topic: str) -> list[bytes | None]:
    assert broker.broker is not None
    transactions_ended(broker, topic, 1)
    end = broker.broker.topics.partition(topic, 0).high_watermark
    got, positions = read_confluent(broker.bootstrap_servers, topic, {0: end}, "read_committed")
    assert positions == {0: end}, "the consumer did not read to the end"
    return sorted(value for _, _, value in got)


def test_an_abort_whose_index_write_failed_stays_aborted(
    tmp_path: Path, topic: str, fault: IndexWriteFault
) -> None:
    data_dir, port = tmp_path / "data", free_port()
    tid = f"{topic}-txn"
    first = EmbeddedBroker(FAST_START, data_dir=data_dir, port=port).start()
    try:
        create_topic(first.bootstrap_servers, topic, 1)
        producer = txn_producer(first.bootstrap_servers, tid)
        producer.begin_transaction()
        aborted = [(0, b"aborted-%d" % i) for i in range(3)]
        assert produce_flushed(producer, topic, aborted) == [None] * 3
        fault.armed = True
        producer.abort_transaction(TIMEOUT_S)
        assert first.broker is not None
        partition = first.broker.topics.partition(topic, 0)
        wait_until(lambda: partition.log.failed, TIMEOUT_S, "the log taken offline")
        assert fault.fired == 1
        assert partition.high_watermark == 4  # the three records and the ABORT marker
        assert read_committed(first, topic) == []
        producer.flush(0)
        del producer
    finally:
        first.stop()

    with EmbeddedBroker(FAST_START, data_dir=data_dir, port=port) as second:
        assert second.broker is not None
        recovered = second.broker.topics.partition(topic, 0)
        assert [t.last_offset for t in recovered.aborted_transactions(0, 4)] == [3]
        assert read_committed(second, topic) == []
        producer = txn_producer(second.bootstrap_servers, tid)
        producer.begin_transaction()
        committed = [(0, b"committed-%d" % i) for i in range(3)]
        assert produce_flushed(producer, topic, committed) == [None] * 3
        producer.commit_transaction(TIMEOUT_S)
        assert read_committed(second, topic) == [value for _, value in committed]
        producer.flush(0)
        del producer
