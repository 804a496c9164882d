"""The coordinator killed between PrepareCommit and the markers (issue 4): after the
restart the transaction is committed and visible to read_committed.

How the crash point is made deterministic: the broker runs in a child process
(BrokerProcess) started through a small launcher that replaces
``Partition.append_marker`` for the test topic by a function that records that it was
reached (a flag file) and raises, so no marker can reach the topic's partitions. The
coordinator answers EndTxn once PREPARE_COMMIT is durable in ``__transaction_state``
(Kafka answers then too), so when ``commit_transaction()`` returns, the log holds
PREPARE_COMMIT and the partitions hold no marker; the flag file proves the marker
writer got there. Then SIGKILL (no flush, no clean-shutdown marker), and a restart with
the ordinary broker, which must finish the commit from PREPARE_COMMIT.

A second test drives the same crash in-process with EmbeddedBroker (the marker writer is
made to fail by monkeypatching the class, the broker is stopped, and the clean-shutdown
marker removed so that the restart recovers the logs), which lets it inspect the
coordinator state directly.
"""

from __future__ import annotations

import stat
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from oncelog.broker.partition import Partition
from oncelog.client.connection import KafkaConnection
from oncelog.coordinator_partitions import partition_for
from oncelog.protocol.api_versions import ApiKey
from oncelog.testing import BrokerProcess, EmbeddedBroker
from oncelog.transactions.state import TxnState

from .e2e_helpers import (
    FAST_START,
    TIMEOUT_S,
    create_topic,
    plain_produce,
    produce_flushed,
    read_confluent,
    read_kafka_python,
    txn_producer,
    wait_until,
)

PARTITIONS = 3
CLEAN_SHUTDOWN_MARKER = ".oncelog_cleanshutdown"

LAUNCHER = """
import os, runpy, sys
from pathlib import Path
from oncelog.broker.partition import Partition

TOPIC = os.environ["E2E_BLOCK_MARKERS_TOPIC"]
FLAG = Path(os.environ["E2E_BLOCK_MARKERS_FLAG"])
real_append_marker = Partition.append_marker

def append_marker(self, *args, **kwargs):
    if self.topic == TOPIC:
        FLAG.write_text(f"{self.topic}-{self.index}\\n")
        raise RuntimeError("simulated crash: no marker for " + TOPIC)
    return real_append_marker(self, *args, **kwargs)

Partition.append_marker = append_marker
assert sys.argv[1:3] == ["-m", "oncelog"], sys.argv
sys.argv = ["oncelog", *sys.argv[3:]]
runpy.run_module("oncelog", run_name="__main__", alter_sys=True)
"""


def _describe_producers(bootstrap: str, topic: str) -> dict[int, list[Any]]:
    with KafkaConnection(bootstrap) as conn:
        response = conn.request(
            ApiKey.DESCRIBE_PRODUCERS,
            {"topics": [{"name": topic, "partition_indexes": list(range(PARTITIONS))}]},
        )
    return {p.partition_index: list(p.active_producers) for p in response.topics[0].partitions}


def _latest(bootstrap: str, topic: str, isolation: int) -> dict[int, int]:
    from datetime import timedelta

    with KafkaConnection(bootstrap) as conn:
        response = conn.request(
            ApiKey.LIST_OFFSETS,
            {
                "replica_id": -1,
                "isolation_level": isolation,
                "timeout": timedelta(seconds=10),
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}
                            for p in range(PARTITIONS)
                        ],
                    }
                ],
            },
        )
    return {p.partition_index: p.offset for p in response.topics[0].partitions}


def _open_txn_starts(bootstrap: str, topic: str) -> dict[int, list[int]]:
    return {
        p: sorted(r.current_txn_start_offset for r in rows if r.current_txn_start_offset >= 0)
        for p, rows in _describe_producers(bootstrap, topic).items()
    }


def _visible(bootstrap: str, topic: str, ends: dict[int, int]) -> dict[str, list[bytes]]:
    views = {}
    for read in (read_confluent, read_kafka_python):
        got, positions = read(bootstrap, topic, ends, "read_committed")
        assert positions == ends, read.__name__
        views[read.__name__] = sorted(v for _, _, v in got)
    return views


