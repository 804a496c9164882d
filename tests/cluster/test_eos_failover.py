"""Exactly-once across failover, step by step with the raw protocol, on one 3-broker cluster
(replication factor 3) shared by the module; each test leaves every broker running and in
sync.

- A retry sent to the new leader of a batch the old leader acknowledged gets its original
  offset; the new leader knows the open transaction (LSO) and, once it is aborted, tells
  read_committed consumers what to skip. Control: the same retry without a producer id
  is stored twice.
- A producer fenced before its coordinator dies stays fenced by the new coordinator.
  Control: without a transactional id nothing fences the old instance.
- A coordinator that loses leadership while its markers are refused never completes the
  transaction a second time, and a marker with its old coordinator epoch is refused.
  Control: the same marker with the new epoch is accepted.
- Producer ids stay unique while brokers are killed and restarted. Control: two single
  nodes (no ZooKeeper) hand out the same ids.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.client.connection import KafkaConnection
from oncelog.coordinator_partitions import partition_for
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import control_marker, decode_records, iter_stored_batches
from oncelog.testing import EmbeddedBroker
from oncelog.testing.cluster import LocalCluster
from oncelog.transactions.log_records import decode_record
from oncelog.transactions.state import TxnState

from .coordination import (
    COORDINATOR_CONFIG,
    FAST_FAILOVER_CONFIG,
    INTERNAL_PARTITIONS,
    TRANSACTION,
    TXN_STATE,
    add_partitions,
    connect,
    end_txn,
    fetch_stored,
    init_producer_id,
    list_offset,
    produce,
    wait_for_coordinator,
    write_markers,
)
from .raw import wait_for_leaders_isr

pytestmark = pytest.mark.slow

CONFIG = {**FAST_FAILOVER_CONFIG, **COORDINATOR_CONFIG}
TIMEOUT_S = 60
FENCED = {ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch}


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("eos-failover"), brokers=3, config=CONFIG) as c:
        yield c


@pytest.fixture
def cluster(shared: LocalCluster) -> Iterator[LocalCluster]:
    """The shared cluster with every broker running and every replica in sync, before and
    after the test."""
    shared.wait_until_in_sync(90)
    yield shared
    for broker_id, broker in shared.brokers.items():
        if not broker.running:
            shared.restart(broker_id)
    shared.wait_for_brokers(shared.broker_ids, 90)
    shared.wait_until_in_sync(90)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(cluster: LocalCluster, name: str, replicas: list[int], min_isr: int) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    topic = NewTopic(
        name, 1, replica_assignment=[replicas], config={"min.insync.replicas": str(min_isr)}
    )
    admin.create_topics([topic])[name].result(TIMEOUT_S)
    assert cluster.wait_for_leader(name, 0) == replicas[0]


def retry_until(call: Callable[[], tuple[Any, ...]], accepted: set[Any], what: str) -> Any:
    """Call until its first value is in ``accepted`` (a broker may still be catching up)."""
    deadline = time.monotonic() + TIMEOUT_S
    result: tuple[Any, ...]
    while True:
        try:
            result = call()
            if result[0] in accepted:
                return result
        except Exception as exc:  # the broker is being elected or restarted
            result = (exc,)
        assert time.monotonic() < deadline, f"{what}: last answer {result}"
        time.sleep(0.2)


RETRIABLE = {
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator,
    ErrorCode.concurrent_transactions,
    ErrorCode.not_enough_replicas,
    # a leader ZooKeeper names that has not heard it from its watch yet
    ErrorCode.not_leader_or_follower,
}


def settled(call: Callable[[], ErrorCode]) -> ErrorCode:
    """The first answer that is not one a client retries (a coordinator loading, moving)."""
    code: ErrorCode = retry_until(
        lambda: (call(),), {c for c in ErrorCode if c not in RETRIABLE}, "a settled answer"
    )[0]
    return code


def values_in(stored: bytes) -> list[bytes]:
    return [
        bytes(r.value or b"")
        for position, header in iter_stored_batches(stored)
        if not header.is_control
        for r in decode_records(memoryview(stored)[position : position + header.size])
    ]


def markers_in(stored: bytes, producer_id: int) -> list[tuple[bool, int]]:
    """(committed, coordinator epoch) of each marker ``producer_id`` has in ``stored``."""
    found = []
    for position, header in iter_stored_batches(stored):
        if header.is_control and header.producer_id == producer_id:
            marker = control_marker(memoryview(stored)[position : position + header.size])
            assert marker is not None
            found.append(marker)
    return found


# -- a retry reaches the new leader ------------------------------------------------------------


def test_retry_to_the_new_leader_gets_the_original_offset(cluster: LocalCluster) -> None:
    topic = unique("retried")
    create_topic(cluster, topic, [1, 2, 3], min_isr=2)
    with connect(cluster, 1) as old:
        code, pid, epoch = init_producer_id(old)
        assert code == ErrorCode.none
        first = [b"a0", b"a1"]
        second = [b"b0", b"b1", b"b2"]
        assert produce(old, topic, 0, first, producer_id=pid, epoch=epoch, sequence=0) == (
            ErrorCode.none,
            0,
        )
        assert produce(old, topic, 0, second, producer_id=pid, epoch=epoch, sequence=2) == (
            ErrorCode.none,
            2,
        )
        assert produce(old, topic, 0, [b"plain"]) == (ErrorCode.none, 5)
    # A transaction left open on the partition: the LSO stays at its first offset.
    tid = unique("open")
    coordinator = wait_for_coordinator(cluster, tid, TRANSACTION)
    with connect(cluster, coordinator) as conn:
        code, txn_pid, txn_epoch = init_producer_id(conn, tid)
        assert code == ErrorCode.none
        assert add_partitions(conn, tid, txn_pid, txn_epoch, [(topic, 0)]) == {
            (topic, 0): ErrorCode.none
        }
    with connect(cluster, 1) as old:
        assert produce(
            old,
            topic,
            0,
            [b"open"],
            producer_id=txn_pid,
            epoch=txn_epoch,
            sequence=0,
            transactional_id=tid,
        ) == (ErrorCode.none, 6)
    cluster.wait_for_isr(topic, 0, [1, 2, 3])

    cluster.kill(1)
    new_leader = cluster.wait_for_leader(topic, 0, not_in={1})
    with connect(cluster, new_leader) as new:
        # The first answer the new leader gives already knows the open transaction.
        assert retry_until(
            lambda: list_offset(new, topic, 0, read_committed=True),
            {ErrorCode.none},
            "ListOffsets on the new leader",
        ) == (ErrorCode.none, 6)
        assert list_offset(new, topic, 0, read_committed=False) == (ErrorCode.none, 7)
        # Retries of acknowledged batches: their original offsets, nothing appended.
        assert produce(new, topic, 0, second, producer_id=pid, epoch=epoch, sequence=2) == (
            ErrorCode.none,
            2,
        )
        assert produce(new, topic, 0, first, producer_id=pid, epoch=epoch, sequence=0) == (
            ErrorCode.none,
            0,
        )
        assert produce(new, topic, 0, [b"c0"], producer_id=pid, epoch=epoch, sequence=5) == (
            ErrorCode.none,
            7,
        )
        # Control: a retry without a producer id is stored again.
        assert produce(new, topic, 0, [b"plain"]) == (ErrorCode.none, 8)
    coordinator = wait_for_coordinator(cluster, tid, TRANSACTION, not_in={1})
    with connect(cluster, coordinator) as conn:
        # (the coordinator may have moved too: EndTxn is retried there as a client would)
        assert retry_until(
            lambda: (end_txn(conn, tid, txn_pid, txn_epoch, commit=False),),
            {ErrorCode.none},
            "EndTxn(abort)",
        ) == (ErrorCode.none,)
    with connect(cluster, new_leader) as new:
        retry_until(
            lambda: (list_offset(new, topic, 0, read_committed=True)[1] == 10,),
            {True},
            "the LSO past the abort marker",
        )
        _, stored, aborted = fetch_stored(new, topic, 0, read_committed=True)
    assert aborted == [(txn_pid, 6)]  # what read_committed consumers skip
    values = values_in(stored)
    assert values == [b"a0", b"a1", b"b0", b"b1", b"b2", b"plain", b"open", b"c0", b"plain"]
    assert Counter(values)[b"plain"] == 2  # the control's duplicate


# -- zombie fencing ------------------------------------------------------------------------------


def test_a_fenced_producer_stays_fenced_after_its_coordinator_dies(cluster: LocalCluster) -> None:
    tid, topic = unique("zombie"), unique("fenced")
    create_topic(cluster, topic, [1, 2, 3], min_isr=2)
    coordinator = wait_for_coordinator(cluster, tid, TRANSACTION)
    leader = 1
    with connect(cluster, coordinator) as conn:
        code, pid, zombie = init_producer_id(conn, tid)
        assert code == ErrorCode.none
        assert add_partitions(conn, tid, pid, zombie, [(topic, 0)])[(topic, 0)] == ErrorCode.none
    with connect(cluster, leader) as conn:
        assert (
            produce(
                conn,
                topic,
                0,
                [b"zombie-0"],
                producer_id=pid,
                epoch=zombie,
                sequence=0,
                transactional_id=tid,
            )[0]
            == ErrorCode.none
        )
        # Control: an idempotent producer (no transactional id) has nothing to fence it.
        code, plain_pid, plain_epoch = init_producer_id(conn)
        assert (
            produce(
                conn, topic, 0, [b"plain-0"], producer_id=plain_pid, epoch=plain_epoch, sequence=0
            )[0]
            == ErrorCode.none
        )
    with connect(cluster, coordinator) as conn:
        # A new instance: its InitProducerId aborts the zombie's transaction, bumps the epoch.
        code, new_pid, current = retry_until(
            lambda: init_producer_id(conn, tid), {ErrorCode.none}, "the new instance's init"
        )
    assert new_pid == pid and current > zombie

    cluster.kill(coordinator)
    new_coordinator = wait_for_coordinator(cluster, tid, TRANSACTION, not_in={coordinator})
    with connect(cluster, new_coordinator) as conn:
        add = [(topic, 0)]
        assert settled(lambda: add_partitions(conn, tid, pid, zombie, add)[add[0]]) in FENCED
        assert settled(lambda: end_txn(conn, tid, pid, zombie, commit=True)) in FENCED
        assert settled(lambda: add_partitions(conn, tid, pid, current, add)[add[0]]) == (
            ErrorCode.none
        )
    leader = cluster.wait_for_leader(topic, 0, not_in={coordinator})
    with connect(cluster, leader) as conn:
        zombie_write = settled(
            lambda: produce(
                conn,
                topic,
                0,
                [b"zombie-1"],
                producer_id=pid,
                epoch=zombie,
                sequence=1,
                transactional_id=tid,
            )[0]
        )
        assert zombie_write in FENCED
        assert (
            produce(
                conn,
                topic,
                0,
                [b"current-0"],
                producer_id=pid,
                epoch=current,
                sequence=0,
                transactional_id=tid,
            )[0]
            == ErrorCode.none
        )
        assert (
            produce(
                conn, topic, 0, [b"plain-1"], producer_id=plain_pid, epoch=plain_epoch, sequence=1
            )[0]
            == ErrorCode.none
        )  # the control's zombie still writes
    with connect(cluster, new_coordinator) as conn:
        assert end_txn(conn, tid, pid, current, commit=True) == ErrorCode.none
    with connect(cluster, leader) as conn:
        retry_until(
            lambda: (
                list_offset(conn, topic, 0, read_committed=True)
                == list_offset(conn, topic, 0, read_committed=False),
            ),
            {True},
            "the commit marker",
        )
        _, stored, aborted = fetch_stored(conn, topic, 0, read_committed=True)
    assert values_in(stored) == [b"zombie-0", b"plain-0", b"current-0", b"plain-1"]
    assert [pid_ for pid_, _ in aborted] == [pid]  # zombie-0 is skipped by read_committed


# -- a coordinator loses leadership while writing markers ------------------------------------------


def txn_log(cluster: LocalCluster, tid: str) -> list[TxnState]:
    """The states written for ``tid`` in its __transaction_state partition, in order."""
    partition = partition_for(tid, INTERNAL_PARTITIONS)
    leader = cluster.wait_for_leader(TXN_STATE, partition)
    with connect(cluster, leader) as conn:
        code, stored, _ = fetch_stored(conn, TXN_STATE, partition)
    assert code == ErrorCode.none
    states = []
    for position, header in iter_stored_batches(stored):
        if header.is_control:
            continue
        for r in decode_records(memoryview(stored)[position : position + header.size]):
            record = decode_record(bytes(r.key or b""), None if r.value is None else bytes(r.value))
            if record is not None and record.transactional_id == tid and record.metadata:
                states.append(record.metadata.state)
    return states


def test_a_coordinator_that_lost_leadership_while_writing_markers_completes_nothing(
    cluster: LocalCluster,
) -> None:
    """The participant refuses markers (its ISR is below min.insync.replicas), so the
    coordinator keeps retrying them; then it is paused past its session and another
    broker takes its partition over and completes the commit."""
    tid, topic = unique("late"), unique("stuck")
    old = wait_for_coordinator(cluster, tid, TRANSACTION)
    txn_partition = partition_for(tid, INTERNAL_PARTITIONS)
    old_epoch = cluster.partition_state(TXN_STATE, txn_partition)["leader_epoch"]
    leader, follower = (b for b in cluster.broker_ids if b != old)
    create_topic(cluster, topic, [leader, follower], min_isr=2)
    with connect(cluster, old) as conn:
        _, pid, epoch = init_producer_id(conn, tid)
        assert add_partitions(conn, tid, pid, epoch, [(topic, 0)])[(topic, 0)] == ErrorCode.none
    with connect(cluster, leader) as conn:
        assert (
            produce(
                conn,
                topic,
                0,
                [b"v"],
                producer_id=pid,
                epoch=epoch,
                sequence=0,
                transactional_id=tid,
            )[0]
            == ErrorCode.none
        )
    cluster.kill(follower)
    cluster.wait_for_isr(topic, 0, [leader])  # markers now get NOT_ENOUGH_REPLICAS ...
    wait_for_leaders_isr(cluster, leader, topic, [leader])  # ... once the leader knows it
    cluster.wait_for_isr(TXN_STATE, txn_partition, sorted([old, leader]))
    with connect(cluster, old) as conn:
        assert end_txn(conn, tid, pid, epoch, commit=True) == ErrorCode.none
    time.sleep(1.0)  # the old coordinator's markers are refused, retried, refused...
    with connect(cluster, leader) as conn:
        assert list_offset(conn, topic, 0, read_committed=True) == (ErrorCode.none, 0)
    cluster.pause(old)
    try:
        assert cluster.wait_for_leader(TXN_STATE, txn_partition, not_in={old}) == leader
        new_epoch = cluster.partition_state(TXN_STATE, txn_partition)["leader_epoch"]
        assert new_epoch > old_epoch
        cluster.restart(follower)  # the ISR grows back: the new coordinator's markers pass
        with connect(cluster, leader) as conn:
            retry_until(
                lambda: (list_offset(conn, topic, 0, read_committed=True)[1] == 2,),
                {True},
                "the new coordinator's commit marker",
            )
            late = write_markers(conn, pid, epoch, True, old_epoch, [(topic, 0)])
            assert late == {(topic, 0): ErrorCode.transaction_coordinator_fenced}
            # Control: the same marker with the current coordinator epoch is accepted.
            current = write_markers(conn, pid, epoch, True, new_epoch, [(topic, 0)])
            assert current == {(topic, 0): ErrorCode.none}
    finally:
        cluster.resume(old)
    # The old coordinator, running again, learns its session is gone; wait for it to be
    # back as a follower, then look at what it could have written.
    cluster.wait_for_brokers(cluster.broker_ids, TIMEOUT_S)
    cluster.wait_until_in_sync(90)
    time.sleep(1.0)
    states = txn_log(cluster, tid)
    assert states.count(TxnState.PREPARE_COMMIT) == 1, states
    assert states.count(TxnState.COMPLETE_COMMIT) == 1, states
    assert states.index(TxnState.PREPARE_COMMIT) < states.index(TxnState.COMPLETE_COMMIT)
    with connect(cluster, cluster.leader(topic, 0) or leader) as conn:
        _, stored, aborted = fetch_stored(conn, topic, 0, read_committed=True)
    assert values_in(stored) == [b"v"] and not aborted
    epochs = {coordinator_epoch for _, coordinator_epoch in markers_in(stored, pid)}
    assert epochs == {new_epoch}, "a marker of the old coordinator epoch was written"


# -- producer ids --------------------------------------------------------------------------------


def hammer_init_producer_id(
    addresses: dict[int, str], ids: list[int], stop: threading.Event, transactional: bool
) -> None:
    """InitProducerId to every broker in turn until stopped, through kills and restarts."""
    broker_ids = sorted(addresses)
    for n in range(1_000_000):
        if stop.is_set():
            return
        broker_id = broker_ids[n % len(broker_ids)]
        try:
            with KafkaConnection(addresses[broker_id], timeout_s=5) as conn:
                for i in range(20):
                    tid = f"pid-{uuid.uuid4().hex[:8]}-{i}" if transactional else None
                    code, pid, _ = init_producer_id(conn, tid)
                    if code == ErrorCode.none:
                        ids.append(pid)
        except Exception:
            time.sleep(0.05)  # that broker is down, or is not the coordinator


def test_producer_ids_stay_unique_while_brokers_die(cluster: LocalCluster) -> None:
    rng = random.Random(1100)
    addresses = {b: cluster.address(b) for b in cluster.broker_ids}
    ids: list[int] = []
    stop = threading.Event()
    threads = [
        threading.Thread(target=hammer_init_producer_id, args=(addresses, ids, stop, t))
        for t in (False, False, True)
    ]
    for thread in threads:
        thread.start()
    try:
        for _ in range(4):
            time.sleep(1.0)
            victim = rng.choice(cluster.broker_ids)
            cluster.kill(victim)
            time.sleep(0.5)
            cluster.restart(victim)  # a new run: the rest of its block is never used
            cluster.wait_for_brokers([victim], TIMEOUT_S)
        time.sleep(1.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join(TIMEOUT_S)
    duplicates = [pid for pid, n in Counter(ids).items() if n > 1]
    assert len(ids) > 300, f"too few answers: {len(ids)}"
    assert not duplicates, f"{len(duplicates)} producer ids handed out twice: {duplicates[:5]}"
    assert len({pid // 1000 for pid in ids}) >= 4  # restarted brokers took new blocks


def test_control_single_nodes_hand_out_the_same_producer_ids(tmp_path: Path) -> None:
    """Without ZooKeeper's blocks two brokers' ids collide: what the test above would see."""
    ids: list[int] = []
    for name in ("a", "b"):
        with EmbeddedBroker(data_dir=tmp_path / name) as broker:
            with KafkaConnection(broker.bootstrap_servers) as conn:
                ids += [init_producer_id(conn)[1] for _ in range(5)]
    assert [pid for pid, n in Counter(ids).items() if n > 1]
