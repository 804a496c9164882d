"""The operator's commands across a 3-broker cluster (issue 11 item 6): `oncelog producers
describe`, `oncelog transactions list|describe|find-hanging`, `oncelog groups
list|describe` bootstrapped on a broker that is neither the partition's leader nor the
coordinator, so each answer must come from the broker that holds it (a follower answers
DescribeProducers NOT_LEADER_OR_FOLLOWER, a broker that does not coordinate an id
NOT_COORDINATOR, and each broker lists only the transactions and groups it coordinates)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.coordinator_partitions import partition_for
from oncelog.testing.cluster import LocalCluster

from ..admin.admin_helpers import run_cli, run_json
from .coordination import COORDINATOR_CONFIG, INTERNAL_PARTITIONS
from .test_cluster_coordinators import create_once_every_broker_is_live

TIMEOUT_S = 60
TOPIC = "operated"
TXN_ID = "operated-open"
GROUP = "operated-readers"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A committed transaction of 3 records (offsets 0-2, marker 3), then an open one of 2
    (offsets 4-5) on `operated`-0, led by broker 2; a group that committed offset 1. The
    last test aborts the open transaction: the tests run in file order."""
    with LocalCluster(tmp_path_factory.mktemp("cli"), brokers=3, config=COORDINATOR_CONFIG) as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        create_once_every_broker_is_live(admin, NewTopic(TOPIC, 1, replica_assignment=[[2, 3, 1]]))
        producer = Producer(
            {
                "bootstrap.servers": c.bootstrap_servers,
                "transactional.id": TXN_ID,
                "transaction.timeout.ms": 600_000,
            }
        )
        producer.init_transactions(TIMEOUT_S)
        for count in (3, 2):
            producer.begin_transaction()
            for i in range(count):
                producer.produce(TOPIC, b"v%d" % i, partition=0)
            assert producer.flush(TIMEOUT_S) == 0
            if count == 3:
                producer.commit_transaction(TIMEOUT_S)
        consumer = Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": GROUP})
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, 1)], asynchronous=False)
        consumer.close()
        yield c


def bootstrap_elsewhere(cluster: LocalCluster, *holders: int) -> str:
    """The address of a broker that holds none of what is asked."""
    other = next(b for b in cluster.broker_ids if b not in holders)
    return cluster.address(other)


def bootstrap_away_from(cluster: LocalCluster, internal_topic: str, key: str) -> str:
    """The address of a broker that neither leads `operated`-0 nor coordinates ``key``
    (the leader of its partition of ``internal_topic``)."""
    leader = cluster.wait_for_leader(TOPIC, 0)
    coordinator = cluster.wait_for_leader(internal_topic, partition_for(key, INTERNAL_PARTITIONS))
    return bootstrap_elsewhere(cluster, leader, coordinator)


def test_producers_describe_asks_the_partition_leader(cluster: LocalCluster) -> None:
    leader = cluster.wait_for_leader(TOPIC, 0)
    bootstrap = bootstrap_elsewhere(cluster, leader)
    (state,) = run_json(bootstrap, "producers", "describe", "--topic", TOPIC)
    assert state["partition"] == 0
    assert state["current_txn_start_offset"] == 4  # the open transaction
    assert state["last_sequence"] == 4  # five records: sequences 0 to 4


def test_transactions_list_describe_and_find_hanging_ask_the_coordinator(
    cluster: LocalCluster,
) -> None:
    bootstrap = bootstrap_away_from(cluster, "__transaction_state", TXN_ID)

    listed = {t["transactional_id"]: t for t in run_json(bootstrap, "transactions", "list")}
    assert listed[TXN_ID]["state"] == "Ongoing"
    assert listed[TXN_ID]["partitions"] == [f"{TOPIC}-0"]

    described = run_json(bootstrap, "transactions", "describe", "--transactional-id", TXN_ID)
    assert described["state"] == "Ongoing" and described["timeout_ms"] == 600_000

    (found,) = run_json(
        bootstrap,
        "transactions",
        "find-hanging",
        "--topic",
        TOPIC,
        "--max-transaction-timeout",
        "0",
        "--include-ongoing",
    )
    assert (found["start_offset"], found["transactional_id"]) == (4, TXN_ID)
    assert found["status"].lower() == "ongoing"


def test_groups_list_and_describe_ask_the_coordinator_and_the_leader(
    cluster: LocalCluster,
) -> None:
    bootstrap = bootstrap_away_from(cluster, "__consumer_offsets", GROUP)

    listed = [g["group_id"] for g in run_json(bootstrap, "groups", "list")]
    assert GROUP in listed

    described = run_json(bootstrap, "groups", "describe", "--group", GROUP)
    (partition,) = described["partitions"]
    assert (partition["topic"], partition["partition"]) == (TOPIC, 0)
    assert partition["committed_offset"] == 1
    assert partition["high_watermark"] == 6  # 3 records, a marker, 2 records
    assert partition["last_stable_offset"] == 4  # where the open transaction starts
    assert (partition["lag_hw"], partition["lag_lso"], partition["unstable"]) == (5, 3, 2)
    assert described["total_lag_hw"] == 5 and described["total_lag_lso"] == 3
    assert (
        "Total lag: 5 to the high watermark, 3 to the last stable offset."
        in run_cli(bootstrap, "groups", "describe", "--group", GROUP).output
    )


def test_transactions_abort_writes_its_marker_on_the_partition_leader(
    cluster: LocalCluster,
) -> None:
    bootstrap = bootstrap_away_from(cluster, "__transaction_state", TXN_ID)
    abort = ("transactions", "abort", "--topic", TOPIC, "--partition", "0", "--start-offset", "4")

    refused = run_cli(bootstrap, *abort, expect_exit=1).output
    assert "not aborting" in refused and TXN_ID in refused  # the coordinator tracks it

    aborted = run_json(bootstrap, *abort, "--force")
    assert (
        aborted["last_stable_offset_before"],
        aborted["last_stable_offset_after"],
        aborted["high_watermark"],
    ) == (4, 7, 7)
