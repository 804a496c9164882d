"""Seed 000, section 2: the idempotent producer's sequence flows, on the wire.

A raw protocol client sets producer id, epoch and base sequence of every batch itself, so
each flow is replayed exactly as the seed draws it, against a real (embedded) broker.

Sequence numbers: the seed's batches carry sequences 114-120, 121-124, 125-132, 133-142,
143-150 (and 151-155 in 2.4). We use them verbatim, batch sizes included: Kafka 4.x
accepts any first sequence from a producer the partition has no state for
(``ProducerAppendInfo.checkSequence``: with no current epoch every sequence is in order,
KIP-360), and ``test_new_producer_may_start_at_any_sequence`` pins that. So the base
offsets are 0, 7, 11, 19, 29 (and 37), the log end 37 (42 in 2.4).

Every record's value names its sequence number (``seq-114``), so reading the partition
back shows exactly what was stored, in which order, and whether anything twice.
See docs/idempotence.md for the answers and the Kafka reasoning behind them.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from oncelog.client.connection import KafkaConnection
from oncelog.protocol import codec
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import Record, build_batch, decode_records, iter_stored_batches
from oncelog.testing import EmbeddedBroker

INT32_MAX = (1 << 31) - 1
SEED_BATCHES = [(114, 120), (121, 124), (125, 132), (133, 142), (143, 150)]
SIXTH_BATCH = (151, 155)
SEED_BASE_OFFSETS = [0, 7, 11, 19, 29]
SEED_LOG_END = 37
# Recent timestamps: the broker expires producers idle for producer.id.expiration.ms,
# measured from the batches' own timestamps.
BASE_TS = int(time.time() * 1000)
_names = itertools.count()


# -- a raw idempotent producer ---------------------------------------------------------


def values(first: int, last: int) -> list[bytes]:
    """The record values of a batch carrying sequences first..last (wrapping at 2**31-1)."""
    count = (last - first) % (INT32_MAX + 1) + 1
    return [b"seq-%d" % ((first + i) % (INT32_MAX + 1)) for i in range(count)]


def batch(pid: int, epoch: int, first: int, last: int) -> bytes:
    return build_batch(
        [Record(b"k", v) for v in values(first, last)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=first,
        # at most ~17 minutes ahead: message.timestamp.after.max.ms (1 h) refuses further
        timestamp_ms=BASE_TS + first % 1_000_000,
    )


def produce_body(topic: str, records_by_partition: dict[int, bytes]) -> dict[str, Any]:
    return {
        "transactional_id": None,
        "acks": -1,
        "timeout": 10_000,
        "topic_data": [
            {
                "name": topic,
                "partition_data": [
                    {"index": p, "records": r} for p, r in records_by_partition.items()
                ],
            }
        ],
    }


class RawProducer:
    """One producer id on one connection; every field of every batch chosen by the test."""

    def __init__(self, conn: KafkaConnection, topic: str, epoch: int = 0) -> None:
        self.conn = conn
        self.topic = topic
        answer = conn.request(
            ApiKey.INIT_PRODUCER_ID,
            {
                "transactional_id": None,
                "transaction_timeout": 60_000,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
        assert answer.error_code == ErrorCode.none
        assert answer.producer_epoch == 0
        self.pid = answer.producer_id
        self.epoch = epoch

    def send(self, first: int, last: int, *, partition: int = 0, epoch: int | None = None) -> Any:
        """Produce one batch (sequences first..last); the partition's answer."""
        epoch = self.epoch if epoch is None else epoch
        response = self.conn.request(
            ApiKey.PRODUCE,
            produce_body(self.topic, {partition: batch(self.pid, epoch, first, last)}),
        )
        (topic,) = response.responses
        (answer,) = topic.partition_responses
        assert answer.index == partition
        return answer

    def send_many(self, batches: dict[int, tuple[int, int]]) -> dict[int, Any]:
        """One request carrying one batch for each of several partitions."""
        response = self.conn.request(
            ApiKey.PRODUCE,
            produce_body(
                self.topic, {p: batch(self.pid, self.epoch, *seqs) for p, seqs in batches.items()}
            ),
        )
        (topic,) = response.responses
        return {a.index: a for a in topic.partition_responses}


def accepted(answer: Any, base_offset: int) -> None:
    assert (answer.error_code, answer.base_offset) == (ErrorCode.none, base_offset), answer


def refused(answer: Any, code: ErrorCode) -> None:
    assert answer.error_code == code, answer
    assert answer.base_offset == -1


# -- reading the partition back ---------------------------------------------------------


