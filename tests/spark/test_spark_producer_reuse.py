"""A worker's writer kept across tasks of any slot and micro-batches, and the claims that
fence another attempt of the same slot (`oncelog.spark.claims`). Each `ClientPool` plays one
worker; the writer runs as Spark would run it in that worker (no Spark session needed). The
controls show the duplicates without the protocol: at_least_once, and the claims ignored."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from oncelog.spark import claims
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


def _write(options, pool: ClientPool, batch: int, attempt: int = 0, faults=None, slot: int = 0):  # type: ignore[no-untyped-def]
    return write_task(options, TaskAttempt(slot, attempt, batch), iter(_rows(batch)), faults, pool)


def test_a_kept_producer_writes_every_batch_without_a_new_init(
    bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = create_topic(bootstrap, unique("kept"), partitions=1)
    options = parse_write_options(
        {"kafka.bootstrap.servers": bootstrap, "topic": topic, "sink.id": unique("sink")}
    )
    other_sink = parse_write_options(
        {"kafka.bootstrap.servers": bootstrap, "topic": topic, "sink.id": unique("sink")}
    )
    worker = ClientPool()
    messages = [_write(options, worker, batch) for batch in range(4)]
    assert [m.new_producer for m in messages] == [True, False, False, False]
    assert [m.rows for m in messages] == [ROWS] * 4
    replay = _write(options, worker, 3)  # the last batch again: nothing written
    assert replay.skipped and not replay.new_producer
    # the same writer serves another slot and another sink
    assert not _write(options, worker, 0, slot=1).new_producer
    assert not _write(other_sink, worker, 0).new_producer
    monkeypatch.setattr("oncelog.spark.producers.IDLE_EVICTION_S", 0.0)
    assert _write(options, worker, 4).new_producer  # an idle producer is closed, not kept
    assert Counter(read_all(bootstrap, topic)) == Counter(
        [b"b%d-r%02d" % (b, i) for b in range(5) for i in range(ROWS)]
        + [b"b0-r%02d" % i for i in range(ROWS)] * 2
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
        _write(options, a, 0),  # worker A makes its writer
        _write(options, b, 1),  # the task moved: B makes its own; A's is not disturbed
        _write(options, a, 2),  # back on A: its writer again
    ]
    # batch 3: the first attempt, on B, dies half-way with its transaction open (B's writer
    # is retired); the retry, on A, finds B's claim after the last commit and fences B's
    # writer, which aborts the dead attempt's transaction, before it writes with its own
    with pytest.raises(SimulatedCrash):
        _write(options, b, 3, attempt=0, faults=FailAfter(CRASH_AFTER))
    done.append(_write(options, a, 3, attempt=1, faults=FailAfter(CRASH_AFTER)))
    done.append(_write(options, b, 4))  # B's writer was retired with the attempt: a new one
    done.append(_write(options, a, 5))  # A's writer again
    done.append(_write(options, a, 6))

    counts = Counter(read_all(bootstrap, topic))
    expected = {b"b%d-r%02d" % (batch, i) for batch in range(7) for i in range(ROWS)}
    assert set(counts) == expected
    duplicates = sum(n - 1 for n in counts.values())
    if guarantee == "exactly_once":
        assert duplicates == 0
        assert [m.new_producer for m in done] == [True, True, False, False, True, False, False]
        # the dead attempt's records reached the log, in a transaction that was aborted
        assert len(read_all(bootstrap, topic, "read_uncommitted")) == 7 * ROWS + CRASH_AFTER
    else:
        assert duplicates == CRASH_AFTER  # the dead attempt's records, written again


def test_a_dead_attempt_holding_the_progress_open_is_fenced(
    bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attempt that died between adding its progress to its transaction and committing
    leaves the progress pending: the next attempt does not wait for that transaction's
    timeout, it fences the writer that claimed the slot, which aborts the dead transaction."""
    import oncelog.spark.writer as writer_module

    monkeypatch.setattr(writer_module, "PENDING_PROGRESS_WAIT_S", 1.0)
    topic = create_topic(bootstrap, unique("pending"), partitions=1)
    options = parse_write_options(
        {"kafka.bootstrap.servers": bootstrap, "topic": topic, "sink.id": unique("sink")}
    )
    worker = ClientPool()
    _write(options, worker, 0)
    # the dead attempt of batch 1, elsewhere: its own writer, claim, records and progress sent
    zombie_id = unique("oncelog-sink-zombie")
    zombie = Producer({"bootstrap.servers": bootstrap, "transactional.id": zombie_id})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    claim = claims.Claim(str(options.sink_id), 0, 1, zombie_id)
    zombie.produce(options.progress_topic, claim.encode(), partition=0)
    zombie.produce(topic, b"zombie")
    progress_reader = Consumer({"bootstrap.servers": bootstrap, "group.id": options.progress_group})
    zombie.send_offsets_to_transaction(
        [TopicPartition(options.progress_topic, 0, 2)],
        progress_reader.consumer_group_metadata(),
        30,
    )
    zombie.flush(30)
    retry = _write(options, worker, 1, attempt=1)
    assert not retry.new_producer and not retry.skipped and retry.rows == ROWS
    values = read_all(bootstrap, topic)
    assert b"zombie" not in values and len(values) == 2 * ROWS == len(set(values))
    with pytest.raises(KafkaException):  # fenced
        zombie.commit_transaction(10)
    progress_reader.close()


