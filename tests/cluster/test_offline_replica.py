"""A replica whose log fails goes offline, and its partition's leadership moves.

After a failed fsync, or a torn write that could not be cut back, a log is offline until
its broker restarts (tests/storage/test_failed_fsync.py says why). On one node that stops
the partition. In a cluster it must not: Kafka takes the failed log directory offline and
its controller elects another leader from the ISR and drops the replica from the ISR, so
the producers go on against the new leader. Here the leader is an in-process broker
(broker 3, the faults injected from the test into its system calls on one partition's
files) beside two broker processes, and an idempotent confluent-kafka producer sends
numbered records with acks=all throughout.

Every acknowledged number must be in the new leader's log exactly once, at the offset it
was acknowledged with, and broker 3 refuses the partition's produce with
KAFKA_STORAGE_ERROR, as Kafka refuses a partition of an offline log directory. The
control: the same fault with the broker's offline handling switched off (the partition no
longer tells the replica manager) leaves the failed broker leader and the producer
acknowledged nothing more: what every partition led by a broker with a failed disk did
before. Broker 3 keeps each test's failed log to the end of the module; each test fails a
partition of its own.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import oncelog.broker.durability as durability
import oncelog.storage.log as log_module
from oncelog.client.connection import KafkaConnection
from oncelog.coordinator_partitions import partition_for
from oncelog.protocol.errors import ErrorCode
from oncelog.testing import EmbeddedBroker
from oncelog.testing.cluster import LocalCluster

from ..broker.raw_requests import metadata
from ..fsync_pools import PythonFsyncPool
from ..storage.failures import file_of
from .coordination import (
    COORDINATOR_CONFIG,
    FAST_FAILOVER_CONFIG,
    TRANSACTION,
    TXN_STATE,
    wait_for_coordinator,
)
from .failover import NumberedProducer, read_numbered
from .raw import fetch, produce

FAILING_BROKER = 3
TIMEOUT_S = 60
CONTROL_WAIT_S = 6.0
CONTROL_DELIVERY_TIMEOUT_MS = 10_000  # the control's records are never acknowledged
# Three partitions of the transaction log for each broker to lead: each coordinator test
# fails one of broker 3's.
TXN_STATE_PARTITIONS = 9


class _PartitionFiles:
    """Whether a descriptor is one of a partition directory's files."""

    def __init__(self, directory: Path) -> None:
        self.directory = f"{directory}{os.sep}"

    def __contains__(self, fd: object) -> bool:
        return isinstance(fd, int) and file_of(fd).startswith(self.directory)


