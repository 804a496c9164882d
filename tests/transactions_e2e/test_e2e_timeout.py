"""A producer that begins a transaction and goes silent is aborted after
transaction.timeout.ms and fenced when it comes back (issue 4).

Kafka's coordinator aborts a timed-out transaction with an epoch bump (the
PrepareEpochFence path), so the late producer's old epoch is refused: its commit must
fail and its records stay invisible, also if it then tries to write more.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from oncelog.coordinator_partitions import partition_for
from oncelog.testing import EmbeddedBroker
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

PARTITIONS = 2
TXN_TIMEOUT_MS = 1500
CLEANUP_MS = 200
# What librdkafka may report when the coordinator has bumped the epoch behind the
# producer's back: fenced (fatal), or the KIP-360 abortable epoch error.
EPOCH_ERRORS = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


@pytest.fixture
def fast_timeout_broker() -> Iterator[EmbeddedBroker]:
    config = {
        **FAST_START,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": str(CLEANUP_MS),
    }
    with EmbeddedBroker(config) as embedded:
        yield embedded


def _state(broker: EmbeddedBroker, tid: str) -> Any:
    assert broker.broker is not None
    coordinator = broker.broker.transactions
    return coordinator.shards[partition_for(tid, coordinator.num_partitions)].get(tid)


@pytest.mark.parametrize("comes_back_with", ["commit", "produce-then-commit"])
def test_silent_producer_is_aborted_and_fenced(
    fast_timeout_broker: EmbeddedBroker, topic: str, comes_back_with: str
) -> None:
    broker = fast_timeout_broker
    bootstrap = broker.bootstrap_servers
    assert broker.broker is not None
    create_topic(bootstrap, topic, PARTITIONS)
    tid = f"{topic}-silent"
    reported: list[Any] = []
    producer = txn_producer(
        bootstrap, tid, **{"transaction.timeout.ms": TXN_TIMEOUT_MS, "error_cb": reported.append}
    )
    epoch_before = _state(broker, tid).producer_epoch
    producer.begin_transaction()
    began = time.monotonic()
    assert (
        produce_flushed(producer, topic, [(p, b"silent-%d" % p) for p in range(PARTITIONS)])
        == [None] * 2
    )
    plain_produce(bootstrap, topic, [(p, b"plain-%d" % p) for p in range(PARTITIONS)])
    partitions = [broker.broker.topics.partition(topic, p) for p in range(PARTITIONS)]
    assert [p.last_stable_offset for p in partitions] == [0, 0]

    # The producer goes silent (no poll, no request). The coordinator aborts within a few s.
    wait_until(
        lambda: all(p.last_stable_offset == p.high_watermark == 3 for p in partitions),
        timeout_s=10,
        what="the timed-out transaction's abort markers",
    )
    aborted_after = time.monotonic() - began
    print(
        f"aborted {aborted_after:.2f} s after the transaction began "
        f"(timeout {TXN_TIMEOUT_MS} ms, cleanup every {CLEANUP_MS} ms)"
    )
    assert TXN_TIMEOUT_MS / 1000 <= aborted_after + 0.1, "aborted before its timeout"
    assert aborted_after < TXN_TIMEOUT_MS / 1000 + 3
    wait_until(
        lambda: _state(broker, tid).state is TxnState.COMPLETE_ABORT,
        timeout_s=5,
        what="COMPLETE_ABORT",
    )
    assert _state(broker, tid).producer_epoch == epoch_before + 1, "the abort must bump the epoch"

    # The producer comes back.
    late: list[Any] = []
    if comes_back_with == "produce-then-commit":
        try:
            producer.produce(
                topic,
                value=b"silent-late",
                partition=0,
                on_delivery=lambda err, msg: late.append(err),
            )
            producer.flush(TIMEOUT_S)
        except KafkaException as exc:
            late.append(exc.args[0])
        except SystemError as exc:  # see test_e2e_fencing: a fatal error raised in a callback
            assert isinstance(exc.__cause__, KafkaException), exc
            late.append(exc.__cause__.args[0])
        assert late and all(e is not None for e in late), f"a late record was acknowledged: {late}"
    with pytest.raises(KafkaException) as failed:
        producer.commit_transaction(TIMEOUT_S)
    error = failed.value.args[0]
    print(
        f"late deliveries: {[(e.code(), e.name()) for e in late]}; commit: code={error.code()} "
        f"name={error.name()} fatal={error.fatal()} abortable={error.txn_requires_abort()}; "
        f"error_cb: {[(e.code(), e.name()) for e in reported]}"
    )
    assert error.code() in EPOCH_ERRORS, error
    if error.txn_requires_abort():
        # librdkafka's recoverable path: abort, then the records must still be invisible
        producer.abort_transaction(TIMEOUT_S)

    ends = {p.index: p.high_watermark for p in partitions}
    assert all(p.last_stable_offset == p.high_watermark for p in partitions)
    for read in (read_confluent, read_kafka_python):
        got, positions = read(bootstrap, topic, ends, "read_committed")
        assert sorted(v for _, _, v in got) == [b"plain-0", b"plain-1"], read.__name__
        assert positions == ends
    assert _state(broker, tid).state is TxnState.COMPLETE_ABORT
