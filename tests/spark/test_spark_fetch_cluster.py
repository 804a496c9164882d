"""A batch read's own Fetch path (`oncelog.spark.fetch`) on a three-broker cluster: each
range is fetched from its partition's leader, found through a bootstrap server that leads
none of them, and a leader that moves between two answers hands the rest of the range to
librdkafka, which reads it from the new leader: every row once, in order.

The leader moves two ways: stopped cleanly (its connection closes), and paused (SIGSTOP)
until the controller elects another, then resumed with the reader's next Fetch still in
flight on its connection. Meanwhile records the old leader never sees are written to the
new one, inside the range: whatever the stale leader answers (its own records, nothing
at its log end, an error once it learns it follows), the range cannot end on its
connection.

And a topic the brokers' cleaner really compacted (committed and aborted transactions
among plain records, keys written again and again): the Fetch path alone returns what
librdkafka returns, row for row, under both isolation levels."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.spark import consume, fetch, record_columns
from oncelog.spark.consume import read_range
from oncelog.spark.offsets import OffsetRange
from oncelog.spark.options import ReadOptions
from oncelog.testing.cluster import LocalCluster

from .spark_helpers import (
    fetch_read_options,
    hand_over,
    produce_transaction,
    refuse_librdkafka,
    unique,
)

RECORDS = 200
MORE = 50  # written to the new leader once the old one is gone, inside the range
TIMEOUT_S = 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    config = {
        "offsets.topic.num.partitions": "1",  # librdkafka's group: one coordinator
        "transaction.state.log.num.partitions": "1",
        "log.cleaner.backoff.ms": "100",  # the cleaner looks often: the test waits for it
    }
    with LocalCluster(tmp_path_factory.mktemp("fetch"), brokers=3, config=config) as running:
        yield running


def _topic(cluster: LocalCluster, partitions: int, leading: list[int] | None = None) -> str:
    """A topic of replication factor 3 whose partitions hold RECORDS records each; with
    `leading`, partition p's preferred replica (its leader) is broker leading[p]."""
    name = unique("fetch-cluster")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    if leading is None:
        topic = NewTopic(name, partitions, 3)
    else:
        brokers = cluster.broker_ids
        assignment = [[b, *(o for o in brokers if o != b)] for b in leading]
        topic = NewTopic(name, len(assignment), replica_assignment=assignment)
    admin.create_topics([topic])[name].result(TIMEOUT_S)
    for partition in range(partitions):
        cluster.wait_for_leader(name, partition)
        _produce(cluster.bootstrap_servers, name, partition, range(RECORDS))
    return name


