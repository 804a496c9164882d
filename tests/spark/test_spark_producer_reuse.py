"""A worker's writer kept across tasks of any slot and micro-batches, and the claims that
fence another attempt of the same slot (`oncelog.spark.claims`). Each `ClientPool` plays one
worker; the writer runs as Spark would run it in that worker (no Spark session needed). The
controls show the duplicates without the protocol: at_least_once, and the claims ignored."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType

from oncelog.spark import claims
from oncelog.spark.claims import ProgressTopicError
from oncelog.spark.options import WriteOptions
from oncelog.spark.producers import ClientPool, ConnectionWatch
from oncelog.spark.writer import (
    ClientCallStuck,
    SinkCommitMessage,
    SinkGuaranteeError,
    TaskAttempt,
    WriterLostConnection,
    _ClaimFenced,
    _ClusterSteps,
    write_task,
)
from oncelog.testing.process import BrokerProcess
from oncelog.testing.spark import FailAfter, SimulatedCrash

from .spark_helpers import TASK_ROWS as ROWS
from .spark_helpers import create_topic, read_all, unique
from .spark_helpers import new_sink as _sink
from .spark_helpers import task_batches as _rows

CRASH_AFTER = 15


def _write(options, pool: ClientPool, batch: int, attempt: int = 0, faults=None, slot: int = 0):  # type: ignore[no-untyped-def]
    return write_task(options, TaskAttempt(slot, attempt, batch), iter(_rows(batch)), faults, pool)


def test_a_kept_producer_writes_every_batch_without_a_new_init(
    bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = create_topic(bootstrap, unique("kept"), partitions=1)
    options = _sink(bootstrap, topic)
    other_sink = _sink(bootstrap, topic)
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
    options = _sink(bootstrap, topic, {"delivery.guarantee": guarantee})
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


@pytest.mark.parametrize("fence", [True, False])
def test_a_dead_attempt_holding_the_progress_open_is_fenced(
    bootstrap: str, monkeypatch: pytest.MonkeyPatch, fence: bool
) -> None:
    """An attempt that died between adding its progress to its transaction and committing
    leaves the progress pending: the next attempt does not wait for that transaction's
    timeout, it fences the writer that claimed the slot, which aborts the dead transaction.
    The control, without the fence: the retry waits in vain (its wait is cut to a few
    seconds here, for a transaction that lasts a minute) and the dead attempt can still
    commit its batch."""
    import oncelog.spark.writer as writer_module

    monkeypatch.setattr(writer_module, "PENDING_PROGRESS_WAIT_S", 1.0)
    if not fence:
        monkeypatch.setattr(ClientPool, "fence", lambda *args: None)
        monkeypatch.setattr(writer_module, "TRANSACTION_TIMEOUT_S", 4.0)
    topic = create_topic(bootstrap, unique("pending"), partitions=1)
    options = _sink(bootstrap, topic)
    worker = ClientPool()
    _write(options, worker, 0)
    # the dead attempt of batch 1, elsewhere: its own writer, claim, records and progress sent
    zombie_id = unique("oncelog-sink-zombie")
    zombie = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": zombie_id,
            "transaction.timeout.ms": 60000,
        }
    )
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
    if fence:
        retry = _write(options, worker, 1, attempt=1)
        assert not retry.new_producer and not retry.skipped and retry.rows == ROWS
        with pytest.raises(KafkaException):  # fenced
            zombie.commit_transaction(10)
    else:
        with pytest.raises(KafkaException, match=r"[Tt]imed out"):
            _write(options, worker, 1, attempt=1)
        zombie.commit_transaction(10)  # the dead attempt was not fenced: it still commits
    values = read_all(bootstrap, topic)
    assert (b"zombie" in values) is not fence
    assert len(values) == ROWS + (ROWS if fence else 1) == len(set(values))
    progress_reader.close()


def _fence_from_another_worker(options: WriteOptions, worker: ClientPool) -> None:
    """Fence the worker's kept writer while it is idle, as a later attempt of a slot would
    whose read missed that writer's commit (`claims`: a fence can reach a live writer)."""
    kept = worker.writer(options)
    ClientPool().fence(options, kept.transactional_id)


