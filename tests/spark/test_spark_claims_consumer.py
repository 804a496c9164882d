"""The sink's consumers: the claims consumer's progress-topic look-up (producers._knowing),
whose failure closes the consumer it made and says what failed, instead of leaving a live
librdkafka consumer in the Python worker for every task retry; and their reconnect backoff.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from oncelog.spark import options, producers, writer
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


class _KnowingConsumer:
    """A consumer that answers every look-up and records which topics it was asked for."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.closed = False

    def list_topics(self, topic: str, timeout: float) -> None:
        self.asked.append(topic)

    def close(self) -> None:
        self.closed = True


def _sink(progress_topic: str) -> options.WriteOptions:
    return options.parse_write_options(
        {
            "kafka.bootstrap.servers": "127.0.0.1:9",
            "topic": "out",
            "sink.id": f"sink-of-{progress_topic}",
            "sink.progress.topic": progress_topic,
        }
    )


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[_KnowingConsumer]:
    """The consumers the pool makes, each a _KnowingConsumer."""
    consumers: list[_KnowingConsumer] = []

    def make(*_args: object) -> _KnowingConsumer:
        consumers.append(_KnowingConsumer())
        return consumers[-1]

    monkeypatch.setattr(producers, "_consumer", make)
    return consumers


def test_a_sink_of_another_progress_topic_looks_its_topic_up_on_the_kept_consumer(
    made: list[_KnowingConsumer],
) -> None:
    pool = producers.ClientPool()
    first, second = _sink("_progress-a"), _sink("_progress-b")
    assert first.client == second.client  # the same kafka.* settings: one claims consumer
    consumer = pool.claims(first)
    assert pool.claims(second) is consumer
    assert pool.claims(first) is consumer
    assert pool.claims(second) is consumer
    assert len(made) == 1
    assert made[0].asked == ["_progress-a", "_progress-b"]  # each topic once


def test_a_failed_look_up_of_a_second_topic_drops_the_kept_consumer(
    made: list[_KnowingConsumer], monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = producers.ClientPool()
    consumer = pool.claims(_sink("_progress-a"))

    def unreachable(topic: str, timeout: float) -> None:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    monkeypatch.setattr(consumer, "list_topics", unreachable)
    with pytest.raises(ClusterError, match="_progress-b"):
        pool.claims(_sink("_progress-b"))
    assert made[0].closed
    again = pool.claims(_sink("_progress-a"))
    assert again is not consumer and again.asked == ["_progress-a"]  # type: ignore[attr-defined]


class _NothingCommitted:
    """A progress reader of a slot no batch was written to."""

    def committed(self, slots: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(s.topic, s.partition, -1001) for s in slots]


def test_a_failed_claims_look_up_fails_the_task_before_its_claim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The look-up runs when the task starts, not inside the claim's transaction (where a
    slow cluster would hold the slot's last stable offset for kafka.socket.timeout.ms)."""
    pool = producers.ClientPool()
    writers: list[object] = []

    def unreachable(_options: object) -> None:
        raise ClusterError("looking up the progress topic _progress-a failed")

    monkeypatch.setattr(pool, "progress_slots", lambda _options: 4)
    monkeypatch.setattr(pool, "progress", lambda _options: _NothingCommitted())
    monkeypatch.setattr(pool, "claims", unreachable)
    monkeypatch.setattr(pool, "writer", writers.append)
    with pytest.raises(ClusterError, match="_progress-a"):
        writer.write_task(_sink("_progress-a"), writer.TaskAttempt(0, 0, 5), iter([]), pool=pool)
    assert writers == []  # no writer asked for: no transaction begun


def test_a_look_up_interrupted_otherwise_closes_the_consumer_and_passes_it_on() -> None:
    consumer = _KnowingConsumer()

    def interrupted(topic: str, timeout: float) -> None:
        raise KeyboardInterrupt

    consumer.list_topics = interrupted  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        producers._knowing(consumer, "_progress", 2.5)  # type: ignore[arg-type]
    assert consumer.closed


def test_the_sinks_consumers_start_with_a_short_reconnect_backoff_unless_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """librdkafka retries a FindCoordinator lost with its bootstrap connection after half of
    reconnect.backoff.ms (producers.RECONNECT_BACKOFF_MS); a user's setting wins."""
    configs: list[dict[str, object]] = []
    monkeypatch.setattr(producers, "Consumer", configs.append)
    producers.progress_consumer(_sink("_progress"), "read_committed")
    given = options.parse_write_options(
        {
            "kafka.bootstrap.servers": "127.0.0.1:9",
            "topic": "out",
            "sink.id": "patient",
            "kafka.reconnect.backoff.ms": "250",
        }
    )
    producers.progress_consumer(given, "read_committed")
    assert [c["reconnect.backoff.ms"] for c in configs] == [producers.RECONNECT_BACKOFF_MS, "250"]
