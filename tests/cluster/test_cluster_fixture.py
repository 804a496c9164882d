"""The `oncelog_cluster` pytest fixture, as a user's test suite would use it."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.exceptions import SessionExpiredError

from oncelog.testing.cluster import LocalCluster


def test_round_trip_on_a_replicated_topic(oncelog_cluster: LocalCluster) -> None:
    servers = oncelog_cluster.bootstrap_servers
    assert oncelog_cluster.registered_brokers() == {1, 2, 3}
    admin = AdminClient({"bootstrap.servers": servers})
    admin.create_topics([NewTopic("events", 1, 3)])["events"].result(60)
    producer = Producer({"bootstrap.servers": servers, "acks": "all"})
    producer.produce("events", b"hello")
    assert producer.flush(30) == 0
    # Assigned, not subscribed: reading it back needs no group.
    consumer = Consumer(
        {"bootstrap.servers": servers, "group.id": "fixture", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition("events", 0, 0)])
    message = consumer.poll(30)
    assert message is not None and message.error() is None and message.value() == b"hello"
    consumer.close()
    oncelog_cluster.wait_for_isr("events", 0, [1, 2, 3])


class SessionExpiringOnce:
    """A kazoo client whose session expires under the first question, as when ZooKeeper
    restarts slower than the session timeout (seen under load in
    test_zookeeper_restart_loses_nothing); kazoo then opens a new session."""

    def __init__(self) -> None:
        self.asked = 0

    def get_children(self, path: str) -> list[str]:
        self.asked += 1
        if self.asked == 1:
            raise SessionExpiredError()
        return ["1", "2"] if path == "/brokers/ids" else []


def test_the_cluster_asks_zookeeper_again_after_its_session_expired(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, brokers=2)  # not started: the client below answers
    client = SessionExpiringOnce()
    cluster._zk_client = client  # type: ignore[assignment]
    assert cluster.registered_brokers() == {1, 2}
    assert client.asked == 2
