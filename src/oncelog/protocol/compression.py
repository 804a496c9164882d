"""The record-batch codecs: gzip, snappy, lz4 and zstd, through one wheel (cramjam).

A v2 batch's attributes name its codec (bits 0-2); everything after the 61-byte header is
then one compressed stream of records. What each codec's stream looks like on the wire:

- gzip: RFC 1952 members (Kafka's Java client writes one; several concatenated are read);
- snappy: either xerial framing (``\\x82SNAPPY\\x00``, two version ints, then blocks of
  int32 length + raw snappy), which Kafka's Java client and kafka-python write, or one raw
  snappy block, which librdkafka writes. We read both and write xerial, as Kafka's broker
  does when it recompresses;
- lz4: LZ4 frames (Kafka's KIP-57 fixed the frame header checksum; v2 batches always use
  the correct one, which is the standard format);
- zstd: zstd frames.

Decompression is bounded: a stream that would inflate past ``max_bytes`` is refused once
``max_bytes`` are written (:class:`PayloadTooLarge`), so a few KiB of crafted zstd cannot
make the broker allocate gigabytes; raw snappy declares its length and is refused before
that. A stream that is not valid for its codec raises :class:`CorruptPayload`. Both carry
the Kafka error the produce path answers.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable

import cramjam

from oncelog.protocol import errors
from oncelog.protocol.errors import KafkaError

__all__ = [
    "CODEC_IDS",
    "CODEC_NAMES",
    "GZIP",
    "LZ4",
    "NONE",
    "SNAPPY",
    "ZSTD",
    "CorruptPayload",
    "PayloadTooLarge",
    "compress",
    "decompress",
]

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CODEC_IDS = {name: codec for codec, name in CODEC_NAMES.items()}


class CorruptPayload(KafkaError, ValueError):
    """The compressed records do not decompress with the batch's codec. A ValueError too,
    like every failure to decode a batch (see record_batch.decode_records)."""

    def __init__(self, codec: int, detail: str) -> None:
        super().__init__(
            errors.ErrorCode.corrupt_message,
            f"{CODEC_NAMES.get(codec, codec)} payload does not decompress: {detail}",
        )


class PayloadTooLarge(KafkaError, ValueError):
    """The compressed records inflate past the limit (a decompression bomb, or a batch far
    larger than any producer builds). MESSAGE_TOO_LARGE lets a Java producer split the
    batch and retry, the right remedy for an honest one."""

    def __init__(self, codec: int, max_bytes: int) -> None:
        super().__init__(
            errors.ErrorCode.message_too_large,
            f"{CODEC_NAMES.get(codec, codec)} payload inflates past {max_bytes} bytes",
        )


# cramjam's ``decompress_into`` writes into a buffer we size, and fails rather than grow it:
# that is the bound. Its message for "the output did not fit" (Rust's io::ErrorKind::
# WriteZero) is the only way to tell that from corrupt input. The buffer is an anonymous
# mmap of the whole bound: address space only, so a 64 MiB bound costs the pages actually
# written, not 64 MiB of zeroes per batch (a bytearray of that size took 130 ms here; a
# batch of 950 identical 1 KiB records compresses 300:1, so no small first guess works).
_OUTPUT_FULL = "failed to write whole buffer"


def decompress(codec: int, payload: bytes | memoryview, max_bytes: int) -> bytes:
    """The records ``payload`` holds, at most ``max_bytes`` of them.

    Raises :class:`CorruptPayload` or :class:`PayloadTooLarge`; never anything else for
    any input (the tests feed it garbage of every length).
    """
    if codec == SNAPPY:
        return _snappy_decompress(bytes(payload), max_bytes)
    stream = _STREAM_DECOMPRESSORS.get(codec)
    if stream is None:
        raise CorruptPayload(codec, "unknown codec id")
    # One byte of slack: filling it means "more than max_bytes".
    with mmap.mmap(-1, max_bytes + 1) as out:
        try:
            written = stream(payload, out)
        except cramjam.DecompressionError as exc:
            if _OUTPUT_FULL in str(exc):
                raise PayloadTooLarge(codec, max_bytes) from None
            raise CorruptPayload(codec, str(exc)) from None
        if written > max_bytes:
            raise PayloadTooLarge(codec, max_bytes)
        return out[:written]


_STREAM_DECOMPRESSORS: dict[int, Callable[[bytes | memoryview, mmap.mmap], int]] = {
    GZIP: cramjam.gzip.decompress_into,
    LZ4: cramjam.lz4.decompress_into,
    ZSTD: cramjam.zstd.decompress_into,
}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, compatible version
_XERIAL_VERSION = 1
_XERIAL_BLOCK = 32 * 1024  # xerial's default block size, as Kafka's Java client writes
_I32 = struct.Struct(">i")


def _snappy_decompress(data: bytes, max_bytes: int) -> bytes:
    """Raw snappy states its uncompressed length up front: check it before allocating."""
    if not data.startswith(_XERIAL_MAGIC):
        return _raw_snappy_block(data, max_bytes)
    out = bytearray()
    pos = _XERIAL_HEADER.size
    if len(data) < pos:
        raise CorruptPayload(SNAPPY, "truncated xerial header")
    while pos < len(data):
        if len(data) - pos < _I32.size:
            raise CorruptPayload(SNAPPY, f"truncated xerial block length at byte {pos}")
        (size,) = _I32.unpack_from(data, pos)
        pos += _I32.size
        if size < 0 or pos + size > len(data):
            raise CorruptPayload(SNAPPY, f"xerial block of {size} bytes at byte {pos} overruns")
        out += _raw_snappy_block(data[pos : pos + size], max_bytes - len(out))
        pos += size
    return bytes(out)


def _raw_snappy_block(block: bytes, max_bytes: int) -> bytes:
    try:
        size = cramjam.snappy.decompress_raw_len(block)
    except cramjam.DecompressionError as exc:
        raise CorruptPayload(SNAPPY, str(exc)) from None
    if size > max_bytes:
        raise PayloadTooLarge(SNAPPY, max_bytes)
    out = bytearray(size)
    try:
        written = cramjam.snappy.decompress_raw_into(block, out)
    except cramjam.DecompressionError as exc:
        raise CorruptPayload(SNAPPY, str(exc)) from None
    if written != size:
        raise CorruptPayload(SNAPPY, f"block declares {size} bytes but holds {written}")
    return bytes(out)


def compress(codec: int, data: bytes) -> bytes:
    """``data`` as the payload of a ``codec`` batch (snappy with xerial framing)."""
    if codec == NONE:
        return data
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == SNAPPY:
        return _xerial(data)
    if codec == LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown codec id {codec}")


def _xerial(data: bytes) -> bytes:
    out = bytearray(_XERIAL_HEADER.pack(_XERIAL_MAGIC, _XERIAL_VERSION, _XERIAL_VERSION))
    for start in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK]))
        out += _I32.pack(len(block)) + block
    return bytes(out)