@pytest.mark.slow
def test_sigkill_between_prepare_commit_and_markers(
    tmp_path: Path, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    launcher = tmp_path / "launch_blocked_markers.py"
    launcher.write_text(textwrap.dedent(LAUNCHER))
    wrapper = tmp_path / "python-blocked-markers"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{launcher}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    flag = tmp_path / "marker-reached"
    monkeypatch.setenv("E2E_BLOCK_MARKERS_TOPIC", topic)
    monkeypatch.setenv("E2E_BLOCK_MARKERS_FLAG", str(flag))

    data_dir = tmp_path / "data"
    crashing = BrokerProcess(data_dir, FAST_START, python=str(wrapper))
    normal = BrokerProcess(data_dir, FAST_START)
    try:
        crashing.start()
        bootstrap = crashing.bootstrap_servers
        create_topic(bootstrap, topic, PARTITIONS)
        plain_produce(bootstrap, topic, [(p, b"plain-before-%d" % p) for p in range(PARTITIONS)])
        producer = txn_producer(bootstrap, f"{topic}-txn")
        producer.begin_transaction()
        values = [(p, b"txn-%d-%d" % (p, i)) for p in range(PARTITIONS) for i in range(2)]
        assert produce_flushed(producer, topic, values) == [None] * len(values)
        producer.commit_transaction(TIMEOUT_S)  # PREPARE_COMMIT durable: the decision
        wait_until(flag.exists, TIMEOUT_S, "the marker writer to reach the blocked topic")
        # No marker on any partition: the transaction still holds every LSO.
        assert _latest(bootstrap, topic, 1) == dict.fromkeys(range(PARTITIONS), 1)
        assert _latest(bootstrap, topic, 0) == dict.fromkeys(range(PARTITIONS), 3)
        assert _open_txn_starts(bootstrap, topic) == {p: [1] for p in range(PARTITIONS)}
        crashing.kill()
        assert not (data_dir / CLEAN_SHUTDOWN_MARKER).exists()
        producer.flush(0)
        del producer

        # -- restart with the ordinary broker --------------------------------------------
        started = time.monotonic()
        normal.start()
        bootstrap = normal.bootstrap_servers
        wait_until(
            lambda: _latest(bootstrap, topic, 1) == dict.fromkeys(range(PARTITIONS), 4),
            timeout_s=TIMEOUT_S,  # a broker process start and recovery on a loaded machine
            what="the resumed commit markers",
        )
        print(f"commit markers written {time.monotonic() - started:.2f} s after the restart began")
        assert _latest(bootstrap, topic, 0) == dict.fromkeys(
            range(PARTITIONS), 4
        )  # one marker each
        assert _open_txn_starts(bootstrap, topic) == {p: [] for p in range(PARTITIONS)}
        expected = sorted(
            [v for _, v in values] + [b"plain-before-%d" % p for p in range(PARTITIONS)]
        )
        for name, view in _visible(bootstrap, topic, dict.fromkeys(range(PARTITIONS), 4)).items():
            assert view == expected, name
        assert "resuming commit" in normal.read_log(current_run=True)
        normal.terminate()
    finally:
        crashing.kill()
        normal.kill()

    # The coordinator state the restarted broker left behind: COMPLETE_COMMIT, once.
    with EmbeddedBroker(FAST_START, data_dir=data_dir) as embedded:
        assert embedded.broker is not None
        coordinator = embedded.broker.transactions
        tid = f"{topic}-txn"
        shard = coordinator.shards[partition_for(tid, coordinator.num_partitions)]
        assert shard.get(tid).state is TxnState.COMPLETE_COMMIT
        assert all(
            embedded.broker.topics.partition(topic, p).high_watermark == 4
            for p in range(PARTITIONS)
        )  # no marker written twice


def test_unclean_restart_between_prepare_commit_and_markers_in_process(
    tmp_path: Path, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_append_marker = Partition.append_marker
    reached: list[str] = []

    def blocked(self: Partition, *args: Any, **kwargs: Any) -> int:
        if self.topic == topic:
            reached.append(f"{self.topic}-{self.index}")
            raise RuntimeError("simulated crash before the marker")
        return real_append_marker(self, *args, **kwargs)

    data_dir = tmp_path / "data"
    tid = f"{topic}-txn"
    monkeypatch.setattr(Partition, "append_marker", blocked)
    first = EmbeddedBroker(FAST_START, data_dir=data_dir).start()
    try:
        bootstrap = first.bootstrap_servers
        create_topic(bootstrap, topic, PARTITIONS)
        producer = txn_producer(bootstrap, tid)
        producer.begin_transaction()
        values = [(p, b"txn-%d" % p) for p in range(PARTITIONS)]
        assert produce_flushed(producer, topic, values) == [None] * PARTITIONS
        producer.commit_transaction(TIMEOUT_S)
        wait_until(lambda: bool(reached), TIMEOUT_S, "the marker writer")
        assert first.broker is not None
        coordinator = first.broker.transactions
        shard = coordinator.shards[partition_for(tid, coordinator.num_partitions)]
        assert shard.get(tid).state is TxnState.PREPARE_COMMIT
        assert [
            first.broker.topics.partition(topic, p).last_stable_offset for p in range(PARTITIONS)
        ] == [0] * PARTITIONS
        producer.flush(0)
        del producer
    finally:
        first.stop()  # the marker task is dead: nothing can complete the transaction now
    monkeypatch.setattr(Partition, "append_marker", real_append_marker)
    (data_dir / CLEAN_SHUTDOWN_MARKER).unlink()  # recover the logs as after a crash
    # (the producer snapshots written at stop are still there; the restart must not trust
    # them blindly, but they do describe the log as it is)

    with EmbeddedBroker(FAST_START, data_dir=data_dir) as second:
        assert second.broker is not None
        coordinator = second.broker.transactions
        shard = coordinator.shards[partition_for(tid, coordinator.num_partitions)]
        wait_until(
            lambda: shard.get(tid).state is TxnState.COMPLETE_COMMIT,
            timeout_s=10,
            what="COMPLETE_COMMIT after the restart",
        )
        partitions = [second.broker.topics.partition(topic, p) for p in range(PARTITIONS)]
        assert [(p.high_watermark, p.last_stable_offset) for p in partitions] == [
            (2, 2)
        ] * PARTITIONS
        views = _visible(second.bootstrap_servers, topic, dict.fromkeys(range(PARTITIONS), 2))
        for name, view in views.items():
            assert view == sorted(v for _, v in values), name


@pytest.mark.parametrize("clean", [True, False], ids=["clean-restart", "unclean-restart"])
def test_open_transaction_survives_a_restart(tmp_path: Path, topic: str, clean: bool) -> None:
    """The LSO of a partition with an open transaction is rebuilt after a restart, and
    the producer (reconnecting to the same port) can still commit it."""
    data_dir = tmp_path / "data"
    embedded = EmbeddedBroker(FAST_START, data_dir=data_dir).start()
    try:
        bootstrap = embedded.bootstrap_servers
        create_topic(bootstrap, topic, 1)
        plain_produce(bootstrap, topic, [(0, b"before")])
        producer = txn_producer(bootstrap, f"{topic}-txn")
        producer.begin_transaction()
        assert produce_flushed(producer, topic, [(0, b"txn-0"), (0, b"txn-1")]) == [None] * 2
        plain_produce(bootstrap, topic, [(0, b"after")])
        assert embedded.broker is not None
        partition = embedded.broker.topics.partition(topic, 0)
        assert (partition.high_watermark, partition.last_stable_offset) == (4, 1)
        port = embedded.port
        embedded.stop()
        if not clean:
            (data_dir / CLEAN_SHUTDOWN_MARKER).unlink()
        embedded = EmbeddedBroker(FAST_START, data_dir=data_dir, port=port).start()
        assert embedded.broker is not None
        partition = embedded.broker.topics.partition(topic, 0)
        assert (partition.high_watermark, partition.last_stable_offset) == (4, 1)
        producer.commit_transaction(TIMEOUT_S)
        wait_until(
            lambda: partition.last_stable_offset == partition.high_watermark == 5,
            timeout_s=10,
            what="the commit marker after the restart",
        )
        got, _positions = read_confluent(bootstrap, topic, {0: 5}, "read_committed")
        assert [v for _, _, v in got] == [b"before", b"txn-0", b"txn-1", b"after"]
    finally:
        embedded.stop()
