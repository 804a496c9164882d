"""The driver's cluster calls: Spark's fetchOffset retries, and an unreachable cluster
reported once (no broker: the failures are made by hand)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from oncelog.spark.client import Cluster, ClusterError
from oncelog.spark.options import parse_read_options
from oncelog.spark.reader import _group_id


def _failing(errors: list[KafkaError]):  # type: ignore[no-untyped-def]
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if len(calls) <= len(errors):
            raise KafkaException(errors[len(calls) - 1])
        return "answer"

    return call, calls


def _retriable() -> KafkaError:
    return KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION, "moved", retriable=True)


def test_retriable_errors_are_tried_again_fetch_offset_num_retries_times() -> None:
    cluster = Cluster({"bootstrap.servers": "127.0.0.1:9"}, retries=3, retry_interval_ms=1)
    call, calls = _failing([_retriable(), _retriable()])
    assert cluster._call("listing", call) == "answer" and len(calls) == 3
    call, calls = _failing([_retriable()] * 3)
    with pytest.raises(ClusterError, match="listing: moved"):
        cluster._call("listing", call)
    assert len(calls) == 3  # fetchOffset.numRetries attempts in all, as Spark counts them
    call, calls = _failing([KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "no")])
    with pytest.raises(ClusterError, match=r"listing: no\Z"):
        cluster._call("listing", call)
    assert len(calls) == 1  # not retriable: at once


def test_a_broker_error_kafka_calls_retriable_is_tried_again_without_librdkafka_s_flag() -> None:
    # confluent-kafka's list_offsets reports a partition's error with the flag unset,
    # whatever the code: Kafka's table decides
    cluster = Cluster(
        {"bootstrap.servers": "127.0.0.1:9"},
        retries=2,
        retry_interval_ms=1,
        retries_option="fetchOffset.numRetries",
    )
    unflagged = KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION, "Not leader for partition")
    assert not unflagged.retriable()
    call, calls = _failing([unflagged])
    assert cluster._call("listing", call) == "answer" and len(calls) == 2
    call, calls = _failing([unflagged] * 2)
    with pytest.raises(ClusterError) as failed:
        cluster._call("listing earliest offsets", call)
    assert str(failed.value) == (
        "listing earliest offsets: Not leader for partition "
        "(tried 2 times: fetchOffset.numRetries=2)"
    )
    sinks = Cluster({"bootstrap.servers": "127.0.0.1:9"}, retries=2, retry_interval_ms=1)
    call, calls = _failing([unflagged] * 2)
    with pytest.raises(
        ClusterError, match=r"creating topic p: Not leader for partition \(tried 2 times\)\Z"
    ):
        sinks._call("creating topic p", call)  # the sink has no such option to name


def test_an_unreachable_cluster_is_reported_once() -> None:
    cluster = Cluster({"bootstrap.servers": "127.0.0.1:9", "socket.timeout.ms": "1500"}, retries=5)
    call, calls = _failing([KafkaError(KafkaError._TRANSPORT, "transport failure")] * 5)
    with pytest.raises(ClusterError) as failed:
        cluster._call("listing topics", call)
    assert len(calls) == 1
    assert str(failed.value) == (
        "listing topics: no answer from the cluster at kafka.bootstrap.servers=127.0.0.1:9 "
        "within 1.5 s (kafka.socket.timeout.ms): transport failure"
    )


class _TopicBeingCreated:
    """An admin client racing another task that is creating the topic: it does not exist,
    then exists (TOPIC_ALREADY_EXISTS) with no partitions in the metadata for a while."""

    def __init__(self, listings_without_partitions: int) -> None:
        self.listings = 0
        self.without = listings_without_partitions

    def list_topics(self, timeout: float) -> Any:
        self.listings += 1
        if self.listings == 1:
            return SimpleNamespace(topics={})
        partitions = {} if self.listings <= 1 + self.without else {0: None, 1: None}
        return SimpleNamespace(
            topics={"progress": SimpleNamespace(error=None, partitions=partitions)}
        )

    def create_topics(self, topics: list[Any], request_timeout: float) -> dict[str, Any]:
        def result() -> None:
            raise KafkaException(KafkaError(KafkaError.TOPIC_ALREADY_EXISTS, "exists"))

        return {"progress": SimpleNamespace(result=result)}


def test_ensure_topic_waits_for_the_partitions_of_a_topic_another_task_is_creating() -> None:
    # bench/spark.py's first exactly_once write failed a task this way (ClusterError "was
    # created but has no partitions yet"): its two tasks made the progress topic at once
    cluster = Cluster({"bootstrap.servers": "127.0.0.1:9", "socket.timeout.ms": "5000"})
    cluster._admin = _TopicBeingCreated(listings_without_partitions=3)  # type: ignore[assignment]
    assert cluster.ensure_topic("progress", 64) == 2
    never = Cluster({"bootstrap.servers": "127.0.0.1:9", "socket.timeout.ms": "300"})
    never._admin = _TopicBeingCreated(listings_without_partitions=10**6)  # type: ignore[assignment]
    with pytest.raises(ClusterError, match=r"was created but has no partitions after 0\.3 s"):
        never.ensure_topic("progress", 64)


def test_the_consumers_group_follows_group_id_prefix_or_kafka_group_id() -> None:
    boot = {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t"}
    default = _group_id(parse_read_options(boot, False), "spark-kafka-relation")
    assert default.startswith("spark-kafka-relation-") and default.endswith("-executor")
    prefixed = parse_read_options({**boot, "groupidprefix": "mine"}, False)
    assert _group_id(prefixed, "spark-kafka-relation").startswith("mine-")
    fixed = parse_read_options({**boot, "kafka.group.id": "authorised"}, False)
    assert _group_id(fixed, "spark-kafka-relation") == "authorised"