@pytest.mark.parametrize("retries", [True, False])
def test_a_kept_writer_fenced_while_idle_claims_again_with_a_new_writer(
    bootstrap: str, monkeypatch: pytest.MonkeyPatch, retries: bool
) -> None:
    """The control, without the retry: the task fails, and Spark would run it again."""
    import oncelog.spark.writer as writer_module

    monkeypatch.setattr(writer_module, "RETRY_A_FENCED_CLAIM", retries)
    topic = create_topic(bootstrap, unique("fenced"), partitions=1)
    options = _sink(bootstrap, topic)
    worker = ClientPool()
    _write(options, worker, 0)
    _fence_from_another_worker(options, worker)
    if retries:
        done = _write(options, worker, 1)
        assert done.new_producer and done.rows == ROWS and not done.skipped
    else:
        with pytest.raises(_ClaimFenced):
            _write(options, worker, 1)
    assert _write(options, worker, 2).rows == ROWS  # a new writer either way
    assert len(read_all(bootstrap, topic)) == (3 if retries else 2) * ROWS


@pytest.mark.parametrize("bounded", [True, False])
def test_a_slot_idle_beyond_the_retention_of_its_claims_writes_again(
    bootstrap: str, monkeypatch: pytest.MonkeyPatch, bounded: bool
) -> None:
    """The claims after a slot's last commit were deleted (the slot idle longer than the
    topic's retention, here DeleteRecords): the claims read starts at the partition's last
    stable offset. The control, without that: the read fails for good."""
    topic = create_topic(bootstrap, unique("idle"), partitions=1)
    progress_topic = create_topic(
        bootstrap, unique("progress"), partitions=1, config=dict(claims.PROGRESS_TOPIC_CONFIG)
    )
    options = _sink(bootstrap, topic, {"sink.progress.topic": progress_topic})
    worker = ClientPool()
    _write(options, worker, 0)
    others = _sink(bootstrap, topic, {"sink.progress.topic": progress_topic})
    for batch in range(3):  # another sink's claims and markers after ours, then all deleted
        _write(others, worker, batch)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    end = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("end")})
    _low, high = end.get_watermark_offsets(TopicPartition(progress_topic, 0), 10, cached=False)
    end.close()
    deleted = admin.delete_records([TopicPartition(progress_topic, 0, high)])
    next(iter(deleted.values())).result(30)
    if not bounded:
        take = _ClusterSteps.take

        def no_lookup(self: _ClusterSteps, step: claims.Step) -> claims.Answer:
            return 0 if isinstance(step, claims.LookUpStableOffset) else take(self, step)

        monkeypatch.setattr(_ClusterSteps, "take", no_lookup)
        with pytest.raises(SinkGuaranteeError, match="deleted"):
            _write(options, worker, 1)
    else:
        assert _write(options, worker, 1).rows == ROWS
        assert len(read_all(bootstrap, topic)) == 5 * ROWS


def _restart_scenario(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watched: bool
) -> BrokerProcess:
    """The broker of a restart scenario (not started); the sink gives up on a stuck call
    after 8 s, not 70; unless `watched`, no writer notices a lost connection (the control)."""
    import oncelog.spark.writer as writer_module

    monkeypatch.setattr(writer_module, "SEND_OFFSETS_BOUND_S", 8.0)
    if not watched:
        monkeypatch.setattr(ConnectionWatch, "on_error", lambda self, error: None)
    return BrokerProcess(tmp_path / "broker", {"num.partitions": "1"})


@pytest.mark.slow
@pytest.mark.parametrize("watched", [True, False])
def test_a_writer_that_lost_its_broker_connection_is_not_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watched: bool
) -> None:
    """After a broker restart each worker makes a new writer and writes at once. The
    control, the kept writers reused anyway: librdkafka's send_offsets_to_transaction hangs
    on the group coordinator it had cached (librdkafka #5456, #5511) until the sink gives
    up on it (after 70 s; 8 s here)."""
    with _restart_scenario(tmp_path, monkeypatch, watched) as broker:
        bootstrap = broker.bootstrap_servers
        topic = create_topic(bootstrap, unique("restart"), partitions=2)
        options = _sink(bootstrap, topic)
        workers = [ClientPool(), ClientPool()]
        for slot, worker in enumerate(workers):
            _write(options, worker, 0, slot=slot)
        broker.restart()  # same port: every kept connection breaks
        outcomes: list[object] = []
        for slot, worker in enumerate(workers):
            try:
                outcomes.append(_write(options, worker, 1, slot=slot))
            except ClientCallStuck as stuck:
                outcomes.append(stuck)
                outcomes.append(_write(options, worker, 1, attempt=1, slot=slot))  # Spark's retry
        if watched:
            assert [m.new_producer for m in outcomes if isinstance(m, SinkCommitMessage)] == [
                True,
                True,
            ]
        assert any(isinstance(o, ClientCallStuck) for o in outcomes) is not watched, outcomes
        expected = {b"b%d-r%02d" % (batch, i) for batch in range(2) for i in range(ROWS)}
        assert Counter(read_all(bootstrap, topic)) == dict.fromkeys(expected, 2)  # one a slot


