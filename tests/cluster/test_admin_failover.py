"""oncelog's admin client while a broker dies, as Kafka's Admin behaves: a command run right
after the group coordinator and partition leader is SIGKILLed answers once both have moved,
instead of failing on the dead broker that Metadata and FindCoordinator still name (until
its ZooKeeper session expires). Without retries (an API timeout of 0) the same calls fail:
the anomaly the retries remove."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.client.admin import Admin, AdminError, OffsetSpec
from oncelog.coordinator_partitions import partition_for
from oncelog.testing.cluster import LocalCluster

from .coordination import COORDINATOR_CONFIG, INTERNAL_PARTITIONS, OFFSETS, wait_for_coordinator
from .coordination import GROUP as GROUP_KEY
from .test_cluster_coordinators import create_once_every_broker_is_live

TOPIC = "moving"
GROUP = "moving-readers"
COMMITTED = {(TOPIC, 0): 3}
# A dead broker stays registered, so named as leader and coordinator, for its whole session:
# a wide window in which the calls without retries reach it, even on a loaded machine.
CONFIG = {**COORDINATOR_CONFIG, "zookeeper.session.timeout.ms": "10000"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("admin-failover"), brokers=3, config=CONFIG) as c:
        yield c


@pytest.mark.slow
def test_commands_answer_once_the_leader_and_coordinator_moved(cluster: LocalCluster) -> None:
    # FindCoordinator creates __consumer_offsets; the topic comes before its offsets (a
    # commit for a partition that does not exist is refused, as Kafka refuses it).
    wait_for_coordinator(cluster, GROUP, GROUP_KEY)
    coordinator = cluster.wait_for_leader(OFFSETS, partition_for(GROUP, INTERNAL_PARTITIONS))
    survivors = [b for b in cluster.broker_ids if b != coordinator]
    # The coordinator also leads the topic's partition (the first replica is preferred).
    create_once_every_broker_is_live(
        AdminClient({"bootstrap.servers": cluster.bootstrap_servers}),
        NewTopic(TOPIC, 1, replica_assignment=[[coordinator, *survivors]]),
    )
    assert cluster.wait_for_leader(TOPIC, 0) == coordinator
    with Admin.connect(cluster.bootstrap_servers) as admin:
        admin.alter_group_offsets(GROUP, COMMITTED)  # an Empty group with a committed offset
    cluster.wait_for_isr(TOPIC, 0, set(cluster.broker_ids))
    cluster.wait_for_isr(
        OFFSETS, partition_for(GROUP, INTERNAL_PARTITIONS), set(cluster.broker_ids)
    )

    cluster.kill(coordinator)
    bootstrap = cluster.address(survivors[0])
    with Admin.connect(bootstrap, api_timeout_s=0) as admin:
        with pytest.raises(AdminError) as no_coordinator:
            admin.committed_offsets(GROUP)
        with pytest.raises(AdminError) as no_leader:
            admin.list_offsets({TOPIC: [0]}, OffsetSpec.LATEST)
    assert no_coordinator.value.moved, no_coordinator.value
    assert no_leader.value.moved, no_leader.value

    with Admin.connect(bootstrap) as admin:
        assert admin.committed_offsets(GROUP) == COMMITTED
        assert admin.describe_group(GROUP).state == "Empty"
        assert admin.list_offsets({TOPIC: [0]}, OffsetSpec.LATEST) == {(TOPIC, 0): 0}
    assert cluster.leader(TOPIC, 0) in survivors
