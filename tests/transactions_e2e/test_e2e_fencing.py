"""Zombie fencing (issue 4): two producers share a transactional.id; the second
init_transactions fences the first, whose later records are never visible to
read_committed consumers, while the second's are."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from oncelog.testing import EmbeddedBroker

from .e2e_helpers import (
    TIMEOUT_S,
    create_topic,
    produce_flushed,
    read_confluent,
    read_kafka_python,
    transactions_ended,
    txn_producer,
)

PARTITIONS = 2

# What librdkafka reports for a fenced producer: the broker's PRODUCER_FENCED (90) or
# INVALID_PRODUCER_EPOCH (47) become the fatal local error _FENCED (-144).
FENCED_CODES = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


def _fenced(error: Any) -> bool:
    return error is not None and error.code() in FENCED_CODES


def _produce_as_zombie(producer: Any, topic: str, values: list[tuple[int, bytes]]) -> list[Any]:
    """Produce and flush, collecting delivery errors and the KafkaErrors librdkafka raises
    from produce()/flush() once it is in its fatal state."""
    errors: list[Any] = []
    for partition, value in values:
        try:
            producer.produce(
                topic,
                value=value,
                partition=partition,
                on_delivery=lambda err, msg: errors.append(err),
            )
        except KafkaException as exc:
            errors.append(exc.args[0])
    for _ in range(3):  # a raise from flush can interrupt it: flush until it is empty
        try:
            if producer.flush(TIMEOUT_S) == 0:
                break
        except KafkaException as exc:
            errors.append(exc.args[0])
        except SystemError as exc:
            # confluent-kafka 2.16 raises the fatal error while it runs a Python callback
            # and then reports the callback as failed: the KafkaException is the cause.
            assert isinstance(exc.__cause__, KafkaException), exc
            errors.append(exc.__cause__.args[0])
    return errors


def _visible(broker: EmbeddedBroker, topic: str) -> dict[str, list[bytes]]:
    assert broker.broker is not None
    transactions_ended(broker, topic, PARTITIONS)
    ends = {p: broker.broker.topics.partition(topic, p).high_watermark for p in range(PARTITIONS)}
    views = {}
    for read in (read_confluent, read_kafka_python):
        got, positions = read(broker.bootstrap_servers, topic, ends, "read_committed")
        assert positions == ends
        views[read.__name__] = sorted(v for _, _, v in got)
    return views


@pytest.mark.parametrize("zombie_has_open_txn", [True, False], ids=["open-txn", "between-txns"])
def test_second_init_fences_first(
    broker: EmbeddedBroker, topic: str, zombie_has_open_txn: bool
) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic, PARTITIONS)
    tid = f"{topic}-shared"
    reported: list[Any] = []  # errors librdkafka reports on its own (error_cb)
    zombie = txn_producer(bootstrap, tid, error_cb=reported.append)
    zombie.begin_transaction()
    assert (
        produce_flushed(zombie, topic, [(0, b"z-committed-0"), (1, b"z-committed-1")]) == [None] * 2
    )
    zombie.commit_transaction(TIMEOUT_S)
    if zombie_has_open_txn:
        zombie.begin_transaction()
        assert produce_flushed(zombie, topic, [(0, b"z-open-0"), (1, b"z-open-1")]) == [None] * 2

    successor = txn_producer(bootstrap, tid)  # fences the zombie (and aborts its open txn)
    successor.begin_transaction()
    assert produce_flushed(successor, topic, [(0, b"s-0"), (1, b"s-1")]) == [None] * 2

    if not zombie_has_open_txn:
        zombie.begin_transaction()  # local only: the fence shows at the first request
    # The zombie writes again: its new partition registration / produce is refused...
    late = _produce_as_zombie(zombie, topic, [(0, b"z-late-0"), (1, b"z-late-1")])
    # ...and its commit fails with a fatal fenced error.
    with pytest.raises(KafkaException) as failed:
        zombie.commit_transaction(TIMEOUT_S)
    error = failed.value.args[0]
    print(
        f"zombie deliveries: {[e and (e.code(), e.name()) for e in late]}; "
        f"commit: code={error.code()} name={error.name()} fatal={error.fatal()} "
        f"abortable={error.txn_requires_abort()} retriable={error.retriable()}"
    )
    assert _fenced(error), error
    assert error.fatal(), error
    assert late and all(e is not None for e in late), "a late record of the zombie was acknowledged"
    assert any(_fenced(e) for e in late), late

    successor.commit_transaction(TIMEOUT_S)

    expected = sorted([b"z-committed-0", b"z-committed-1", b"s-0", b"s-1"])
    for name, view in _visible(broker, topic).items():
        assert view == expected, name