@pytest.mark.slow
@pytest.mark.parametrize("watched", [True, False])
def test_a_writer_whose_broker_restarts_during_a_task_fails_it_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watched: bool
) -> None:
    """A kept writer (its group coordinator cached) whose broker restarts between two of
    the task's input batches: the task fails before send_offsets_to_transaction and the
    retry writes with a new writer. The control, the lost connection not noticed: the call
    hangs on the cached coordinator (librdkafka #5456, #5511) until the sink gives up on
    it (after 70 s; 8 s here), as after the demo's broker restart (docs/spark.md)."""
    with _restart_scenario(tmp_path, monkeypatch, watched) as broker:
        bootstrap = broker.bootstrap_servers
        topic = create_topic(bootstrap, unique("mid-task"), partitions=1)
        options = _sink(bootstrap, topic)
        worker = ClientPool()
        _write(options, worker, 0)  # the kept writer has looked its group coordinator up
        with pytest.raises(WriterLostConnection if watched else ClientCallStuck):
            write_task(options, TaskAttempt(0, 0, 1), restarting_midway(broker, 1), None, worker)
        retry = _write(options, worker, 1, attempt=1)  # Spark's retry
        assert retry.new_producer and retry.rows == ROWS
        expected = {b"b%d-r%02d" % (batch, i) for batch in range(2) for i in range(ROWS)}
        assert Counter(read_all(bootstrap, topic)) == dict.fromkeys(expected, 1)


@pytest.mark.slow
def test_a_writer_made_for_the_task_goes_on_through_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer made for this task has looked no group coordinator up: its broker
    restarting in the middle of the task does not fail it (Spark's retries, each such a
    writer, are not used up during a rolling restart), and nothing hangs (the bound: 8 s)."""
    with _restart_scenario(tmp_path, monkeypatch, watched=True) as broker:
        bootstrap = broker.bootstrap_servers
        topic = create_topic(bootstrap, unique("mid-task-new"), partitions=1)
        options = _sink(bootstrap, topic)
        message = write_task(
            options, TaskAttempt(0, 0, 0), restarting_midway(broker, 0), None, ClientPool()
        )
        assert message.new_producer and message.rows == ROWS and not message.skipped
        expected = {b"b0-r%02d" % i for i in range(ROWS)}
        assert Counter(read_all(bootstrap, topic)) == dict.fromkeys(expected, 1)


def restarting_midway(broker: BrokerProcess, batch: int) -> Iterator[pa.RecordBatch]:
    """A task's input for ``batch`` that restarts ``broker`` (same port: every connection
    to it breaks) after handing over its first Arrow batch."""
    first, *rest = _rows(batch)
    yield first
    broker.restart()
    yield from rest


@pytest.mark.parametrize("checked", [True, False])
def test_a_compacted_progress_topic_is_refused(
    bootstrap: str, monkeypatch: pytest.MonkeyPatch, checked: bool
) -> None:
    """Compaction could remove a claim before a later attempt reads it. The sink refuses
    such a topic; without that check, the broker refuses the claim (it has no key)."""
    if not checked:
        monkeypatch.setattr(claims, "check_progress_topic", lambda *args: None)
    progress_topic = create_topic(
        bootstrap, unique("compacted"), partitions=1, config={"cleanup.policy": "compact"}
    )
    topic = create_topic(bootstrap, unique("out"), partitions=1)
    options = _sink(bootstrap, topic, {"sink.progress.topic": progress_topic})
    expected = "cleanup.policy=compact" if checked else "claim failed"
    with pytest.raises(RuntimeError, match=expected) as refused:
        _write(options, ClientPool(), 0)
    assert type(refused.value) is (ProgressTopicError if checked else RuntimeError)
    assert read_all(bootstrap, topic) == []


def test_the_sink_creates_its_progress_topic_deleting_by_age_only(bootstrap: str) -> None:
    topic = create_topic(bootstrap, unique("out"), partitions=1)
    progress_topic = unique("progress")
    options = _sink(bootstrap, topic, {"sink.progress.topic": progress_topic})
    _write(options, ClientPool(), 0)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (described,) = admin.describe_configs(
        [ConfigResource(ResourceType.TOPIC, progress_topic)]
    ).values()
    entries = described.result(30)
    assert {  # set on the topic, whatever the cluster's defaults
        key: (entries[key].value, entries[key].source) for key in claims.PROGRESS_TOPIC_CONFIG
    } == {
        key: (value, ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
        for key, value in claims.PROGRESS_TOPIC_CONFIG.items()
    }


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
    options = _sink(bootstrap, topic)
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