class FailingFsync:
    """Once armed, ``fsync_together`` of the log module fails with EIO for the partition's
    files (the broker in this process is the only one using it)."""

    def __init__(self, directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.files = _PartitionFiles(directory)
        self.armed = False
        self.fired = 0
        self._real = log_module.fsync_together
        monkeypatch.setattr(log_module, "fsync_together", self)

    def __call__(self, fds: list[int]) -> None:
        if self.armed and any(fd in self.files for fd in fds):
            self.fired += 1
            raise OSError(errno.EIO, "Input/output error (injected)")
        self._real(fds)


class FullDisk:
    """Once armed, ``os.write`` to the partition's files fails with ENOSPC, but the cut that
    takes a failed write back works: the log itself stays online."""

    def __init__(self, directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.files = _PartitionFiles(directory)
        self.armed = False
        self.fired = 0
        self._write = os.write
        monkeypatch.setattr(os, "write", self.write)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        if self.armed and fd in self.files:
            self.fired += 1
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        return self._write(fd, data)


class TornWrites(FullDisk):
    """Once armed, ``os.write`` to the partition's files fails with ENOSPC, and so does the
    ``ftruncate`` that would cut the failed write back: the segment is torn and its log
    offline at the append itself, with no fsync involved."""

    def __init__(self, directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__(directory, monkeypatch)
        self._ftruncate = os.ftruncate
        monkeypatch.setattr(os, "ftruncate", self.ftruncate)

    def ftruncate(self, fd: int, length: int) -> None:
        if self.armed and fd in self.files:
            raise OSError(errno.EIO, "Input/output error (injected)")
        self._ftruncate(fd, length)


FAULTS: dict[str, type[FailingFsync] | type[TornWrites]] = {
    "fsync": FailingFsync,
    "torn-write": TornWrites,
}


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LocalCluster, EmbeddedBroker]]:
    """Brokers 1 and 2 as processes, broker 3 in this process, all on one ZooKeeper. Each
    test fails the log of its own topic's partition only."""
    tmp_path = tmp_path_factory.mktemp("offline-replica")
    config = {
        **FAST_FAILOVER_CONFIG,
        **COORDINATOR_CONFIG,
        "transaction.state.log.num.partitions": str(TXN_STATE_PARTITIONS),
    }
    with LocalCluster(tmp_path / "cluster", brokers=2, config=config) as local:
        config = {
            **local.config,
            "broker.id": str(FAILING_BROKER),
            "zookeeper.connect": local.zookeeper.connect_string,
        }
        with pytest.MonkeyPatch.context() as patched:
            # its flushes fsync through ``fsync_together``, where FailingFsync fails them
            patched.setattr(durability, "FsyncPool", PythonFsyncPool)
            with EmbeddedBroker(config=config, data_dir=tmp_path / "broker-3") as embedded:
                local.wait_for_brokers([1, 2, FAILING_BROKER], TIMEOUT_S)
                yield local, embedded


def _create_led_by_the_failing_broker(local: LocalCluster, topic: str) -> None:
    _create(local, topic, [FAILING_BROKER, 1, 2])


def _create(local: LocalCluster, topic: str, replicas: list[int]) -> None:
    admin = AdminClient({"bootstrap.servers": local.bootstrap_servers})
    new = NewTopic(topic, 1, replica_assignment=[replicas], config={"min.insync.replicas": "2"})
    admin.create_topics([new])[topic].result(TIMEOUT_S)
    assert local.wait_for_leader(topic, 0) == replicas[0]
    local.wait_for_isr(topic, 0, tuple(replicas), TIMEOUT_S)


def _producing_to_a_failing_leader(
    cluster: tuple[LocalCluster, EmbeddedBroker],
    topic: str,
    fault: str,
    monkeypatch: pytest.MonkeyPatch,
    delivery_timeout_ms: int = 120_000,
) -> tuple[FailingFsync | TornWrites, NumberedProducer]:
    """``topic`` led by broker 3, where ``fault`` strikes its partition once armed, and an
    idempotent acks=all producer sending numbers to it."""
    local, embedded = cluster
    _create_led_by_the_failing_broker(local, topic)
    injected = FAULTS[fault](embedded.data_dir / f"{topic}-0", monkeypatch)
    producer = NumberedProducer(
        "confluent",
        embedded.bootstrap_servers,
        topic,
        "all",
        True,
        delivery_timeout_ms=delivery_timeout_ms,
    )
    return injected, producer.start()


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_the_leadership_moves_and_every_acknowledged_record_is_kept_once(
    cluster: tuple[LocalCluster, EmbeddedBroker], fault: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    local, embedded = cluster
    topic = f"offline-replica-{fault}"
    injected, producer = _producing_to_a_failing_leader(cluster, topic, fault, monkeypatch)
    try:
        producer.wait_for_progress(200)
        injected.armed = True
        producer.wait_for_progress(500, timeout_s=TIMEOUT_S)
    finally:
        producer.stop()
    assert injected.fired >= 1

    leader = local.wait_for_leader(topic, 0)
    assert leader in (1, 2)
    state = local.partition_state(topic, 0)
    assert state is not None and FAILING_BROKER not in state["isr"]
    assert f"{FAILING_BROKER}:{topic}:0" in local.znode_children("/brokers/offline_replicas")
    with KafkaConnection(local.address(leader)) as conn:
        described = metadata(conn, topic).partitions[0]
    assert (described.leader_id, list(described.offline_replicas)) == (leader, [FAILING_BROKER])
    with KafkaConnection(embedded.bootstrap_servers) as conn:
        assert produce(conn, topic, [b"late"])[0] == ErrorCode.kafka_storage_error  # as Kafka
        # A consumer is sent to look the leader up again (aiokafka's does not on a storage
        # error: see handlers/fetch.py).
        assert fetch(conn, topic, 0)[0] == ErrorCode.not_leader_or_follower

    numbers = read_numbered(local.bootstrap_servers, topic)
    assert not producer.errors, producer.errors[-5:]
    assert len(numbers) == len(set(numbers)), "a number was written twice"
    for number, offset in producer.acked.items():
        assert numbers[offset] == number, f"acknowledged {number} at {offset}"


def test_control_without_the_offline_handling_the_partition_stops(
    cluster: tuple[LocalCluster, EmbeddedBroker], monkeypatch: pytest.MonkeyPatch
) -> None:
    local, embedded = cluster
    topic = "offline-replica-control"
    fsync, producer = _producing_to_a_failing_leader(
        cluster, topic, "fsync", monkeypatch, delivery_timeout_ms=CONTROL_DELIVERY_TIMEOUT_MS
    )
    try:
        # Acknowledged records mean broker 3 holds the replica: ZooKeeper names it leader
        # before its LeaderAndIsr has made the replica here.
        producer.wait_for_progress(200)
        cluster_node = embedded.broker.cluster if embedded.broker is not None else None
        assert cluster_node is not None and cluster_node.replicas is not None
        partition = cluster_node.replicas.replicas[(topic, 0)].partition
        monkeypatch.setattr(partition, "on_offline", None)  # the mechanism, switched off
        fsync.armed = True
        time.sleep(1.0)  # what was in flight when the fault came is answered by now
        acked = len(producer.acked)
        time.sleep(CONTROL_WAIT_S)
        assert len(producer.acked) == acked, "the partition went on without the mechanism"
        assert local.leader(topic, 0) == FAILING_BROKER
    finally:
        producer.stop()
    assert fsync.fired >= 1


COORDINATOR_FAULTS: dict[str, type[FailingFsync] | type[FullDisk]] = {
    "fsync": FailingFsync,
    "full-disk": FullDisk,
    "torn-write": TornWrites,
}


@pytest.mark.parametrize("fault", sorted(COORDINATOR_FAULTS))
def test_a_coordinator_whose_log_failed_moves_and_the_transactions_go_on(
    cluster: tuple[LocalCluster, EmbeddedBroker], fault: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failed log is broker 3's replica of the ``__transaction_state`` partition that
    coordinates the producer's transactional id. Before, the coordinator partition was out
    on broker 3 until its restart while FindCoordinator kept naming broker 3: the producer
    could commit nothing more. Now the partition's leadership moves, the new leader loads
    the coordinator from its replica, and the producer goes on; every transaction it was
    told committed is read once with read_committed, and none it aborted. A full disk
    leaves the log online (the failed write is cut back), so the coordinator takes it
    offline itself; before, that fault kept the partition out on broker 3."""
    local, embedded = cluster
    topic = f"offline-coordinator-data-{fault}"
    _create(local, topic, [1, 2, FAILING_BROKER])
    wait_for_coordinator(local, "probe", TRANSACTION)  # creates the internal topic
    led_by_3 = [
        p
        for p in range(TXN_STATE_PARTITIONS)
        if local.wait_for_leader(TXN_STATE, p) == FAILING_BROKER
    ]
    assert led_by_3, "placement gave broker 3 no partition of the transaction log"
    tid = next(
        f"txn-{i}"
        for i in range(1000)
        if partition_for(f"txn-{i}", TXN_STATE_PARTITIONS) == led_by_3[0]
    )
    assert wait_for_coordinator(local, tid, TRANSACTION) == FAILING_BROKER
    injected = COORDINATOR_FAULTS[fault](
        embedded.data_dir / f"{TXN_STATE}-{led_by_3[0]}", monkeypatch
    )

    producer = Producer({"bootstrap.servers": local.bootstrap_servers, "transactional.id": tid})
    producer.init_transactions(TIMEOUT_S)
    committed: list[int] = []
    aborted: list[int] = []
    for number in range(TRANSACTIONS):
        if number == TRANSACTIONS // 3:
            injected.armed = True
        (committed if _transaction(producer, topic, number) else aborted).append(number)
    producer.flush(TIMEOUT_S)
    assert injected.fired >= 1
    assert wait_for_coordinator(local, tid, TRANSACTION, not_in=[FAILING_BROKER]) in (1, 2)
    assert len(committed) >= TRANSACTIONS - 3, f"aborted {aborted}"

    read = _read_committed(local.bootstrap_servers, topic)
    expected = [f"{n}-{i}" for n in committed for i in range(RECORDS_PER_TRANSACTION)]
    assert read == expected


TRANSACTIONS = 15
RECORDS_PER_TRANSACTION = 10


def _transaction(producer: Producer, topic: str, number: int) -> bool:
    """One transaction of RECORDS_PER_TRANSACTION records; whether it committed (an error
    that requires an abort aborts it; a retriable one retries the commit)."""
    producer.begin_transaction()
    for i in range(RECORDS_PER_TRANSACTION):
        producer.produce(topic, f"{number}-{i}".encode(), partition=0)
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            producer.commit_transaction(TIMEOUT_S)
            return True
        except KafkaException as exc:
            error = exc.args[0]
            if error.txn_requires_abort():
                producer.abort_transaction(TIMEOUT_S)
                return False
            if not error.retriable() or time.monotonic() > deadline:
                raise


def _read_committed(servers: str, topic: str) -> list[str]:
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": "offline-coordinator-check",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), TIMEOUT_S)[1]
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[str] = []
        deadline = time.monotonic() + TIMEOUT_S
        position = 0
        while position < end:
            assert time.monotonic() < deadline, f"read up to {position} of {end}"
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                assert message.error() is None, message.error()
                values.append(message.value().decode())
            position = consumer.position([TopicPartition(topic, 0)])[0].offset
        return values
    finally:
        consumer.close()
