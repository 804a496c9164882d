"""Producers kept across micro-batches, fenced correctly when a task moves between Python
workers. Each `ClientPool` plays one worker; the writer runs as Spark would run it in that
worker (no Spark session needed). The at_least_once control shows the duplicates the same
moves and crash leave without the protocol."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from oncelog.spark.options import parse_write_options
from oncelog.spark.producers import ClientPool
from oncelog.spark.writer import SinkCommitMessage, TaskAttempt, write_task
from oncelog.testing.spark import FailAfter, SimulatedCrash

from .spark_helpers import create_topic, read_all, unique

ROWS = 40
CRASH_AFTER = 15


def _rows(batch: int) -> list[pa.RecordBatch]:
    values = [b"b%d-r%02d" % (batch, i) for i in range(ROWS)]
    half = ROWS // 2  # two Arrow batches, as Spark hands them over
    return [
        pa.record_batch([pa.array(values[:half], pa.binary())], names=["value"]),
        pa.record_batch([pa.array(values[half:], pa.binary())], names=["value"]),
    ]


def _write(options, pool: ClientPool, batch: int, attempt: int = 0, faults=None):  # type: ignore[no-untyped-def]
    return write_task(options, TaskAttempt(0, attempt, batch), iter(_rows(batch)), faults, pool)


def test_a_kept_producer_writes_every_batch_without_a_new_init(
    bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = create_topic(bootstrap, unique("kept"), partitions=1)
    options = parse_write_options(
        {"kafka.bootstrap.servers": bootstrap, "topic": topic, "sink.id": unique("sink")}
    )
    worker = ClientPool()
    messages = [_write(options, worker, batch) for batch in range(4)]
    assert [m.new_producer for m in messages] == [True, False, False, False]
    assert [m.rows for m in messages] == [ROWS] * 4
    replay = _write(options, worker, 3)  # the last batch again: nothing written
    assert replay.skipped and not replay.new_producer
    monkeypatch.setattr("oncelog.spark.producers.IDLE_EVICTION_S", 0.0)
    assert _write(options, worker, 4).new_producer  # an idle producer is closed, not kept
    assert Counter(read_all(bootstrap, topic)) == Counter(
        b"b%d-r%02d" % (b, i) for b in range(5) for i in range(ROWS)
    )


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_a_task_moving_between_workers_and_a_retry_elsewhere(
    bootstrap: str, guarantee: str
) -> None:
    topic = create_topic(bootstrap, unique("moves"), partitions=1)
    options = parse_write_options(
        {
            "kafka.bootstrap.servers": bootstrap,
            "topic": topic,
            "sink.id": unique("sink"),
            "delivery.guarantee": guarantee,
        }
    )
    a, b = ClientPool(), ClientPool()
    done: list[SinkCommitMessage] = [
        _write(options, a, 0),  # worker A keeps its producer
        _write(options, b, 1),  # the task moved: B's new producer fences A's
        _write(options, a, 2),  # back on A: the progress shows B's commit, A makes a new one
    ]
    # batch 3: the first attempt, on B, dies half-way with its transaction open; its new
    # producer fenced A's, but committed nothing, so A's progress looks unchanged: the retry,
    # on A, finds its kept producer fenced before it writes, and a new one aborts B's
    with pytest.raises(SimulatedCrash):
        _write(options, b, 3, attempt=0, faults=FailAfter(CRASH_AFTER))
    done.append(_write(options, a, 3, attempt=1, faults=FailAfter(CRASH_AFTER)))
    done.append(_write(options, b, 4))  # B's producer died with the attempt: a new one
    done.append(_write(options, a, 5))  # A's was fenced by it: the progress shows it
    done.append(_write(options, a, 6))  # the task stays on A: the kept producer writes

    counts = Counter(read_all(bootstrap, topic))
    expected = {b"b%d-r%02d" % (batch, i) for batch in range(7) for i in range(ROWS)}
    assert set(counts) == expected
    duplicates = sum(n - 1 for n in counts.values())
    if guarantee == "exactly_once":
        assert duplicates == 0
        assert [m.new_producer for m in done] == [True] * 6 + [False]
        # the dead attempt's records reached the log, in a transaction that was aborted
        assert len(read_all(bootstrap, topic, "read_uncommitted")) == 7 * ROWS + CRASH_AFTER
    else:
        assert duplicates == CRASH_AFTER  # the dead attempt's records, written again


def test_a_dead_attempt_holding_the_progress_open_is_fenced(
    bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attempt that died between adding its progress to its transaction and committing
    leaves the progress pending: a kept producer does not wait for that transaction's
    timeout, it is replaced and the new producer aborts the dead transaction."""
    import oncelog.spark.writer as writer_module

    monkeypatch.setattr(writer_module, "KEPT_PROGRESS_WAIT_S", 1.0)
    topic = create_topic(bootstrap, unique("pending"), partitions=1)
    options = parse_write_options(
        {"kafka.bootstrap.servers": bootstrap, "topic": topic, "sink.id": unique("sink")}
    )
    worker = ClientPool()
    _write(options, worker, 0)
    # the dead attempt of batch 1, elsewhere: its own producer, records and progress sent
    zombie = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": options.transactional_id(0)}
    )
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie")
    progress_reader = Consumer({"bootstrap.servers": bootstrap, "group.id": options.progress_group})
    zombie.send_offsets_to_transaction(
        [TopicPartition(options.progress_topic, 0, 2)],
        progress_reader.consumer_group_metadata(),
        30,
    )
    zombie.flush(30)
    retry = _write(options, worker, 1, attempt=1)
    assert retry.new_producer and not retry.skipped and retry.rows == ROWS
    values = read_all(bootstrap, topic)
    assert b"zombie" not in values and len(values) == 2 * ROWS == len(set(values))
    progress_reader.close()
