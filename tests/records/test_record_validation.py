"""Produce validation of a batch's records (split_batches + validate_records), per codec."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.protocol import compression
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.record_batch import (
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    InvalidRecordBatch,
    Record,
    build_batch,
    crc_is_valid,
    decode_records,
    parse_header,
    split_batches,
)
from oncelog.protocol.record_validation import RecordRules, validate_records

from .batch_forge import (
    CODECS,
    BatchSpec,
    RecordSpec,
    bomb,
    compress,
    malformed_kinds,
    records_body,
)

NOW = 1_700_000_000_000
RULES = RecordRules(max_uncompressed_bytes=1 << 20, timestamp_after_max_ms=3_600_000)
ALL_CODECS = sorted(CODECS, key=CODECS.get)


def validate(batch: bytes, rules: RecordRules = RULES) -> bytes | memoryview:
    ((header, view),) = split_batches(batch)
    return validate_records(header, view, rules, NOW)


def refusal(batch: bytes, rules: RecordRules = RULES) -> KafkaError:
    """The refusal: InvalidRecordBatch, or the codec's CorruptPayload/PayloadTooLarge."""
    with pytest.raises(KafkaError) as refused:
        validate(batch, rules)
    return refused.value


def record_errors(refused: KafkaError) -> list[int]:
    assert isinstance(refused, InvalidRecordBatch), refused
    return [index for index, _ in refused.record_errors]


@pytest.mark.parametrize("codec", ALL_CODECS)
@pytest.mark.parametrize("kind", sorted(malformed_kinds()))
def test_malformed_records_are_refused_under_every_codec(kind: str, codec: str) -> None:
    spec, code = malformed_kinds()[kind]
    spec.codec = codec
    spec.base_timestamp = NOW
    refused = refusal(spec.build())
    assert refused.code == code, refused


@pytest.mark.parametrize("codec", [c for c in ALL_CODECS if c != "none"])
def test_garbage_payload_is_corrupt_message(codec: str) -> None:
    for garbage in (b"", b"\x07\xff\xff", bytes(range(256)), b"\xff" * 4000):
        refused = refusal(BatchSpec(codec=codec, payload=garbage, base_timestamp=NOW).build())
        assert refused.code == ErrorCode.corrupt_message, (garbage[:8], refused)


def test_uncompressed_garbage_with_a_valid_crc_is_invalid_record() -> None:
    refused = refusal(BatchSpec(payload=bytes(range(256)) * 4, base_timestamp=NOW).build())
    assert refused.code == ErrorCode.invalid_record


@pytest.mark.parametrize("codec", [c for c in ALL_CODECS if c != "none"])
def test_decompression_bomb_is_message_too_large(codec: str) -> None:
    refused = refusal(bomb(codec, 2 << 20))
    assert refused.code == ErrorCode.message_too_large


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_valid_batches_of_every_codec_pass_unchanged(codec: str) -> None:
    records = [Record(b"k%d" % i, b"v%d" % i, timestamp_ms=NOW + i) for i in range(50)]
    batch = build_batch(records, timestamp_ms=NOW, compression=CODECS[codec])
    stored = validate(batch)
    assert bytes(stored) == batch
    assert [(r.key, r.timestamp) for r in decode_records(batch)] == [
        (r.key, r.timestamp_ms) for r in records
    ]


def test_snappy_raw_framing_from_librdkafka_passes() -> None:
    spec = BatchSpec(records=[RecordSpec(value=b"x" * 100)] * 4, codec="snappy")
    spec.base_timestamp = NOW
    spec.payload = compress("snappy", records_body(spec.records), snappy_framing="raw")
    assert bytes(validate(spec.build())) == spec.build()


