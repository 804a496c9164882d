"""Failures a replicated partition must survive, each on real broker processes, and the
errors a broker answers when it cannot take a write.

One cluster (3 brokers, session timeout 3 s) serves the whole module; each test uses its
own topic and leaves every broker running and back in the ISR.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.client.connection import KafkaConnection
from oncelog.protocol.errors import ErrorCode
from oncelog.storage import LogConfig, PartitionLog
from oncelog.testing.cluster import LocalCluster

from .raw import fetch, produce, wait_for_leaders_isr

SESSION_TIMEOUT_S = 3.0
CONFIG = {
    "zookeeper.session.timeout.ms": str(int(SESSION_TIMEOUT_S * 1000)),
    "replica.lag.time.max.ms": "10000",
}

pytestmark = pytest.mark.slow  # real processes, session timeouts to wait out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("failover"), brokers=3, config=CONFIG) as running:
        yield running


@pytest.fixture(autouse=True)
def healthy(cluster: LocalCluster) -> Iterator[None]:
    for broker_id, broker in cluster.brokers.items():
        if not broker.running:
            cluster.restart(broker_id)
    cluster.wait_for_brokers(cluster.broker_ids)
    yield


def create(cluster: LocalCluster, topic: str, min_insync: int = 2, rf: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    new = NewTopic(topic, 1, rf, config={"min.insync.replicas": str(min_insync)})
    admin.create_topics([new])[topic].result(60)
    cluster.wait_for_isr(topic, 0, cluster.broker_ids[:rf] if rf == 3 else [])


def connect(cluster: LocalCluster, broker_id: int) -> KafkaConnection:
    return KafkaConnection(cluster.brokers[broker_id].bootstrap_servers)


def produce_on_leader(
    cluster: LocalCluster,
    broker_id: int,
    topic: str,
    value: bytes,
    acks: int,
    retrying: frozenset[ErrorCode] = frozenset({ErrorCode.not_leader_or_follower}),
) -> tuple[ErrorCode, int]:
    """Produce on a broker ZooKeeper names leader, retrying (bounded) the ``retrying``
    answers, as a client would: by default NOT_LEADER_OR_FOLLOWER while the broker has not
    yet learnt from its watch that it leads."""
    deadline = time.monotonic() + 15
    with connect(cluster, broker_id) as conn:
        while True:
            code, offset = produce(conn, topic, [value], acks=acks)
            if code not in retrying or time.monotonic() > deadline:
                return code, offset
            time.sleep(0.1)


# An ISR expansion is in ZooKeeper a moment before the leader that wrote it has taken the
# answer; until then acks=all counts the ISR without the new member (Kafka's leader does the
# same with an expansion in flight) and answers NOT_ENOUGH_REPLICAS, which clients retry.
WHILE_THE_ISR_GROWS = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.not_enough_replicas})


def acked_producer(cluster: LocalCluster, topic: str, count: int) -> list[int]:
    """Produce ``count`` numbered records with acks=all; the offsets acknowledged."""
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "enable.idempotence": True}
    )
    offsets: list[int] = []
    for i in range(count):
        producer.produce(
            topic,
            str(i).encode(),
            on_delivery=lambda e, m: e is None and offsets.append(m.offset()),
        )
    assert producer.flush(60) == 0
    return offsets


def log_end(cluster: LocalCluster, broker_id: int, topic: str) -> int:
    """The log end offset of a stopped broker's replica, read from its files."""
    log = PartitionLog.open(
        cluster.brokers[broker_id].data_dir / f"{topic}-0", LogConfig(), clean_shutdown=False
    )
    try:
        return log.log_end_offset
    finally:
        log.close()