class _Interleaved(ClientPool):
    """A worker that runs `meanwhile` once, when its task asks for its writer: after the
    task read its progress and before it claims the slot."""

    def __init__(self, meanwhile) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.meanwhile = meanwhile

    def writer(self, options):  # type: ignore[no-untyped-def]
        if self.meanwhile is not None:
            run, self.meanwhile = self.meanwhile, None
            run()
        return super().writer(options)


@dataclass
class _Midway:
    """A task's input that runs `meanwhile` before its first row (after the claim)."""

    meanwhile: object

    def input(self, batches, task, flush):  # type: ignore[no-untyped-def]
        self.meanwhile()  # type: ignore[operator]
        yield from batches


@pytest.mark.parametrize(
    ("order", "protocol"),
    [
        ("later-claim-runs-midway", "claims"),
        ("later-claim-runs-midway", "no-fence"),
        ("later-claim-runs-midway", "claims-ignored"),
        ("earlier-claim-commits-midway", "claims"),
        ("earlier-claim-commits-midway", "claims-ignored"),
    ],
)
def test_two_live_attempts_of_one_slot_write_it_once(
    bootstrap: str, monkeypatch: pytest.MonkeyPatch, order: str, protocol: str
) -> None:
    """Two attempts of the same task and batch alive at once on two workers (a speculative
    attempt, a stage retried while its zombie runs, the task of a dead driver's run): the
    slot's claims let one write. Without them, or without the fence, both do: the batch
    twice."""
    if protocol == "claims-ignored":
        monkeypatch.setattr(claims, "foreign_claims", lambda *args: [])
    if protocol == "no-fence":
        monkeypatch.setattr(ClientPool, "fence", lambda *args: None)
    topic = create_topic(bootstrap, unique("live"), partitions=1)
    options = parse_write_options(
        {"kafka.bootstrap.servers": bootstrap, "topic": topic, "sink.id": unique("sink")}
    )
    _write(options, ClientPool(), 0)
    a, z = ClientPool(), ClientPool()
    outcomes: dict[str, object] = {}

    def run(name: str, pool: ClientPool, faults=None) -> None:  # type: ignore[no-untyped-def]
        try:
            outcomes[name] = _write(options, pool, 1, attempt=int(name == "z"), faults=faults)
        except Exception as exc:
            outcomes[name] = exc

    if order == "later-claim-runs-midway":
        # A claims, then Z claims after it and runs to its end before A writes a row
        run("a", a, _Midway(lambda: run("z", z)))
    else:
        # Z reads the progress, then A claims and commits, then Z claims
        run("z", _Interleaved(lambda: run("a", a)))
    written = [m for m in outcomes.values() if isinstance(m, SinkCommitMessage) and not m.skipped]
    counts = Counter(read_all(bootstrap, topic))
    assert set(counts) == {b"b%d-r%02d" % (b, i) for b in range(2) for i in range(ROWS)}
    if protocol == "claims":
        assert len(written) == 1 and sum(counts.values()) == 2 * ROWS, outcomes
    else:
        assert len(written) == 2 and sum(counts.values()) == 3 * ROWS, outcomes