# -- header coherence ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"producer_id": -2}, "a negative producer id other than -1"),
        ({"producer_id": 7, "producer_epoch": 0, "base_sequence": -1}, "idempotent, no sequence"),
        ({"producer_id": 7, "producer_epoch": -1, "base_sequence": 0}, "idempotent, no epoch"),
        ({"attributes_extra": ATTR_TRANSACTIONAL}, "transactional without a producer id"),
    ],
)
def test_incoherent_producer_fields_are_invalid_record(fields: dict[str, int], why: str) -> None:
    spec = BatchSpec(base_timestamp=NOW)
    for name, value in fields.items():
        setattr(spec, name, value)
    with pytest.raises(InvalidRecordBatch) as refused:
        split_batches(spec.build())
    assert refused.value.code == ErrorCode.invalid_record, why


def test_epoch_and_sequence_without_a_producer_id_are_ignored_as_kafka_does() -> None:
    """aiokafka sends sequence 0 in non-idempotent batches; Kafka reads neither field."""
    spec = BatchSpec(producer_id=-1, producer_epoch=3, base_sequence=0, base_timestamp=NOW)
    assert bytes(validate(spec.build())) == spec.build()


def test_huge_producer_id_with_coherent_fields_is_accepted_as_kafka_does() -> None:
    """Kafka accepts an idempotent batch from a producer id it never issued (KIP-360:
    unknown producers start anywhere); so do we. The fields must still agree."""
    spec = BatchSpec(producer_id=2**63 - 1, producer_epoch=0, base_sequence=0, base_timestamp=NOW)
    assert bytes(validate(spec.build())) == spec.build()


def test_sequence_wrapping_inside_a_batch_is_accepted_and_wraps() -> None:
    """Kafka's DefaultRecordBatch.incrementSequence: a batch starting at 2**31-2 with three
    records ends at sequence 0 (the producer state then expects 1)."""
    spec = BatchSpec(
        records=[RecordSpec()] * 3,
        producer_id=3,
        producer_epoch=0,
        base_sequence=2**31 - 2,
        base_timestamp=NOW,
    )
    ((header, _),) = split_batches(spec.build())
    assert header.last_sequence == 0
    assert bytes(validate(spec.build())) == spec.build()


# -- timestamps and keys, with record errors -------------------------------------------------


def test_log_append_time_from_a_producer_is_invalid_timestamp() -> None:
    spec = BatchSpec(records=[RecordSpec()] * 2, attributes_extra=ATTR_TIMESTAMP_TYPE)
    spec.base_timestamp = NOW
    refused = refusal(spec.build())
    assert refused.code == ErrorCode.invalid_timestamp
    assert record_errors(refused) == [0, 1]


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_timestamps_out_of_range_name_their_records(codec: str) -> None:
    hour = 3_600_000
    spec = BatchSpec(
        records=[
            RecordSpec(timestamp_delta=0),
            RecordSpec(timestamp_delta=2 * hour),  # beyond after.max.ms (1 h)
            RecordSpec(timestamp_delta=10),
            RecordSpec(timestamp_delta=3 * hour),
        ],
        codec=codec,
        base_timestamp=NOW,
    )
    refused = refusal(spec.build())
    assert refused.code == ErrorCode.invalid_timestamp
    assert record_errors(refused) == [1, 3]
    # before.max.ms refuses the old ones the same way.
    old = RecordRules(max_uncompressed_bytes=1 << 20, timestamp_before_max_ms=hour)
    late = BatchSpec(records=[RecordSpec()], codec=codec, base_timestamp=NOW - 2 * hour)
    assert refusal(late.build(), old).code == ErrorCode.invalid_timestamp
    # LogAppendTime topics do not look at the producer's timestamps.
    log_append = RecordRules(max_uncompressed_bytes=1 << 20, log_append_time=True)
    assert validate(spec.build(), log_append)


def test_no_timestamp_records_pass_the_range_check() -> None:
    spec = BatchSpec(records=[RecordSpec()] * 2, base_timestamp=-1)
    assert validate(spec.build())


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_compacted_topics_refuse_keyless_records_naming_them(codec: str) -> None:
    compacted = RecordRules(max_uncompressed_bytes=1 << 20, compacted=True)
    spec = BatchSpec(
        records=[RecordSpec(key=b"a"), RecordSpec(key=None), RecordSpec(key=None)],
        codec=codec,
        base_timestamp=NOW,
    )
    refused = refusal(spec.build(), compacted)
    assert refused.code == ErrorCode.invalid_record
    assert record_errors(refused) == [1, 2]
    assert validate(spec.build(), RULES)  # the same batch on a topic that does not compact


