"""A sink slot's progress read through the worker's admin client (`progress_read`): a stable
read waits for the transaction that holds the progress and then reads what it committed;
held beyond its time it is not read; an error that asking again cannot clear fails at once.
A task reads its progress this way, not through its group's consumer."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from oncelog.spark import progress_read
from oncelog.spark.options import WriteOptions, parse_write_options
from oncelog.spark.producers import ClientPool, ConnectionWatch
from oncelog.spark.writer import TaskAttempt, write_task
from oncelog.testing.process import BrokerProcess

from .spark_helpers import create_topic, read_all, unique

HOLD_S = 0.5


def _held_offset(bootstrap: str, group: str, slot: TopicPartition) -> Producer:
    """A producer whose open transaction holds `group`'s offset 5 (metadata "m") of `slot`."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("held")})
    producer.init_transactions(30)
    producer.begin_transaction()
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        producer.send_offsets_to_transaction(
            [TopicPartition(slot.topic, slot.partition, 5, metadata="m")],
            member.consumer_group_metadata(),
            30,
        )
    finally:
        member.close()
    return producer


def test_a_stable_read_waits_for_the_transaction_holding_the_offset(bootstrap: str) -> None:
    """The read asks again while the broker answers UNSTABLE_OFFSET_COMMIT, and returns what
    the transaction committed. The control: the materialised read, at the same moment,
    does not see the held offset."""
    slot = TopicPartition(create_topic(bootstrap, unique("progress"), partitions=1), 0)
    group = unique("group")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    holder = _held_offset(bootstrap, group, slot)
    materialised = progress_read.committed(admin, group, slot, stable=False, timeout_s=10)
    assert materialised.offset < 0  # the control: nothing committed yet
    committer = threading.Timer(HOLD_S, lambda: holder.commit_transaction(30))
    started = time.monotonic()
    committer.start()
    try:
        read = progress_read.committed(admin, group, slot, stable=True, timeout_s=30)
    finally:
        committer.join()
    assert time.monotonic() - started >= HOLD_S
    assert (read.offset, read.metadata) == (5, "m")


def test_a_stable_read_held_beyond_its_time_is_not_read(bootstrap: str) -> None:
    slot = TopicPartition(create_topic(bootstrap, unique("progress"), partitions=1), 0)
    group = unique("group")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    holder = _held_offset(bootstrap, group, slot)
    started = time.monotonic()
    with pytest.raises(progress_read.ProgressNotRead, match=r"UNSTABLE|unstable"):
        progress_read.committed(admin, group, slot, stable=True, timeout_s=HOLD_S)
    assert time.monotonic() - started < HOLD_S + 5
    holder.abort_transaction(30)


class _RefusingAdmin:
    """An admin client whose every OffsetFetch answers `code` for the partition."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.asked = 0

    def list_consumer_group_offsets(self, requests, **_kwargs):  # type: ignore[no-untyped-def]
        self.asked += 1
        (request,) = requests
        answer = SimpleNamespace(error=KafkaError(self.code))
        result: Future[object] = Future()
        result.set_result(SimpleNamespace(topic_partitions=[answer]))
        return {request.group_id: result}


def test_an_error_asking_again_cannot_clear_fails_at_once() -> None:
    admin = _RefusingAdmin(KafkaError.GROUP_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException, match=r"GROUP_AUTHORIZATION_FAILED|[Aa]uthoriz"):
        progress_read.committed(admin, "g", TopicPartition("p", 0), stable=True, timeout_s=10)  # type: ignore[arg-type]
    assert admin.asked == 1


class _UnreachableGroupMember(ClientPool):
    """A worker whose sink group consumers reach no broker: a task that read its progress
    through one would wait for it in vain."""

    def progress(self, options: WriteOptions) -> Consumer:
        return Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": options.progress_group})


def test_a_task_reads_its_progress_without_its_group_consumer(
    bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task's group consumer is only asked for its group metadata (local): the task
    writes its batch although that consumer reaches no broker."""
    import oncelog.spark.writer as writer_module

    monkeypatch.setattr(writer_module, "PENDING_PROGRESS_WAIT_S", 2.0)
    monkeypatch.setattr(writer_module, "TRANSACTION_TIMEOUT_S", 5.0)
    topic = create_topic(bootstrap, unique("member"), partitions=1)
    options = parse_write_options(
        {"kafka.bootstrap.servers": bootstrap, "topic": topic, "sink.id": unique("sink")}
    )
    rows = pa.record_batch([pa.array([b"a", b"b"], pa.binary())], names=["value"])
    pool = _UnreachableGroupMember()
    for batch in (0, 1):
        done = write_task(options, TaskAttempt(0, 0, batch), iter([rows]), None, pool)
        assert done.rows == 2 and not done.skipped
    assert sorted(read_all(bootstrap, topic)) == [b"a", b"a", b"b", b"b"]


@pytest.mark.parametrize("watched", [True, False])
def test_a_kept_admin_client_that_lost_a_connection_is_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watched: bool
) -> None:
    """After a broker restart the worker reads progress through a new admin client (the
    kept one could wait in vain on the group coordinator it had cached: `KeptCluster`),
    and the next batch is written. The control, the connections unwatched: the worker
    keeps the admin client that lost its connection."""
    if not watched:
        monkeypatch.setattr(ConnectionWatch, "on_error", lambda self, error: None)
    with BrokerProcess(tmp_path / "broker", {"num.partitions": "1"}) as broker:
        bootstrap = broker.bootstrap_servers
        topic = create_topic(bootstrap, unique("restart"), partitions=1)
        options = parse_write_options(
            {"kafka.bootstrap.servers": bootstrap, "topic": topic, "sink.id": unique("sink")}
        )
        rows = pa.record_batch([pa.array([b"a"], pa.binary())], names=["value"])
        pool = ClientPool()
        write_task(options, TaskAttempt(0, 0, 0), iter([rows]), None, pool)
        before = pool.cluster(options)
        broker.restart()  # same port: every kept connection breaks
        assert (pool.cluster(options) is not before) is watched
        if watched:
            write_task(options, TaskAttempt(0, 0, 1), iter([rows]), None, pool)
            assert read_all(bootstrap, topic) == [b"a", b"a"]
