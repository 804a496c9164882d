"""The claims consumer's progress-topic look-up (producers._knowing): a failure closes the
consumer it made and says what failed, instead of leaving a live librdkafka consumer in
the Python worker for every task retry."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from oncelog.spark import producers
from oncelog.spark.client import ClusterError


class _UnreachableConsumer:
    def __init__(self) -> None:
        self.closed = False
        self.asked: list[tuple[str, float]] = []

    def list_topics(self, topic: str, timeout: float) -> None:
        self.asked.append((topic, timeout))
        raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    def close(self) -> None:
        self.closed = True


def test_a_failed_look_up_closes_the_consumer_and_names_the_topic() -> None:
    consumer = _UnreachableConsumer()
    with pytest.raises(ClusterError, match=r"progress topic _progress .* 2\.5 s"):
        producers._knowing(consumer, "_progress", 2.5)  # type: ignore[arg-type]
    assert consumer.asked == [("_progress", 2.5)]
    assert consumer.closed