# -- compression.type: recompression ---------------------------------------------------------


@pytest.mark.parametrize("source", ALL_CODECS)
@pytest.mark.parametrize("target", ALL_CODECS)
def test_topic_compression_type_recompresses(source: str, target: str) -> None:
    records = [
        Record(b"k%d" % i, b"value %d " % i * 20, (("h", b"x"),), NOW + i) for i in range(30)
    ]
    batch = build_batch(
        records,
        timestamp_ms=NOW,
        compression=CODECS[source],
        producer_id=4,
        producer_epoch=2,
        base_sequence=10,
        transactional=True,
    )
    rules = RecordRules(max_uncompressed_bytes=1 << 20, target_compression=CODECS[target])
    stored = bytes(validate(batch, rules))
    before, after = parse_header(batch), parse_header(stored)
    assert after.compression == CODECS[target]
    assert crc_is_valid(stored)
    if source == target:
        assert stored == batch, "a batch already in the topic's codec is stored as sent"
    for name in (
        "last_offset_delta",
        "base_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "record_count",
        "is_transactional",
    ):
        assert getattr(after, name) == getattr(before, name), name
    assert decode_records(stored) == decode_records(batch)
    # What we wrote passes validation again (so a replica or a re-read accepts it).
    assert bytes(validate(stored, rules)) == stored


def test_producer_keeps_the_codec() -> None:
    batch = build_batch([Record(b"k", b"v")], timestamp_ms=NOW, compression=compression.LZ4)
    assert bytes(validate(batch, RecordRules(max_uncompressed_bytes=1 << 20))) == batch


def test_a_recompressed_batch_over_max_message_bytes_is_message_too_large() -> None:
    """zstd to uncompressed grows the batch past max.message.bytes (Kafka checks the size
    again after conversion)."""
    batch = build_batch(
        [Record(None, bytes(10_000))], timestamp_ms=NOW, compression=compression.ZSTD
    )
    rules = RecordRules(
        max_uncompressed_bytes=1 << 20,
        target_compression=compression.NONE,
        max_message_bytes=5_000,
    )
    assert len(batch) < 5_000
    assert refusal(batch, rules).code == ErrorCode.message_too_large


# -- property: whatever validation accepts, a reader decodes as the header says --------------


@settings(max_examples=300, deadline=None)
@given(
    codec=st.sampled_from(ALL_CODECS),
    values=st.lists(st.none() | st.binary(max_size=30), min_size=1, max_size=8),
    deltas=st.lists(st.integers(-1000, 1000), min_size=8, max_size=8),
    mutations=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), max_size=3),
)
def test_an_accepted_batch_always_decodes_as_its_header_says(
    codec: str, values: list[bytes | None], deltas: list[int], mutations: list[tuple[int, int]]
) -> None:
    """Mutate the records of a valid batch (before compression, CRC recomputed): either
    validation refuses it, or decode_records (an independent reader) yields exactly
    recordCount records at offsets base..last whose largest timestamp is the header's."""
    specs = [RecordSpec(value=v, timestamp_delta=d) for v, d in zip(values, deltas, strict=False)]
    body = bytearray(records_body(specs))
    for at, flip in mutations:
        body[at % len(body)] ^= flip
    spec = BatchSpec(records=specs, codec=codec, base_timestamp=NOW)
    spec.payload = compress(codec, bytes(body))
    batch = spec.build()
    try:
        stored = bytes(validate(batch))
    except KafkaError:
        return
    header = parse_header(stored)
    records = decode_records(stored)
    assert [r.offset for r in records] == list(range(header.record_count))
    assert max(r.timestamp for r in records) == header.max_timestamp
