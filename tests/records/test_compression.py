"""The codecs: round trips, the formats other clients write, garbage and bombs."""

from __future__ import annotations

import gzip
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_python_codec

from oncelog.protocol import compression
from oncelog.protocol.compression import CorruptPayload, PayloadTooLarge
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.record_batch import decode_records

from .batch_forge import BatchSpec

CODECS = [compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD]
NAMES = {c: compression.CODEC_NAMES[c] for c in CODECS}
LIMIT = 1 << 20
SAMPLE = b"".join(b"record %d with some repeated text " % i for i in range(5000)) + os.urandom(3000)


@pytest.mark.parametrize("codec", CODECS, ids=NAMES.get)
def test_round_trip(codec: int) -> None:
    packed = compression.compress(codec, SAMPLE)
    assert len(packed) < len(SAMPLE)
    assert compression.decompress(codec, packed, len(SAMPLE)) == SAMPLE


@pytest.mark.parametrize("codec", CODECS, ids=NAMES.get)
def test_exact_limit_passes_one_byte_less_does_not(codec: int) -> None:
    packed = compression.compress(codec, SAMPLE)
    assert compression.decompress(codec, packed, len(SAMPLE)) == SAMPLE
    with pytest.raises(PayloadTooLarge) as refused:
        compression.decompress(codec, packed, len(SAMPLE) - 1)
    assert refused.value.code == ErrorCode.message_too_large


# kafka-python writes what the Java client writes: gzip members, xerial snappy, lz4 frames,
# zstd frames. librdkafka's raw snappy is covered below.
KAFKA_PYTHON_ENCODERS = {
    compression.GZIP: kafka_python_codec.gzip_encode,
    compression.SNAPPY: kafka_python_codec.snappy_encode,
    compression.LZ4: kafka_python_codec.lz4_encode,
    compression.ZSTD: kafka_python_codec.zstd_encode,
}


@pytest.mark.parametrize("codec", CODECS, ids=NAMES.get)
def test_reads_what_kafka_python_writes_and_the_reverse(codec: int) -> None:
    encoded = KAFKA_PYTHON_ENCODERS[codec](SAMPLE)
    assert compression.decompress(codec, encoded, LIMIT) == SAMPLE
    decoders = {
        compression.GZIP: kafka_python_codec.gzip_decode,
        compression.SNAPPY: kafka_python_codec.snappy_decode,
        compression.LZ4: kafka_python_codec.lz4_decode,
        compression.ZSTD: kafka_python_codec.zstd_decode,
    }
    assert decoders[codec](compression.compress(codec, SAMPLE)) == SAMPLE


def test_snappy_raw_and_xerial_framing() -> None:
    raw = kafka_python_codec.snappy_encode(SAMPLE, xerial_compatible=False)
    xerial = kafka_python_codec.snappy_encode(SAMPLE, xerial_compatible=True, xerial_blocksize=4096)
    assert raw[:8] != b"\x82SNAPPY\x00" and xerial[:8] == b"\x82SNAPPY\x00"
    assert compression.decompress(compression.SNAPPY, raw, LIMIT) == SAMPLE
    assert compression.decompress(compression.SNAPPY, xerial, LIMIT) == SAMPLE
    # Our xerial output is in blocks too, and the xerial limit counts all blocks together.
    ours = compression.compress(compression.SNAPPY, SAMPLE)
    assert ours[:8] == b"\x82SNAPPY\x00"
    with pytest.raises(PayloadTooLarge):
        compression.decompress(compression.SNAPPY, xerial, len(SAMPLE) - 1)


def test_concatenated_gzip_members() -> None:
    two = gzip.compress(SAMPLE[:1000]) + gzip.compress(SAMPLE[1000:])
    assert compression.decompress(compression.GZIP, two, LIMIT) == SAMPLE


@pytest.mark.parametrize("codec", CODECS, ids=NAMES.get)
def test_bomb_is_refused_without_inflating_it(codec: int) -> None:
    """200 MiB of zeros compress to a few KiB (zstd: about 6 KiB); the 1 MiB limit
    refuses them with MESSAGE_TOO_LARGE."""
    zeros = bytes(200 << 20)
    packed = compression.compress(codec, zeros)
    del zeros
    assert len(packed) < 12 << 20
    with pytest.raises(PayloadTooLarge):
        compression.decompress(codec, packed, LIMIT)


@pytest.mark.parametrize("codec", CODECS, ids=NAMES.get)
def test_truncated_and_flipped_payloads_are_corrupt(codec: int) -> None:
    packed = compression.compress(codec, SAMPLE)
    for cut in (0, 1, len(packed) // 2, len(packed) - 1):
        with pytest.raises((CorruptPayload, PayloadTooLarge)) as refused:
            compression.decompress(codec, packed[:cut], LIMIT)
        assert refused.value.code in (ErrorCode.corrupt_message, ErrorCode.message_too_large)


@settings(max_examples=300, deadline=None)
@given(codec=st.sampled_from(CODECS), garbage=st.binary(max_size=300))
def test_garbage_raises_only_kafka_errors(codec: int, garbage: bytes) -> None:
    """Any bytes at all: decoded, or CorruptPayload/PayloadTooLarge, nothing else."""
    try:
        compression.decompress(codec, garbage, 4096)
    except (CorruptPayload, PayloadTooLarge):
        pass


@settings(max_examples=100, deadline=None)
@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=5000), flip=st.integers(0, 10**6))
def test_flipped_byte_raises_only_kafka_errors(codec: int, data: bytes, flip: int) -> None:
    packed = bytearray(compression.compress(codec, data))
    packed[flip % len(packed)] ^= 0x5A
    try:
        compression.decompress(codec, bytes(packed), 1 << 16)
    except (CorruptPayload, PayloadTooLarge):
        pass


def test_garbage_with_xerial_magic() -> None:
    versions = b"\x00\x00\x00\x01" * 2
    for tail in (
        b"",
        versions[:4],
        versions + b"\x00\x00",  # a block length cut short
        versions + b"\xff\xff\xff\xff",  # a negative block length
        versions + b"\x00\x00\x00\x09abc",  # a block longer than what follows
        versions + b"\x00\x00\x00\x03abc",  # a block that is not snappy
    ):
        with pytest.raises(CorruptPayload):
            compression.decompress(compression.SNAPPY, b"\x82SNAPPY\x00" + tail, LIMIT)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_decoding_a_stored_garbage_batch_raises_value_error(codec: str) -> None:
    """Readers of stored batches (coordinator loads, dump-log) catch ValueError; every
    decode failure is one, and a KafkaError with CORRUPT_MESSAGE too."""
    garbage = BatchSpec(codec=codec, payload=bytes(range(256)) * 4).build()
    with pytest.raises(ValueError) as failed:
        decode_records(garbage)
    assert isinstance(failed.value, KafkaError)
    assert failed.value.code == ErrorCode.corrupt_message
