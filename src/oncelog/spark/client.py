"""The few cluster questions the connector asks, through confluent-kafka's AdminClient.

Only public Kafka APIs are used (Metadata, ListOffsets with an isolation level,
CreateTopics), so the same code works against oncelog and against any Kafka cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from oncelog.spark.offsets import Offsets, TopicPartitionKey
from oncelog.spark.options import Subscription, admin_config

TIMEOUT_S = 30.0


class Cluster:
    """The cluster questions the connector asks (partitions, offsets, topic creation)."""

    def __init__(self, client_config: Mapping[str, str]) -> None:
        self._admin = AdminClient(admin_config(client_config))

    def partitions(self, subscription: Subscription) -> list[TopicPartitionKey]:
        """The topic-partitions the subscription names, as the cluster knows them now."""
        metadata = self._admin.list_topics(timeout=TIMEOUT_S)
        found: list[TopicPartitionKey] = []
        for name, topic in metadata.topics.items():
            if topic.error is not None or not subscription.matches(name):
                continue
            if subscription.pattern is not None and name.startswith("__"):
                continue  # internal topics are never picked up by a pattern
            wanted = subscription.assign.get(name) if subscription.assign is not None else None
            for p in topic.partitions:
                if wanted is None or p in wanted:
                    found.append((name, p))
        if subscription.assign is not None:
            missing = sorted(
                {(t, p) for t, ps in subscription.assign.items() for p in ps} - set(found)
            )
            if missing:
                raise KafkaException(
                    KafkaError(
                        KafkaError.UNKNOWN_TOPIC_OR_PART,
                        f"assigned partitions not found: {missing}",
                    )
                )
        return sorted(found)

    def offsets(
        self, tps: Iterable[TopicPartitionKey], which: str, read_committed: bool
    ) -> Offsets:
        """`which` = "earliest" (log start offset) or "latest": the last stable offset under
        read_committed, the high watermark otherwise."""
        tps = list(tps)
        if not tps:
            return {}
        spec = OffsetSpec.earliest() if which == "earliest" else OffsetSpec.latest()
        level = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
        futures = self._admin.list_offsets(
            {TopicPartition(t, p): spec for t, p in tps},
            isolation_level=level,
            request_timeout=TIMEOUT_S,
        )
        return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}

    def ensure_topic(self, name: str, partitions: int) -> int:
        """Create `name` if missing; return its partition count."""
        # all topics: a Metadata request naming the topic could auto-create it with defaults
        metadata = self._admin.list_topics(timeout=TIMEOUT_S)
        topic = metadata.topics.get(name)
        if topic is not None and topic.error is None and topic.partitions:
            return len(topic.partitions)
        futures = self._admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=-1)],
            request_timeout=TIMEOUT_S,
        )
        try:
            futures[name].result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        metadata = self._admin.list_topics(timeout=TIMEOUT_S)
        return len(metadata.topics[name].partitions)
