"""Transaction and group coordinators on a 3-broker cluster (one cluster for the module):
found where their partition is led, their topics replicated as Kafka creates them, markers
written across brokers, batches verified with a coordinator on another broker, producer
ids unique across brokers."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterator, Mapping

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from oncelog.coordinator_partitions import partition_for
from oncelog.protocol.errors import ErrorCode
from oncelog.testing.cluster import LocalCluster

from ..eos.ctp_worker import know_partitions_before_joining
from .coordination import (
    COORDINATOR_CONFIG,
    GROUP,
    INTERNAL_PARTITIONS,
    OFFSETS,
    TRANSACTION,
    TXN_STATE,
    add_offsets,
    add_partitions,
    connect,
    end_txn,
    find_coordinator,
    init_producer_id,
    list_offset,
    produce,
    stable_offset,
    txn_offset_commit,
    wait_for_coordinator,
    write_markers,
)

CONFIG = COORDINATOR_CONFIG
TIMEOUT_S = 60


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("coordinators"), brokers=3, config=CONFIG) as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        # Three partitions, one led by each broker: every transaction touches all three.
        spread = NewTopic("spread", 3, replica_assignment=[[1, 2, 3], [2, 3, 1], [3, 1, 2]])
        create_once_every_broker_is_live(admin, spread)
        yield c


def create_once_every_broker_is_live(admin: AdminClient, topic: NewTopic) -> None:
    """CreateTopics with an explicit assignment, again while the controller has not seen
    every broker registered yet (INVALID_REPLICA_ASSIGNMENT, as Kafka answers it)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            admin.create_topics([topic])[topic.topic].result(TIMEOUT_S)
            return
        except KafkaException as exc:
            code = exc.args[0].code()
            if code != KafkaError.INVALID_REPLICA_ASSIGNMENT or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def read_values(
    servers: str, topic: str, isolation: str, settings: Mapping[str, str] | None = None
) -> list[bytes]:
    """Every record of the topic's three partitions; ``settings``: more consumer keys
    (security)."""
    consumer = Consumer(
        {
            **(settings or {}),
            "bootstrap.servers": servers,
            "group.id": unique("reader"),
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    values: list[bytes] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(at_end) < 3:
            assert time.monotonic() < deadline, "did not reach the end of every partition"
            for m in consumer.consume(500, 0.5):
                if m.error() is not None:
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    at_end.add(m.partition())
                else:
                    at_end.discard(m.partition())
                    values.append(m.value())
    finally:
        consumer.close()
    return values


def test_find_coordinator_names_the_leader_of_the_keys_partition(cluster: LocalCluster) -> None:
    for key, key_type, topic in (
        (unique("group"), GROUP, OFFSETS),
        (unique("txn"), TRANSACTION, TXN_STATE),
    ):
        coordinator = wait_for_coordinator(cluster, key, key_type)
        assert coordinator == cluster.leader(topic, partition_for(key, INTERNAL_PARTITIONS))
        for broker_id in cluster.broker_ids:  # every broker gives the same answer
            with connect(cluster, broker_id) as conn:
                assert find_coordinator(conn, key, key_type) == (ErrorCode.none, coordinator)
    with connect(cluster, 1) as conn:
        assert find_coordinator(conn, "", TRANSACTION)[0] == ErrorCode.invalid_request


def test_internal_topics_are_replicated_as_kafka_creates_them(cluster: LocalCluster) -> None:
    wait_for_coordinator(cluster, unique("group"), GROUP)
    wait_for_coordinator(cluster, unique("txn"), TRANSACTION)
    for topic in (OFFSETS, TXN_STATE):
        for p in range(INTERNAL_PARTITIONS):
            state = cluster.partition_state(topic, p)
            assert state is not None and sorted(state["isr"]) == [1, 2, 3], (topic, p, state)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    resources = [ConfigResource("topic", TXN_STATE), ConfigResource("topic", OFFSETS)]
    described = {r.name: f.result(TIMEOUT_S) for r, f in admin.describe_configs(resources).items()}
    txn = described[TXN_STATE]
    assert txn["min.insync.replicas"].value == "2"  # transaction.state.log.min.isr
    assert txn["cleanup.policy"].value == "compact"
    assert txn["unclean.leader.election.enable"].value == "false"
    assert described[OFFSETS]["cleanup.policy"].value == "compact"


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_consumer_group_commits_and_resumes_on_a_cluster(
    cluster: LocalCluster, client: str
) -> None:
    topic, group = unique("grouped"), unique("group")
    servers = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": servers})
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(TIMEOUT_S)
    producer = Producer({"bootstrap.servers": servers, "enable.idempotence": True})
    for i in range(90):
        producer.produce(topic, str(i).encode(), partition=i % 3)
    assert producer.flush(TIMEOUT_S) == 0
    if client == "confluent":
        consumer = Consumer(
            {
                "bootstrap.servers": servers,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe([topic])
        seen = 0
        deadline = time.monotonic() + TIMEOUT_S
        while seen < 60:
            assert time.monotonic() < deadline
            seen += len([m for m in consumer.consume(60 - seen, 1.0) if m.error() is None])
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition(topic, p) for p in range(3)], TIMEOUT_S)
        consumer.close()
        total = sum(max(tp.offset, 0) for tp in committed)
    else:
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(
            topic,
            bootstrap_servers=servers.split(","),
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        # kafka-python 3.0.12 loses a rebalance whose SyncGroup outlives its poll when its
        # first join assigned nothing (metadata not yet known): see ctp_worker.
        know_partitions_before_joining(consumer, topic, 3)
        seen = 0
        deadline = time.monotonic() + TIMEOUT_S
        while seen < 60:
            assert time.monotonic() < deadline
            batches = consumer.poll(timeout_ms=1000, max_records=60 - seen)
            seen += sum(len(v) for v in batches.values())
        consumer.commit()
        total = sum(consumer.committed(tp) or 0 for tp in consumer.assignment())
        consumer.close()
    assert total == 60
    # The group's offsets are on its coordinator's partition, replicated on all three.
    coordinator = wait_for_coordinator(cluster, group, GROUP)
    assert coordinator in cluster.broker_ids
    resumed = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",  # for a partition nothing was committed for
        }
    )
    resumed.subscribe([topic])
    rest = 0
    deadline = time.monotonic() + TIMEOUT_S
    while rest < 30:
        assert time.monotonic() < deadline, f"resumed at the committed offsets, got {rest}"
        rest += len([m for m in resumed.consume(30, 1.0) if m.error() is None])
    assert not [m for m in resumed.consume(10, 1.0) if m.error() is None]
    resumed.close()


def test_transactions_commit_and_abort_across_brokers(cluster: LocalCluster) -> None:
    """The coordinator is one broker; the three partitions are led by three: markers go
    over the wire to the two others."""
    servers = cluster.bootstrap_servers
    tid = unique("txn")
    producer = Producer({"bootstrap.servers": servers, "transactional.id": tid})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    for p in range(3):
        producer.produce("spread", f"committed-{tid}-{p}".encode(), partition=p)
    producer.commit_transaction(TIMEOUT_S)
    producer.begin_transaction()
    for p in range(3):
        producer.produce("spread", f"aborted-{tid}-{p}".encode(), partition=p)
    producer.flush(TIMEOUT_S)
    producer.abort_transaction(TIMEOUT_S)
    committed = [v for v in read_values(servers, "spread", "read_committed") if tid.encode() in v]
    raw = [v for v in read_values(servers, "spread", "read_uncommitted") if tid.encode() in v]
    assert sorted(committed) == sorted(f"committed-{tid}-{p}".encode() for p in range(3))
    assert sorted(raw) == sorted(
        f"{kind}-{tid}-{p}".encode() for kind in ("committed", "aborted") for p in range(3)
    )
    for p in range(3):  # no transaction left open: every LSO is back at the high watermark
        with connect(cluster, p + 1) as conn:
            assert list_offset(conn, "spread", p, read_committed=True) == list_offset(
                conn, "spread", p, read_committed=False
            )


def test_batches_are_verified_with_a_coordinator_on_another_broker(cluster: LocalCluster) -> None:
    """KIP-890 part 1: a partition the transaction never added refuses its batch, even
    when its leader must ask the coordinator on another broker."""
    tid = unique("verified")
    coordinator = wait_for_coordinator(cluster, tid, TRANSACTION)
    with connect(cluster, coordinator) as conn:
        code, pid, epoch = init_producer_id(conn, tid)
        assert code == ErrorCode.none
        # Partition p is led by broker p + 1: one added, one not, both led elsewhere.
        added = 1 if coordinator != 1 else 2
        assert add_partitions(conn, tid, pid, epoch, [("spread", added - 1)]) == {
            ("spread", added - 1): ErrorCode.none
        }
    not_added = next(p for p in range(3) if p + 1 not in (coordinator, added))
    assert coordinator not in (added, not_added + 1)
    with connect(cluster, not_added + 1) as conn:
        refused = produce(
            conn,
            "spread",
            not_added,
            [b"x"],
            producer_id=pid,
            epoch=epoch,
            sequence=0,
            transactional_id=tid,
        )
        assert refused[0] == ErrorCode.invalid_txn_state
    with connect(cluster, added) as conn:
        accepted = produce(
            conn,
            "spread",
            added - 1,
            [b"y"],
            producer_id=pid,
            epoch=epoch,
            sequence=0,
            transactional_id=tid,
        )
        assert accepted[0] == ErrorCode.none
    with connect(cluster, coordinator) as conn:
        assert end_txn(conn, tid, pid, epoch, commit=False) == ErrorCode.none


def test_offsets_are_verified_with_a_coordinator_on_another_broker(
    cluster: LocalCluster,
) -> None:
    """KIP-890 part 1 for TxnOffsetCommit: the group's coordinator asks the transaction's
    (another broker) whether the offsets partition is in the transaction; before
    AddOffsetsToTxn it is not, and nothing is left open on the offsets partition."""
    tid = unique("offsets")
    coordinator = wait_for_coordinator(cluster, tid, TRANSACTION)
    group = next(
        g
        for g in (unique("verified-group") for _ in range(20))
        if wait_for_coordinator(cluster, g, GROUP) != coordinator
    )
    group_coordinator = wait_for_coordinator(cluster, group, GROUP)
    with connect(cluster, coordinator) as conn:
        code, pid, epoch = init_producer_id(conn, tid)
        assert code == ErrorCode.none
    with connect(cluster, group_coordinator) as conn:
        offsets = {("spread", 0): 7}
        assert txn_offset_commit(conn, tid, pid, epoch, group, offsets) == {
            ("spread", 0): ErrorCode.invalid_txn_state
        }
        assert stable_offset(conn, group, "spread", 0) == (ErrorCode.none, -1)
    with connect(cluster, coordinator) as conn:
        assert add_offsets(conn, tid, pid, epoch, group) == ErrorCode.none
    with connect(cluster, group_coordinator) as conn:
        assert txn_offset_commit(conn, tid, pid, epoch, group, offsets) == {
            ("spread", 0): ErrorCode.none
        }
    with connect(cluster, coordinator) as conn:
        assert end_txn(conn, tid, pid, epoch, commit=True) == ErrorCode.none
    with connect(cluster, group_coordinator) as conn:
        deadline = time.monotonic() + TIMEOUT_S
        while stable_offset(conn, group, "spread", 0) != (ErrorCode.none, 7):
            assert time.monotonic() < deadline, "the committed offset never became stable"
            time.sleep(0.1)


def test_markers_are_written_by_the_partition_leader_only(cluster: LocalCluster) -> None:
    leader = cluster.leader("spread", 0)
    follower = next(b for b in cluster.broker_ids if b != leader)
    with connect(cluster, follower) as conn:
        codes = write_markers(conn, 123456, 0, True, 0, [("spread", 0)])
    assert codes == {("spread", 0): ErrorCode.not_leader_or_follower}


def test_producer_ids_are_unique_across_brokers(cluster: LocalCluster) -> None:
    """Every broker hands out ids from its own ZooKeeper block: 200 InitProducerId calls
    to each broker, with and without a transactional id, never get the same id twice."""
    ids: list[int] = []
    tids = (f"{unique('pid')}-{i}" for i in itertools.count())
    for broker_id in cluster.broker_ids:
        with connect(cluster, broker_id) as conn:
            for _ in range(100):
                code, pid, _ = init_producer_id(conn)
                assert code == ErrorCode.none
                ids.append(pid)
    for _ in range(30):
        tid = next(tids)
        coordinator = wait_for_coordinator(cluster, tid, TRANSACTION)
        with connect(cluster, coordinator) as conn:
            code, pid, _ = init_producer_id(conn, tid)
            assert code == ErrorCode.none
            ids.append(pid)
    assert len(ids) == len(set(ids)), "a producer id was handed out twice"
    blocks = {pid // 1000 for pid in ids[:300]}
    assert len(blocks) >= 3, "each broker should hand out its own block"