def test_produce_to_a_follower_is_refused(cluster: LocalCluster) -> None:
    create(cluster, "who-leads")
    leader = cluster.wait_for_leader("who-leads", 0)
    follower = next(b for b in cluster.broker_ids if b != leader)
    with connect(cluster, follower) as conn:
        assert produce(conn, "who-leads", [b"x"])[0] == ErrorCode.not_leader_or_follower
        assert fetch(conn, "who-leads", 0)[0] == ErrorCode.not_leader_or_follower
    assert produce_on_leader(cluster, leader, "who-leads", b"x", -1) == (ErrorCode.none, 0)
    with connect(cluster, leader) as conn:
        assert fetch(conn, "who-leads", 0, leader_epoch=0)[0] == ErrorCode.none
        assert fetch(conn, "who-leads", 0, leader_epoch=7)[0] == ErrorCode.unknown_leader_epoch


def test_not_enough_replicas(cluster: LocalCluster) -> None:
    create(cluster, "strict", min_insync=3)
    leader = cluster.wait_for_leader("strict", 0)
    follower = next(b for b in cluster.broker_ids if b != leader)
    cluster.kill(follower)
    # The controller drops the dead follower from the ISR once its session expires, and the
    # leader learns it from its watch.
    survivors = [b for b in cluster.broker_ids if b != follower]
    cluster.wait_for_isr("strict", 0, survivors)
    wait_for_leaders_isr(cluster, leader, "strict", survivors)
    with connect(cluster, leader) as conn:
        assert produce(conn, "strict", [b"a"], acks=-1)[0] == ErrorCode.not_enough_replicas
        assert produce(conn, "strict", [b"b"], acks=1)[0] == ErrorCode.none
    cluster.restart(follower)
    cluster.wait_for_isr("strict", 0, cluster.broker_ids)
    code, _ = produce_on_leader(cluster, leader, "strict", b"c", -1, WHILE_THE_ISR_GROWS)
    assert code == ErrorCode.none


def test_controller_killed_and_elections_go_on(cluster: LocalCluster) -> None:
    create(cluster, "after-controller")
    controller = cluster.controller()
    assert controller is not None
    cluster.kill(controller)
    cluster._wait(lambda: cluster.controller() not in (None, controller), "a new controller", 30)
    new_controller = cluster.controller()
    # The new controller elects leaders: kill whichever live broker leads the partition.
    leader = cluster.wait_for_leader("after-controller", 0, not_in={controller})
    before = cluster.partition_state("after-controller", 0)
    assert before is not None
    victim = leader
    cluster.kill(victim)
    elected = cluster.wait_for_leader("after-controller", 0, not_in={controller, victim})
    after = cluster.partition_state("after-controller", 0)
    assert after is not None and after["leader_epoch"] > before["leader_epoch"]
    assert after["controller_epoch"] > before["controller_epoch"] or new_controller != controller
    # ISR down to one of min.insync 2: acks=1 accepted by the new leader.
    assert produce_on_leader(cluster, elected, "after-controller", b"v", 1)[0] == ErrorCode.none


def test_paused_leader_is_fenced_then_rejoins_as_follower(cluster: LocalCluster) -> None:
    create(cluster, "paused")
    assert len(acked_producer(cluster, "paused", 50)) == 50
    leader = cluster.wait_for_leader("paused", 0)
    state = cluster.partition_state("paused", 0)
    assert state is not None
    cluster.pause(leader)
    try:
        successor = cluster.wait_for_leader("paused", 0, not_in={leader}, timeout_s=30)
        isr = [b for b in cluster.broker_ids if b != leader]
        cluster.wait_for_isr("paused", 0, isr)
        time.sleep(0.5)
    finally:
        cluster.resume(leader)
    # Right after SIGCONT, before it can have heard from ZooKeeper: no write, no read.
    with connect(cluster, leader) as conn:
        code, _ = produce(conn, "paused", [b"stale"], acks=1)
        assert code == ErrorCode.not_leader_or_follower
        assert fetch(conn, "paused", 0)[0] in (
            ErrorCode.not_leader_or_follower,
            ErrorCode.fenced_leader_epoch,
        )
        assert fetch(conn, "paused", 0, leader_epoch=state["leader_epoch"])[0] != ErrorCode.none
    cluster.wait_for_isr("paused", 0, cluster.broker_ids)  # back, as a follower
    assert cluster.leader("paused", 0) == successor
    assert produce_on_leader(cluster, successor, "paused", b"after", -1)[0] == ErrorCode.none