def _produce(bootstrap: str, topic: str, partition: int, offsets: range) -> None:
    """Batches of 10 records, each acknowledged by every in-sync replica (acks=all)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in offsets:
        producer.produce(topic, value=_value(partition, i), partition=partition)
        if i % 10 == 9:
            assert producer.flush(TIMEOUT_S) == 0
    assert producer.flush(TIMEOUT_S) == 0


def _value(partition: int, offset: int) -> bytes:
    return b"p%d-%04d" % (partition, offset)


def _read(
    options: ReadOptions, topic: str, partition: int, end: int = RECORDS
) -> list[tuple[int, bytes]]:
    rows: list[tuple[int, bytes]] = []
    for batch in read_range(options, OffsetRange(topic, partition, 0, end), "fetch-cluster"):
        rows.extend(
            zip(batch.column("offset").to_pylist(), batch.column("value").to_pylist(), strict=True)
        )
    return rows


def _all_columns(options: ReadOptions, topic: str, end: int) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for batch in read_range(options, OffsetRange(topic, 0, 0, end), "fetch-cluster"):
        rows.extend(zip(*(column.to_pylist() for column in batch.columns), strict=True))
    return rows


def test_each_range_is_fetched_from_its_leader(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed = 1  # the bootstrap server, which leads none of the partitions
    topic = _topic(cluster, partitions=3, leading=[2, 3, 2])
    leaders = {p: cluster.leader(topic, p) for p in range(3)}
    assert seed not in leaders.values() and set(leaders.values()) == {2, 3}, leaders
    monkeypatch.setattr(consume, "_consumed", refuse_librdkafka)
    options = fetch_read_options(cluster.address(seed), topic)
    for partition in range(3):
        rows = _read(options, topic, partition)
        assert rows == [(o, _value(partition, o)) for o in range(RECORDS)], partition


def _after_answers(k: int, move: Callable[[], None]) -> Callable[..., Any]:
    """record_columns.arrow_batch, which runs once per Fetch answer, calling `move` after
    the k-th answer is decoded (the next Fetch is already sent)."""
    real = record_columns.arrow_batch
    calls = [0]

    def arrow_batch(*args: Any) -> Any:
        batch = real(*args)
        calls[0] += 1
        if calls[0] == k:
            move()
        return batch

    return arrow_batch


@pytest.mark.parametrize("how", ["stopped", "paused"])
def test_a_leader_moving_between_two_answers_hands_the_rest_to_librdkafka(
    cluster: LocalCluster,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    how: str,
) -> None:
    topic = _topic(cluster, partitions=1)
    leader = cluster.wait_for_leader(topic, 0)
    seed = next(b for b in cluster.broker_ids if b != leader)
    others = ",".join(cluster.address(b) for b in cluster.broker_ids if b != leader)

    def move() -> None:
        if how == "stopped":
            cluster.terminate(leader)
            cluster.wait_for_leader(topic, 0, not_in={leader}, timeout_s=TIMEOUT_S)
            _produce(others, topic, 0, range(RECORDS, RECORDS + MORE))
        else:  # its ZooKeeper session expires while it sleeps: another replica is elected
            cluster.pause(leader)
            try:
                cluster.wait_for_leader(topic, 0, not_in={leader}, timeout_s=TIMEOUT_S)
                _produce(others, topic, 0, range(RECORDS, RECORDS + MORE))
            finally:
                cluster.resume(leader)

    caplog.set_level(logging.INFO, logger="oncelog.spark.consume")
    try:
        with monkeypatch.context() as patched:
            patched.setattr(fetch, "FETCH_MAX_BYTES", 100)  # one batch of 10 an answer
            patched.setattr(record_columns, "arrow_batch", _after_answers(3, move))
            rows = _read(fetch_read_options(cluster.address(seed), topic), topic, 0, RECORDS + MORE)
    finally:
        if how == "stopped":
            cluster.restart(leader)
        cluster.wait_for_brokers(cluster.broker_ids)
        cluster.wait_until_in_sync(timeout_s=TIMEOUT_S)
    assert rows == [(o, _value(0, o)) for o in range(RECORDS + MORE)]
    offset, why = hand_over(caplog.records)
    assert 30 <= offset <= RECORDS  # three answers of a batch each came before the move
    if how == "stopped":  # the connection went with the leader
        assert why.startswith(("no Fetch answer", "Fetch not sent")), why
    else:  # the stale leader answered on its connection: an error, or nothing at its end
        assert why.startswith(("Fetch answered error code", "no whole v2 batch")), why


COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "2048",
    "segment.ms": "200",
    "min.cleanable.dirty.ratio": "0.01",
}


def test_a_topic_the_cleaner_compacted_reads_as_librdkafka_reads_it(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    bootstrap = cluster.bootstrap_servers
    topic = unique("fetch-compacted")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3, config=COMPACTED)])[topic].result(TIMEOUT_S)
    cluster.wait_for_leader(topic, 0)
    plain = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    written, final = 0, {}  # records written; the last committed value of each key
    for round_ in range(8):  # keys written again and again; a committed and an aborted txn
        for i in range(30):
            key, value = b"k%d" % (i % 5), b"r%d-%02d" % (round_, i)
            plain.produce(topic, key=key, value=value, partition=0)
            final[key] = value
        assert plain.flush(TIMEOUT_S) == 0
        for commit in (True, False):
            prefix = b"c" if commit else b"a"
            values = [b"%s%d%d-%02d" % (prefix, i % 5, round_, i) for i in range(10)]
            produce_transaction(bootstrap, topic, values, commit=commit, partition=0)
            final.update({v[:3]: v for v in values if commit})  # the helper's key: value[:3]
        written += 50
        time.sleep(0.25)  # past segment.ms: the next append rolls the segment
    end = written + 2 * 8  # and a marker a transaction
    committed = fetch_read_options(bootstrap, topic)
    uncommitted = dataclasses.replace(committed, isolation_level="read_uncommitted")
    through_librdkafka = dataclasses.replace(uncommitted, own_fetch=False)
    deadline = time.monotonic() + TIMEOUT_S
    while len(_all_columns(through_librdkafka, topic, end)) > written // 2:
        assert time.monotonic() < deadline, "the cleaner did not compact the topic"
        time.sleep(0.5)
    for options in (committed, uncommitted):
        expected = _all_columns(dataclasses.replace(options, own_fetch=False), topic, end)
        with monkeypatch.context() as patched:
            patched.setattr(consume, "_consumed", refuse_librdkafka)
            assert _all_columns(options, topic, end) == expected, options.isolation_level
    # what the compacted log says under read_committed: each key's last committed value
    assert {key: value for key, value, *_ in _all_columns(committed, topic, end)} == final
