"""Regression tests over the wire for the malformed batches a fuzzer got acknowledged
(issue 8): each kind, under each codec, is refused with Kafka's error, nothing of it is
appended, the other partition of the same request is appended, and the partition keeps
answering produce and ListOffsets by timestamp.

One broker serves the module; every case writes to its own topic.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from oncelog.client.connection import KafkaConnection
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import Record, build_batch, decode_records, parse_header
from oncelog.testing import EmbeddedBroker

from .batch_forge import CODECS, BatchSpec, RecordSpec, bomb, malformed_kinds
from .wire import create_topic, fetch_batches, now_ms, offset_for_time, produce

IO_TIMEOUT_S = 10.0
ALL_CODECS = sorted(CODECS, key=CODECS.get)


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as embedded:
        yield embedded


@pytest.fixture
def conn(broker: EmbeddedBroker) -> Iterator[KafkaConnection]:
    with KafkaConnection(
        broker.bootstrap_servers, client_id="validation-tests", timeout_s=IO_TIMEOUT_S
    ) as connection:
        yield connection


def good_batch(*values: bytes, codec: int = 0) -> bytes:
    return build_batch([Record(None, v) for v in values], timestamp_ms=now_ms(), compression=codec)


def assert_refused_and_nothing_lost(
    broker: EmbeddedBroker, conn: KafkaConnection, bad: bytes, code: ErrorCode
) -> object:
    """Partition 0 gets ``bad``, partition 1 a good batch in the same request."""
    topic = create_topic(conn)
    answers = produce(conn, topic, {0: bad, 1: good_batch(b"kept")})
    refused, kept = answers[0], answers[1]
    assert refused.error_code == code, refused  # type: ignore[attr-defined]
    assert refused.base_offset == -1 and refused.error_message  # type: ignore[attr-defined]
    assert kept.error_code == ErrorCode.none and kept.base_offset == 0  # type: ignore[attr-defined]
    assert broker.broker is not None
    partition = broker.broker.topics.partition(topic, 0)
    assert partition.high_watermark == 0, "a refused batch moved the high watermark"
    assert partition.log.size_bytes() == 0, "a refused batch was written"
    assert offset_for_time(conn, topic, 0, 0) == (-1, -1)
    (after,) = produce(conn, topic, {0: good_batch(b"a", b"b")}).values()
    assert after.error_code == ErrorCode.none and after.base_offset == 0  # type: ignore[attr-defined]
    assert offset_for_time(conn, topic, 0, 0)[0] == 0
    return refused


@pytest.mark.parametrize("codec", ALL_CODECS)
@pytest.mark.parametrize("kind", sorted(malformed_kinds()))
def test_malformed_batch_is_refused_per_codec(
    broker: EmbeddedBroker, conn: KafkaConnection, kind: str, codec: str
) -> None:
    spec, code = malformed_kinds()[kind]
    spec.codec = codec
    spec.base_timestamp = now_ms()
    assert_refused_and_nothing_lost(broker, conn, spec.build(), code)


@pytest.mark.parametrize("codec", [c for c in ALL_CODECS if c != "none"])
def test_garbage_compressed_payload_is_corrupt_message(
    broker: EmbeddedBroker, conn: KafkaConnection, codec: str
) -> None:
    garbage = BatchSpec(codec=codec, payload=bytes(range(256)) * 8, base_timestamp=now_ms())
    assert_refused_and_nothing_lost(broker, conn, garbage.build(), ErrorCode.corrupt_message)


@pytest.mark.parametrize("codec", [c for c in ALL_CODECS if c != "none"])
def test_decompression_bomb_is_refused(
    broker: EmbeddedBroker, conn: KafkaConnection, codec: str
) -> None:
    """65 MiB of zeros (past the 64 MiB bound at the default max.message.bytes) in a
    batch of a few KiB to a few MiB."""
    assert_refused_and_nothing_lost(
        broker, conn, bomb(codec, 65 << 20), ErrorCode.message_too_large
    )


def test_uncompressed_garbage_with_a_valid_crc(
    broker: EmbeddedBroker, conn: KafkaConnection
) -> None:
    garbage = BatchSpec(payload=bytes(range(256)) * 8, base_timestamp=now_ms())
    assert_refused_and_nothing_lost(broker, conn, garbage.build(), ErrorCode.invalid_record)


def test_incoherent_producer_fields(broker: EmbeddedBroker, conn: KafkaConnection) -> None:
    bad = BatchSpec(producer_id=2**62, producer_epoch=-1, base_sequence=0, base_timestamp=now_ms())
    assert_refused_and_nothing_lost(broker, conn, bad.build(), ErrorCode.invalid_record)


def test_record_errors_reach_the_producer(broker: EmbeddedBroker, conn: KafkaConnection) -> None:
    """Produce v8+ names the records at fault (here, timestamps beyond
    message.timestamp.after.max.ms, one hour by default)."""
    hour = 3_600_000
    spec = BatchSpec(
        records=[RecordSpec(), RecordSpec(timestamp_delta=2 * hour), RecordSpec()],
        base_timestamp=now_ms(),
    )
    refused = assert_refused_and_nothing_lost(
        broker, conn, spec.build(), ErrorCode.invalid_timestamp
    )
    assert [e.batch_index for e in refused.record_errors] == [1]  # type: ignore[attr-defined]


def test_sequence_wrap_inside_a_batch(broker: EmbeddedBroker, conn: KafkaConnection) -> None:
    """As Kafka: a batch from sequence 2**31-2 with three records ends at 0; the next batch
    must start at 1, and a retry of the wrapped batch is a duplicate."""
    topic = create_topic(conn)
    idempotent = {"producer_id": 9000, "producer_epoch": 0}
    wrapping = BatchSpec(
        records=[RecordSpec()] * 3, base_sequence=2**31 - 2, base_timestamp=now_ms(), **idempotent
    ).build()
    first = produce(conn, topic, {0: wrapping})[0]
    assert first.error_code == ErrorCode.none and first.base_offset == 0  # type: ignore[attr-defined]
    retry = produce(conn, topic, {0: wrapping})[0]
    assert retry.error_code == ErrorCode.none and retry.base_offset == 0  # type: ignore[attr-defined]
    gap = BatchSpec(base_sequence=2, base_timestamp=now_ms(), **idempotent).build()
    refused = produce(conn, topic, {0: gap})[0]
    assert refused.error_code == ErrorCode.out_of_order_sequence_number  # type: ignore[attr-defined]
    follow = BatchSpec(base_sequence=1, base_timestamp=now_ms(), **idempotent).build()
    accepted = produce(conn, topic, {0: follow})[0]
    assert accepted.error_code == ErrorCode.none and accepted.base_offset == 3  # type: ignore[attr-defined]


# -- compressed batches: searchable by timestamp, recompressed per compression.type ----------


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_list_offsets_by_timestamp_is_exact_inside_compressed_batches(
    conn: KafkaConnection, codec: str
) -> None:
    topic = create_topic(conn)
    base = now_ms() - 10_000
    for batch_no in range(3):
        records = [
            Record(None, b"%d-%d" % (batch_no, i), timestamp_ms=base + 1000 * batch_no + 10 * i)
            for i in range(20)
        ]
        batch = build_batch(records, timestamp_ms=base, compression=CODECS[codec])
        (answer,) = produce(conn, topic, {0: batch}).values()
        assert answer.error_code == ErrorCode.none, answer  # type: ignore[attr-defined]
    # 1000 ms into batch 1, record 5 is at +1050; asking for +1045 finds it, not batch 1's start.
    assert offset_for_time(conn, topic, 0, base + 1045) == (25, base + 1050)
    assert offset_for_time(conn, topic, 0, base + 2190) == (59, base + 2190)
    assert offset_for_time(conn, topic, 0, base + 2191) == (-1, -1)


@pytest.mark.parametrize(
    ("sent", "topic_codec", "stored"),
    [
        ("gzip", "zstd", "zstd"),
        ("none", "lz4", "lz4"),
        ("snappy", "uncompressed", "none"),
        ("lz4", "producer", "lz4"),
        ("zstd", "snappy", "snappy"),
    ],
)
def test_topic_compression_type_is_applied(
    conn: KafkaConnection, sent: str, topic_codec: str, stored: str
) -> None:
    topic = create_topic(conn, {"compression.type": topic_codec})
    values = [b"value %d " % i * 10 for i in range(40)]
    (answer,) = produce(conn, topic, {0: good_batch(*values, codec=CODECS[sent])}).values()
    assert answer.error_code == ErrorCode.none, answer  # type: ignore[attr-defined]
    (batch,) = fetch_batches(conn, topic, 0)
    assert parse_header(batch).compression == CODECS[stored]
    assert [r.value for r in decode_records(batch)] == values


def test_list_offsets_answers_over_a_poison_batch_stored_before_validation() -> None:
    """A log written before produce read records may hold the fuzzer's 2**31-1-record
    batch (stored here by a broker with validation off): ListOffsets by timestamp answers
    the batch's base offset instead of raising (it closed the connection before)."""
    with EmbeddedBroker(config={"oncelog.record.validation.enable": "false"}) as unchecked:
        with KafkaConnection(
            unchecked.bootstrap_servers, client_id="poison", timeout_s=IO_TIMEOUT_S
        ) as conn:
            topic = create_topic(conn)
            ts = now_ms()
            poison = BatchSpec(record_count=2**31 - 1, base_timestamp=ts).build()
            (stored,) = produce(conn, topic, {0: poison}).values()
            assert stored.error_code == ErrorCode.none  # type: ignore[attr-defined]
            assert offset_for_time(conn, topic, 0, ts) == (0, ts)
            (after,) = produce(conn, topic, {0: good_batch(b"still served")}).values()
            assert after.error_code == ErrorCode.none  # type: ignore[attr-defined]