def test_diverged_tail_is_truncated_and_never_served(cluster: LocalCluster) -> None:
    create(cluster, "diverged")
    assert acked_producer(cluster, "diverged", 20) == list(range(20))
    leader = cluster.wait_for_leader("diverged", 0)
    followers = [b for b in cluster.broker_ids if b != leader]
    for follower in followers:
        cluster.pause(follower)  # they stop fetching; their sessions outlive the pause
    try:
        # Fetches already waiting at the leader are answered (empty) within
        # replica.fetch.wait.max.ms: after that no follower has one in flight.
        time.sleep(1.0)
        with connect(cluster, leader) as conn:
            for i in range(5):
                code, offset = produce(conn, "diverged", [b"unreplicated-%d" % i], acks=1)
                assert (code, offset) == (ErrorCode.none, 20 + i)
            code, high_watermark, visible = fetch(conn, "diverged", 20)
            assert (code, high_watermark, visible) == (ErrorCode.none, 20, 0)
        cluster.kill(leader)
    finally:
        for follower in followers:
            cluster.resume(follower)
    assert log_end(cluster, leader, "diverged") == 25  # the tail only the old leader has
    successor = cluster.wait_for_leader("diverged", 0, not_in={leader})
    code, offset = produce_on_leader(cluster, successor, "diverged", b"replicated", 1)
    assert (code, offset) == (ErrorCode.none, 20)
    cluster.restart(leader)
    cluster.wait_for_isr("diverged", 0, cluster.broker_ids)
    with connect(cluster, successor) as conn:
        assert fetch(conn, "diverged", 0)[1:] == (21, 21)
    log_text = cluster.brokers[leader].read_log(current_run=True)
    assert "truncating the diverged tail 20..25" in log_text


def read_from_leader(cluster: LocalCluster, topic: str, records: int) -> int:
    """The partition's leader once it serves ``records`` records up to its high watermark.
    Meanwhile leadership may move: on a loaded machine the ZooKeeper restart can outlast
    the session timeout, and the controller then elects again (nothing is lost either way).
    """
    deadline = time.monotonic() + 60
    while True:
        leader = cluster.wait_for_leader(topic, 0)
        with connect(cluster, leader) as conn:
            answer = fetch(conn, topic, 0)
        if answer == (ErrorCode.none, records, records):
            return leader
        assert answer[0] in MOVING_LEADERSHIP and time.monotonic() < deadline, answer
        time.sleep(0.2)


# What a broker answers while leadership moves (NOT_LEADER... from a former leader).
MOVING_LEADERSHIP = (ErrorCode.none, ErrorCode.not_leader_or_follower)


def test_zookeeper_restart_loses_nothing(cluster: LocalCluster) -> None:
    create(cluster, "zk-restart")
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "enable.idempotence": True}
    )
    acked: list[int] = []
    for i in range(300):
        producer.produce(
            "zk-restart",
            str(i).encode(),
            on_delivery=lambda e, m: e is None and acked.append(int(m.value())),
        )
        if i == 150:
            producer.flush(30)
            cluster.zookeeper.restart()  # shorter than the session timeout: sessions live on
    assert producer.flush(60) == 0
    assert sorted(acked) == list(range(300))
    cluster.wait_for_brokers(cluster.broker_ids)
    leader = read_from_leader(cluster, "zk-restart", records=300)
    # The controller still works: a leader kill is handled after the restart.
    cluster.kill(leader)
    cluster.wait_for_leader("zk-restart", 0, not_in={leader})