def read_partition(
    conn: KafkaConnection, topic: str, partition: int = 0
) -> tuple[int, list[tuple[int, bytes]]]:
    """(high watermark, [(offset, value)]) of the whole partition, via Fetch v4."""
    stored: list[tuple[int, bytes]] = []
    offset = 0
    for _ in range(100):
        response = conn.request(
            ApiKey.FETCH,
            {
                "replica_id": -1,
                "max_wait": 0,
                "min_bytes": 0,
                "max_bytes": 1 << 20,
                "isolation_level": 0,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {
                                "partition": partition,
                                "fetch_offset": offset,
                                "partition_max_bytes": 1 << 20,
                            }
                        ],
                    }
                ],
            },
            version=4,
        )
        data = response.responses[0].partitions[0]
        assert data.error_code == ErrorCode.none
        records = data.records or b""
        for position, header in iter_stored_batches(records):
            for record in decode_records(records[position : position + header.size]):
                if record.offset >= offset:
                    stored.append((record.offset, record.value))
        if stored:
            offset = stored[-1][0] + 1
        if offset >= data.high_watermark:
            return data.high_watermark, stored
    raise AssertionError("fetch made no progress")


def assert_stored(
    conn: KafkaConnection, topic: str, batches: Sequence[tuple[int, int]], partition: int = 0
) -> None:
    """The partition holds exactly these batches' records, in this order, once each, at
    contiguous offsets from 0."""
    expected = [v for first, last in batches for v in values(first, last)]
    high_watermark, stored = read_partition(conn, topic, partition)
    assert [v for _, v in stored] == expected
    assert [o for o, _ in stored] == list(range(len(expected)))
    assert high_watermark == len(expected)


def describe(conn: KafkaConnection, topic: str, partition: int = 0) -> list[Any]:
    response = conn.request(
        ApiKey.DESCRIBE_PRODUCERS, {"topics": [{"name": topic, "partition_indexes": [partition]}]}
    )
    (answer,) = response.topics[0].partitions
    assert answer.error_code == ErrorCode.none
    return list(answer.active_producers)


# -- fixtures --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as running:
        yield running


@pytest.fixture
def conn(broker: EmbeddedBroker) -> Iterator[KafkaConnection]:
    with KafkaConnection(broker.bootstrap_servers, timeout_s=10) as connection:
        yield connection


@pytest.fixture
def topic(conn: KafkaConnection) -> str:
    """A fresh two-partition topic per test."""
    name = f"flows-{next(_names)}"
    response = conn.request(
        ApiKey.CREATE_TOPICS,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": 2,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout": 10_000,
            "validate_only": False,
        },
    )
    assert response.topics[0].error_code == ErrorCode.none
    return name


@pytest.fixture
def producer(conn: KafkaConnection, topic: str) -> RawProducer:
    return RawProducer(conn, topic)


def send_seed(producer: RawProducer, batches: Sequence[tuple[int, int]] = SEED_BATCHES) -> None:
    for (first, last), base in zip(batches, SEED_BASE_OFFSETS, strict=True):
        accepted(producer.send(first, last), base)


# -- the seed's flows --------------------------------------------------------------------


def test_new_producer_may_start_at_any_sequence(producer: RawProducer) -> None:
    """KIP-360: a partition with no state for the producer accepts any first sequence, so
    the seed's numbering (starting at 114) is usable as drawn."""
    accepted(producer.send(114, 120), 0)
    assert [
        (p.producer_id, p.producer_epoch, p.last_sequence)
        for p in describe(producer.conn, producer.topic)
    ] == [(producer.pid, 0, 120)]


def test_2_1_success(producer: RawProducer) -> None:
    """Five batches, each acknowledged in order with the next offsets."""
    for (first, last), base in zip(SEED_BATCHES, SEED_BASE_OFFSETS, strict=True):
        accepted(producer.send(first, last), base)
    assert_stored(producer.conn, producer.topic, SEED_BATCHES)
    (state,) = describe(producer.conn, producer.topic)
    assert (
        state.producer_id,
        state.producer_epoch,
        state.last_sequence,
        state.last_timestamp,
        state.coordinator_epoch,
        state.current_txn_start_offset,
    ) == (producer.pid, 0, 150, BASE_TS + 143, -1, -1)


def test_2_2_missing_acks_retries_get_original_offsets(producer: RawProducer) -> None:
    """The acks of 133-142 and 143-150 are lost; the producer resends both. The broker
    answers success with the offsets they were first given and stores nothing again."""
    send_seed(producer)
    accepted(producer.send(133, 142), 19)
    accepted(producer.send(143, 150), 29)
    # Still answered the same after further retries, in any order, of any cached batch.
    accepted(producer.send(143, 150), 29)
    accepted(producer.send(114, 120), 0)
    assert_stored(producer.conn, producer.topic, SEED_BATCHES)
    # The window did not move: the next new batch follows 150.
    accepted(producer.send(151, 155), SEED_LOG_END)


