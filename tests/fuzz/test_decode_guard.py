"""The request decoder refuses what kio's native reader would choke on, before kio sees it.

kio 0.6.5 reserves memory for any array count it reads before checking that the items are
there; a count of 2^32-1 aborts the process from Rust (issue 8). These tests hand the
codec every advertised request at every advertised version with its counts, lengths and
nulls bent, and require a MalformedRequest every time (the broker turns that into a logged
close). The frames come from the fuzzer's own encoder (:mod:`.frames`), which is checked
against kio's reader here too.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from functools import cache

import pytest
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2

from oncelog.protocol import codec
from oncelog.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
from oncelog.protocol.schema_walk import walk

from .frames import Frame, Span, build_frame, count_prefix, with_null, with_prefix

ADVERTISED = [
    (key, version)
    for key, (low, high) in sorted(SUPPORTED_VERSIONS.items())
    for version in range(low, high + 1)
]
# One test per API key and check, each over all its advertised versions: the suite's
# per-test teardown (a gc pass) would cost more than the checks if each version were a test.
API_KEYS = sorted(SUPPORTED_VERSIONS)
SEEDS = range(12)

# The frame of issue 8: Metadata v9, correlation id 1, null client id, no header tags, then
# a compact array count of 2^32 - 1 topics and nothing else.
ISSUE_8_FRAME = bytes.fromhex("0003000900000001ffff008080808010")


def versions(api_key: int) -> list[tuple[int, int]]:
    low, high = SUPPORTED_VERSIONS[api_key]
    return [(api_key, version) for version in range(low, high + 1)]


@cache
def frames_of(api: tuple[int, int]) -> list[Frame]:
    return [build_frame(*api, random.Random(seed)) for seed in SEEDS]


@cache
def spans_of(api: tuple[int, int], *kinds: str) -> list[tuple[Frame, Span]]:
    """Every span of the given kinds, in frames drawn with several seeds, once per path."""
    seen: dict[str, tuple[Frame, Span]] = {}
    for frame in frames_of(api):
        for span in frame.spans:
            if span.kind in kinds:
                seen.setdefault(f"{span.kind}:{span.path.split('[')[0]}", (frame, span))
    return list(seen.values())


def decode(api: tuple[int, int], data: bytes) -> object:
    return codec.decode_request(data, codec.api_codec(*api))


def test_the_20_byte_frame_of_issue_8_is_refused() -> None:
    assert len(ISSUE_8_FRAME) + 4 == 20
    with pytest.raises(codec.MalformedRequest, match="topics: 4294967295 items"):
        decode((3, 9), ISSUE_8_FRAME)


def test_kio_alone_aborts_the_process_on_that_frame() -> None:
    """Why the walk exists: without it, the same bytes kill the interpreter (SIGABRT).

    The count here is the largest a compact array can carry (2^35 - 2 items: 256 GiB of
    pointers), so that no machine's memory could satisfy the reservation."""
    frame = ISSUE_8_FRAME[:-5] + bytes.fromhex("feffffff7f")
    script = (
        "from kio.index import load_request_schema\n"
        "from kio.serial import entity_reader\n"
        "from kio.schema.request_header.v2.header import RequestHeader\n"
        f"frame = {frame!r}\n"
        "header, size = entity_reader(RequestHeader)(frame, 0)\n"
        "entity_reader(load_request_schema(3, 9))(frame, size)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, timeout=60, check=False
    )
    assert result.returncode == -signal.SIGABRT, result
    assert b"memory allocation of" in result.stderr
    with pytest.raises(codec.MalformedRequest, match="items"):
        decode((3, 9), frame)


@pytest.mark.parametrize("api_key", API_KEYS, ids=lambda key: ApiKey(key).name)
def test_generated_frames_are_walked_exactly_as_kio_reads_them(api_key: int) -> None:
    for api in versions(api_key):
        api_codec = codec.api_codec(*api)
        header_type = RequestHeaderV2 if api_codec.flexible_request else RequestHeaderV1
        for frame in frames_of(api):
            header_end = walk(header_type, frame.data, 0).end
            assert header_end == frame.header_end, api
            extent = walk(api_codec.request_type, frame.data, header_end)
            assert extent == (len(frame.data), False), api
            _, size = api_codec.read_request(frame.data, header_end)
            assert header_end + size == len(frame.data), api


def test_every_api_with_an_array_in_its_schema_is_covered() -> None:
    """The generator reaches the arrays (it draws lengths 0..3 and sometimes null)."""
    with_arrays = {api[0] for api in ADVERTISED if spans_of(api, "array")}
    without = set(SUPPORTED_VERSIONS) - with_arrays
    # Heartbeat, SaslHandshake, ApiVersions, InitProducerId, AddOffsetsToTxn, EndTxn,
    # DescribeAcls, SaslAuthenticate, DescribeCluster: no array in any version.
    assert without == {12, 17, 18, 22, 25, 26, 29, 36, 60}, without


@pytest.mark.parametrize("api_key", API_KEYS, ids=lambda key: ApiKey(key).name)
def test_huge_counts_and_lengths_are_refused_in_every_request(api_key: int) -> None:
    for api in versions(api_key):
        for frame, span in spans_of(api, "array", "string", "bytes", "records"):
            if span.compact:
                counts: tuple[int, ...] = (2**31 - 1, 2**32 - 1, 2**35 - 2)
            else:
                counts = (2**15 - 1,) if span.kind == "string" else (2**31 - 1,)
            for count in counts:
                with pytest.raises(codec.MalformedRequest):
                    decode(api, with_prefix(frame, span, count_prefix(span, count)))


@pytest.mark.parametrize("api_key", API_KEYS, ids=lambda key: ApiKey(key).name)
def test_negative_counts_and_lengths_are_refused(api_key: int) -> None:
    for api in versions(api_key):
        for frame, span in spans_of(api, "array", "string", "bytes", "records"):
            if span.compact:
                continue  # a compact prefix cannot be negative: it is unsigned
            for count in (-2, -(2**15) if span.kind == "string" else -(2**31)):
                with pytest.raises(codec.MalformedRequest):
                    decode(api, with_prefix(frame, span, count_prefix(span, count)))


@pytest.mark.parametrize("api_key", API_KEYS, ids=lambda key: ApiKey(key).name)
def test_null_is_refused_at_decode_where_the_schema_forbids_it(api_key: int) -> None:
    """Once, here, instead of `TypeError: 'NoneType' object is not iterable` in a handler;
    where the schema allows null, the request decodes with None in that place."""
    for api in versions(api_key):
        for frame, span in spans_of(api, "array", "string", "bytes", "records"):
            nulled = with_null(frame, span)
            if span.nullable:
                decode(api, nulled)
            else:
                with pytest.raises(codec.MalformedRequest, match="null where the schema forbids"):
                    decode(api, nulled)


@pytest.mark.parametrize("api_key", API_KEYS, ids=lambda key: ApiKey(key).name)
def test_every_cut_of_a_request_is_refused(api_key: int) -> None:
    for api in versions(api_key):
        frame = build_frame(*api, random.Random(0))
        for end in range(len(frame.data)):
            with pytest.raises(codec.MalformedRequest):
                decode(api, frame.data[:end])
