"""A write to ``__transaction_state`` that fails with an I/O error (issue 12's follow-up):
the coordinator takes that partition out until the broker restarts, the producer
(confluent-kafka) is told to retry, and after the restart it goes on.

The faults are real system-call failures inside an in-process broker: ``os.write`` and
``os.fsync`` are wrapped so that, once armed, the call on a ``__transaction_state`` segment
file fails (the wrapper finds the file through /proc/self/fd). Three faults:

- **The PREPARE_COMMIT's write fails half-way (ENOSPC).** Before, the OSError escaped the
  coordinator runtime: EndTxn was answered UNKNOWN_SERVER_ERROR, an error the producer
  cannot retry, and the id stayed marked as being written for ever.
- **The PREPARE_COMMIT's fsync fails (EIO).** The record is in the log (maybe not on disk);
  the restart finds it and completes the commit, which the producer's retry then sees.
- **The COMPLETE_COMMIT's fsync fails (EIO).** Before, the shard was told the write failed
  and kept PREPARE_COMMIT, whose markers only a load re-sends: the id answered
  CONCURRENT_TRANSACTIONS for ever, although its log may hold COMPLETE_COMMIT.

Now the partition answers NOT_COORDINATOR (retriable) until the restart, which loads it
from its log (recovering it as after a crash when an fsync failed) and completes what it
finds prepared; the producer's retry then commits and a second transaction follows.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import KafkaException

from oncelog.broker.internal_topics import TRANSACTION_STATE
from oncelog.client.connection import KafkaConnection
from oncelog.coordinator_partitions import partition_for
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.testing import EmbeddedBroker
from oncelog.transactions.state import TransactionMetadata, TxnState

from ..storage.failures import file_of
from .e2e_helpers import (
    FAST_START,
    TIMEOUT_S,
    create_topic,
    free_port,
    produce_flushed,
    read_confluent,
    txn_producer,
    wait_until,
)


def is_state_segment(fd: int) -> bool:
    target = file_of(fd)
    return f"/{TRANSACTION_STATE}-" in target and target.endswith(".log")


@dataclass
class StateLogFaults:
    """Faults on the ``__transaction_state`` segment files: ``armed["write"] = n`` fails the
    n-th write from now (1: the next one), ``armed["fsync"]`` the n-th fsync."""

    armed: dict[str, int] = field(default_factory=dict)
    fired: int = 0

    def fails(self, call: str, fd: int) -> bool:
        if call not in self.armed or not is_state_segment(fd):
            return False
        self.armed[call] -= 1
        if self.armed[call]:
            return False
        del self.armed[call]
        self.fired += 1
        return True


@pytest.fixture
def faults(monkeypatch: pytest.MonkeyPatch, fsyncs_in_python: None) -> Iterator[StateLogFaults]:
    armed = StateLogFaults()
    real_write, real_fsync = os.write, os.fsync

    def write(fd: int, data: bytes | memoryview) -> int:
        if armed.fails("write", fd):
            real_write(fd, memoryview(data)[: len(data) // 2])  # half of it reaches the file
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    def fsync(fd: int) -> None:
        if armed.fails("fsync", fd):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real_fsync(fd)

    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "fsync", fsync)
    yield armed


def coordinator_metadata(broker: EmbeddedBroker, tid: str) -> TransactionMetadata | None:
    assert broker.broker is not None
    coordinator = broker.broker.transactions
    shard = coordinator.shards.get(partition_for(tid, coordinator.num_partitions))
    return None if shard is None else shard.get(tid)


def partition_out(broker: EmbeddedBroker, tid: str) -> bool:
    assert broker.broker is not None
    coordinator = broker.broker.transactions
    return partition_for(tid, coordinator.num_partitions) not in coordinator.shards


def committed(broker: EmbeddedBroker, tid: str) -> bool:
    metadata = coordinator_metadata(broker, tid)
    return metadata is not None and metadata.state is TxnState.COMPLETE_COMMIT


@pytest.mark.parametrize("fault", ["prepare-write", "prepare-fsync", "complete-fsync"])
def test_a_failed_state_write_takes_the_partition_out_and_a_restart_brings_it_back(
    tmp_path: Path, topic: str, faults: StateLogFaults, fault: str
) -> None:
    data_dir, port = tmp_path / "data", free_port()
    tid = f"{topic}-txn"
    first = EmbeddedBroker(FAST_START, data_dir=data_dir, port=port).start()
    try:
        bootstrap = first.bootstrap_servers
        create_topic(bootstrap, topic, 1)
        producer = txn_producer(bootstrap, tid)
        producer.begin_transaction()
        values = [(0, b"first-%d" % i) for i in range(3)]
        assert produce_flushed(producer, topic, values) == [None] * 3
        if fault.startswith("prepare-"):  # the PREPARE_COMMIT record, or its fsync
            faults.armed["write" if fault == "prepare-write" else "fsync"] = 1
            with pytest.raises(KafkaException) as stalled:
                producer.commit_transaction(3)
            assert stalled.value.args[0].retriable(), stalled.value  # retry, not abort
        else:
            faults.armed["fsync"] = 2  # the PREPARE_COMMIT's fsync passes, the COMPLETE's fails
            producer.commit_transaction(TIMEOUT_S)
        wait_until(lambda: partition_out(first, tid), TIMEOUT_S, "the partition taken out")
        assert faults.fired == 1
        # Its log is offline too, whatever the fault (a cluster moves an offline log): the
        # half write was cut back, and the log stayed online before.
        assert first.broker is not None
        coordinator = first.broker.transactions
        index = partition_for(tid, coordinator.num_partitions)
        assert first.broker.topics.partition(TRANSACTION_STATE, index).log.failed
    finally:
        first.stop()

    with EmbeddedBroker(FAST_START, data_dir=data_dir, port=port) as second:
        if fault.startswith("prepare-"):
            producer.commit_transaction(TIMEOUT_S)  # the same call again, as librdkafka asks
        wait_until(lambda: committed(second, tid), TIMEOUT_S, "COMPLETE_COMMIT")
        producer.begin_transaction()
        values = [(0, b"second-%d" % i) for i in range(3)]
        assert produce_flushed(producer, topic, values) == [None] * 3
        producer.commit_transaction(TIMEOUT_S)
        assert second.broker is not None
        end = second.broker.topics.partition(topic, 0).high_watermark
        got, _ = read_confluent(second.bootstrap_servers, topic, {0: end}, "read_committed")
        assert sorted(value for _, _, value in got) == sorted(
            [b"first-%d" % i for i in range(3)] + [b"second-%d" % i for i in range(3)]
        )
        producer.flush(0)
        del producer


def find_coordinator(conn: KafkaConnection, tid: str, version: int) -> tuple[ErrorCode, int]:
    """FindCoordinator for a transactional id: (error, node id)."""
    if version >= 4:
        response = conn.request(
            ApiKey.FIND_COORDINATOR,
            {"key_type": 1, "coordinator_keys": [tid]},
            version=version,
        )
        (answer,) = response.coordinators
    else:
        answer = conn.request(ApiKey.FIND_COORDINATOR, {"key": tid, "key_type": 1}, version=version)
    return answer.error_code, answer.node_id


def add_partition(conn: KafkaConnection, tid: str, topic: str) -> ErrorCode:
    """AddPartitionsToTxn v3 of ``topic``-0 for ``tid`` (producer 0, epoch 0): its error."""
    response = conn.request(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        {
            "v3_and_below_transactional_id": tid,
            "v3_and_below_producer_id": 0,
            "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [{"name": topic, "partitions": [0]}],
        },
        version=3,
    )
    ((answer,),) = [t.results_by_partition for t in response.results_by_topic_v3_and_below]
    return ErrorCode(answer.partition_error_code)


@dataclass
class OutPartition:
    """A broker whose partition of ``tid`` is out after a failed fsync of its COMPLETE."""

    broker: EmbeddedBroker
    tid: str
    other: str  # a transactional id of another, healthy partition


@pytest.fixture
def out_partition(
    topic: str, faults: StateLogFaults, caplog: pytest.LogCaptureFixture
) -> Iterator[OutPartition]:
    tid = f"{topic}-txn"
    count = int(FAST_START["transaction.state.log.num.partitions"])
    other = next(
        key
        for key in (f"{topic}-other-{i}" for i in range(100))
        if partition_for(key, count) != partition_for(tid, count)
    )
    with EmbeddedBroker(FAST_START) as embedded:
        create_topic(embedded.bootstrap_servers, topic, 1)
        producer = txn_producer(embedded.bootstrap_servers, tid)
        producer.begin_transaction()
        assert produce_flushed(producer, topic, [(0, b"x")]) == [None]
        caplog.set_level(logging.DEBUG, logger="oncelog.broker")
        faults.armed["fsync"] = 2  # the PREPARE_COMMIT's fsync passes, the COMPLETE's fails
        producer.commit_transaction(TIMEOUT_S)
        wait_until(lambda: partition_out(embedded, tid), TIMEOUT_S, "the partition taken out")
        producer.flush(0)
        del producer
        yield OutPartition(embedded, tid, other)


def test_find_coordinator_names_nobody_for_a_partition_that_is_out(
    out_partition: OutPartition,
) -> None:
    """Kafka answers a key whose partition has no leader COORDINATOR_NOT_AVAILABLE; before,
    this broker named itself, and the client came straight back to NOT_COORDINATOR."""
    with KafkaConnection(out_partition.broker.bootstrap_servers, timeout_s=TIMEOUT_S) as conn:
        for version in (1, 3, 4):
            assert find_coordinator(conn, out_partition.tid, version) == (
                ErrorCode.coordinator_not_available,
                -1,
            ), version
            assert find_coordinator(conn, out_partition.other, version) == (
                ErrorCode.none,
                0,
            ), version


def test_a_partition_that_is_out_logs_its_failure_once_not_each_retry(
    out_partition: OutPartition, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The failure is logged once, at ERROR; each refused request only at DEBUG (before,
    a WARNING per client retry, five a second from librdkafka)."""
    with KafkaConnection(out_partition.broker.bootstrap_servers, timeout_s=TIMEOUT_S) as conn:
        for _ in range(5):
            assert add_partition(conn, out_partition.tid, topic) == ErrorCode.not_coordinator
    records = caplog.get_records("setup") + caplog.get_records("call")
    failures = [
        r for r in records if r.levelno >= logging.ERROR and "storage failure" in r.getMessage()
    ]
    assert len(failures) == 1, failures
    refusals = [
        r
        for r in records
        if r.name == "oncelog.broker.transaction_coordinator"
        and r.getMessage().startswith(f"transactional id {out_partition.tid!r}")
    ]
    assert len(refusals) >= 5  # each refused request is still there to see, at DEBUG
    assert {r.levelno for r in refusals} == {logging.DEBUG}, [r.getMessage() for r in refusals]