def test_2_2_a_retry_must_match_the_whole_batch(producer: RawProducer) -> None:
    """A duplicate is the same first AND last sequence; a resend regrouped differently
    (same first sequence, other size) is out of order, not a duplicate."""
    send_seed(producer)
    refused(producer.send(143, 151), ErrorCode.out_of_order_sequence_number)
    refused(producer.send(144, 150), ErrorCode.out_of_order_sequence_number)
    assert_stored(producer.conn, producer.topic, SEED_BATCHES)


def test_2_3_missing_records_refused_then_resent_in_order(producer: RawProducer) -> None:
    """125-132 is lost on the way: 133-142 and 143-150 arrive after a gap and are refused
    with OUT_OF_ORDER_SEQUENCE_NUMBER, nothing appended. The producer resends from the
    first unacknowledged batch and the order is kept."""
    accepted(producer.send(114, 120), 0)
    accepted(producer.send(121, 124), 7)
    refused(producer.send(133, 142), ErrorCode.out_of_order_sequence_number)
    refused(producer.send(143, 150), ErrorCode.out_of_order_sequence_number)
    assert_stored(producer.conn, producer.topic, SEED_BATCHES[:2])
    assert describe(producer.conn, producer.topic)[0].last_sequence == 124
    accepted(producer.send(125, 132), 11)
    accepted(producer.send(133, 142), 19)
    accepted(producer.send(143, 150), 29)
    assert_stored(producer.conn, producer.topic, SEED_BATCHES)


def test_2_4_retry_outside_the_window_is_out_of_order_not_a_duplicate(
    producer: RawProducer,
) -> None:
    """Six batches in flight, the first one's ack lost. The partition caches the last 5
    batches (121-124 .. 151-155), so a retry of 114-120 is neither a cached duplicate nor
    the next sequence (156): Kafka 4.x answers OUT_OF_ORDER_SEQUENCE_NUMBER and stores
    nothing. (The seed says the broker stores it twice; that was never what the check
    does, since the producer's sequence has moved past 120.) A retry of 121-124, still
    inside the window, gets its original offset 7."""
    batches = [*SEED_BATCHES, SIXTH_BATCH]
    for (first, last), base in zip(batches, [*SEED_BASE_OFFSETS, SEED_LOG_END], strict=True):
        accepted(producer.send(first, last), base)
    log_end = SEED_LOG_END + 5

    first_retry = producer.send(114, 120)
    refused(first_retry, ErrorCode.out_of_order_sequence_number)
    assert "expected 156" in first_retry.error_message
    accepted(producer.send(121, 124), 7)
    accepted(producer.send(151, 155), SEED_LOG_END)

    assert_stored(producer.conn, producer.topic, batches)
    high_watermark, _ = read_partition(producer.conn, producer.topic)
    assert high_watermark == log_end
    assert describe(producer.conn, producer.topic)[0].last_sequence == 155


# -- pipelining: five requests in flight on one connection -------------------------------


def pipeline(conn: KafkaConnection, bodies: Sequence[dict[str, Any]]) -> list[Any]:
    """Send every request before reading any answer; answers must come back in order."""
    api = codec.api_codec(ApiKey.PRODUCE, conn.version_for(ApiKey.PRODUCE))
    ids = [9000 + i for i in range(len(bodies))]
    conn.send_raw(
        b"".join(
            codec.encode_request(api, cid, "pipeline", body)
            for cid, body in zip(ids, bodies, strict=True)
        )
    )
    answers = []
    for cid in ids:
        correlation_id, response = codec.decode_response(api, conn.receive_frame())
        assert correlation_id == cid
        answers.append(response.responses[0].partition_responses[0])
    return answers


def test_five_batches_pipelined_on_one_socket(producer: RawProducer) -> None:
    bodies = [
        produce_body(producer.topic, {0: batch(producer.pid, 0, f, last)})
        for f, last in SEED_BATCHES
    ]
    for answer, base in zip(pipeline(producer.conn, bodies), SEED_BASE_OFFSETS, strict=True):
        accepted(answer, base)
    # All five retried back-to-back (every ack lost): all five are duplicates.
    for answer, base in zip(pipeline(producer.conn, bodies), SEED_BASE_OFFSETS, strict=True):
        accepted(answer, base)
    assert_stored(producer.conn, producer.topic, SEED_BATCHES)


def test_pipelined_gap_refuses_everything_after_it(producer: RawProducer) -> None:
    """2.3 with the requests really in flight together: 125-132 never sent."""
    sent = [SEED_BATCHES[0], SEED_BATCHES[1], SEED_BATCHES[3], SEED_BATCHES[4]]
    bodies = [
        produce_body(producer.topic, {0: batch(producer.pid, 0, f, last)}) for f, last in sent
    ]
    first, second, third, fourth = pipeline(producer.conn, bodies)
    accepted(first, 0)
    accepted(second, 7)
    refused(third, ErrorCode.out_of_order_sequence_number)
    refused(fourth, ErrorCode.out_of_order_sequence_number)
    assert_stored(producer.conn, producer.topic, SEED_BATCHES[:2])


# -- epochs ---------------------------------------------------------------------------------


def test_epoch_below_the_current_one_is_invalid_producer_epoch(producer: RawProducer) -> None:
    accepted(producer.send(0, 2, epoch=0), 0)
    accepted(producer.send(0, 1, epoch=1), 3)  # a bumped epoch restarts at 0
    refused(producer.send(3, 4, epoch=0), ErrorCode.invalid_producer_epoch)
    # Even an exact retry of an old-epoch batch: the new epoch's window forgot it.
    refused(producer.send(0, 2, epoch=0), ErrorCode.invalid_producer_epoch)
    assert_stored(producer.conn, producer.topic, [(0, 2), (0, 1)])
    (state,) = describe(producer.conn, producer.topic)
    assert (state.producer_epoch, state.last_sequence) == (1, 1)


def test_new_epoch_must_start_at_sequence_zero(producer: RawProducer) -> None:
    accepted(producer.send(0, 4, epoch=0), 0)
    refused(producer.send(5, 6, epoch=1), ErrorCode.out_of_order_sequence_number)
    refused(producer.send(1, 2, epoch=1), ErrorCode.out_of_order_sequence_number)
    (state,) = describe(producer.conn, producer.topic)
    assert (state.producer_epoch, state.last_sequence) == (0, 4)  # the refusals changed nothing
    accepted(producer.send(0, 0, epoch=1), 5)
    assert_stored(producer.conn, producer.topic, [(0, 4), (0, 0)])


# -- partitions, wrap-around -----------------------------------------------------------------


def test_each_partition_is_validated_on_its_own(producer: RawProducer) -> None:
    """One request, two partitions: partition 0 in sequence, partition 1 with a gap. Only
    partition 1 is refused; partition 0 is appended. Sequences are per partition."""
    accepted(producer.send(0, 2, partition=1), 0)
    answers = producer.send_many({0: (114, 120), 1: (10, 12)})
    accepted(answers[0], 0)
    refused(answers[1], ErrorCode.out_of_order_sequence_number)
    # The same request again: partition 0's batch is a duplicate, partition 1 still refused.
    answers = producer.send_many({0: (114, 120), 1: (10, 12)})
    accepted(answers[0], 0)
    refused(answers[1], ErrorCode.out_of_order_sequence_number)
    answers = producer.send_many({0: (121, 124), 1: (3, 5)})
    accepted(answers[0], 7)
    accepted(answers[1], 3)
    assert_stored(producer.conn, producer.topic, [(114, 120), (121, 124)], partition=0)
    assert_stored(producer.conn, producer.topic, [(0, 2), (3, 5)], partition=1)


def test_sequence_wraps_from_int32_max_to_zero(producer: RawProducer) -> None:
    accepted(producer.send(INT32_MAX - 2, INT32_MAX), 0)
    accepted(producer.send(0, 1), 3)  # 2**31-1 is followed by 0
    (state,) = describe(producer.conn, producer.topic)
    assert state.last_sequence == 1
    # A batch that wraps inside itself: 2**31-2 .. 1 (on a second producer).
    other = RawProducer(producer.conn, producer.topic)
    accepted(other.send(INT32_MAX - 1, 1), 5)
    accepted(other.send(2, 3), 9)
    accepted(other.send(INT32_MAX - 1, 1), 5)  # its retry is still a duplicate
    refused(other.send(INT32_MAX, 0), ErrorCode.out_of_order_sequence_number)
    assert_stored(
        producer.conn,
        producer.topic,
        [(INT32_MAX - 2, INT32_MAX), (0, 1), (INT32_MAX - 1, 1), (2, 3)],
    )
    last = {p.producer_id: p.last_sequence for p in describe(producer.conn, producer.topic)}
    assert last == {producer.pid: 1, other.pid: 3}
