"""The response writer (protocol/response_writer.py) writes kio's bytes, byte for byte.

Every response type and version the broker answers is written from bodies generated from
its schema (every field kind, nulls, empty and longer arrays, tagged fields set and left at
their defaults) by ``encode_response`` and by kio (``encode_response_with_kio``), and the
frames must be equal. A tagged struct that is set is left to kio (NotWritable); so is a
type whose field kinds the writer does not know, and the types a transaction's answers
use must not be among those.
"""

from __future__ import annotations

import dataclasses
import datetime
import random
import struct
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)

from oncelog.protocol import codec
from oncelog.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
from oncelog.protocol.response_writer import NotWritable, response_writer

BODIES_PER_TYPE = 16
MIN_WRITTEN = 4  # bodies per version the writer must have written itself
# How kio and the writer refuse a value a field cannot hold (out of range, wrong type).
_REFUSALS = (struct.error, TypeError, ValueError, OverflowError)
_CODES = list(ErrorCode)
_INTS = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
    "uint8": (0, (1 << 8) - 1),
    "uint16": (0, (1 << 16) - 1),
    "uint32": (0, (1 << 32) - 1),
    "uint64": (0, (1 << 64) - 1),
}
_EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)
_ONE_MS = datetime.timedelta(milliseconds=1)


def _primitive(kafka_type: str, rng: random.Random, nullable: bool) -> Any:
    if nullable and rng.random() < 0.25:
        return None
    if kafka_type in _INTS:
        low, high = _INTS[kafka_type]
        return rng.choice([low, high, 0, -1 if low else 1, rng.randint(low, high)])
    if kafka_type == "error_code":
        code = rng.choice(_CODES)
        return code if rng.random() < 0.5 else int(code)
    if kafka_type == "bool":
        return rng.random() < 0.5
    if kafka_type == "float64":
        return rng.choice([0.0, -1.5, 1e300, rng.random()])
    if kafka_type in ("string",):
        return "".join(rng.choice("abcé€😀-_.") for _ in range(rng.randint(0, 12)))
    if kafka_type in ("bytes", "records"):
        return rng.randbytes(rng.randint(0, 40))
    if kafka_type == "uuid":
        return None if rng.random() < 0.2 else uuid.UUID(int=rng.getrandbits(128))
    if kafka_type.startswith("timedelta"):
        ms = rng.randint(0, 1 << 30)
        return ms if rng.random() < 0.5 else datetime.timedelta(milliseconds=ms)
    if kafka_type == "datetime_i64":
        # Handlers give milliseconds, or a datetime; -1 ms before the epoch is how they
        # send Kafka's -1 in a non-nullable field (kio cannot write a None there).
        ms = rng.randint(0, 1 << 42)
        stamps = [ms, _EPOCH + datetime.timedelta(milliseconds=ms), _EPOCH - _ONE_MS]
        return rng.choice([*stamps, -1] if nullable else stamps)
    raise AssertionError(f"no generator for {kafka_type}")


def _body(
    entity_type: type, rng: random.Random, tagged_structs: bool, depth: int = 0
) -> dict[str, Any]:
    """A dict as a handler gives it: every untagged field, some tagged ones; tagged structs
    and arrays only with ``tagged_structs`` (one set sends the whole answer to kio)."""
    body: dict[str, Any] = {}
    for field in dataclasses.fields(entity_type):
        tagged = get_field_tag(field) is not None
        kind = classify_field(field)
        if tagged and (rng.random() < 0.5 or not (tagged_structs or _is_primitive(kind))):
            continue  # left at its default
        nullable = is_optional(field) and not tagged
        kafka_type = field.metadata.get("kafka_type", "")
        if isinstance(kind, EntityTupleField | PrimitiveTupleField):
            if nullable and rng.random() < 0.2:
                body[field.name] = None
                continue
            count = 0 if depth > 2 else rng.choice([0, 1, 2, 3])
            body[field.name] = [
                _body(kind.type_, rng, tagged_structs, depth + 1)
                if isinstance(kind, EntityTupleField)
                else _primitive(kafka_type, rng, False)
                for _ in range(count)
            ]
        elif isinstance(kind, EntityField):
            body[field.name] = (
                None
                if nullable and rng.random() < 0.3
                else _body(kind.type_, rng, tagged_structs, depth + 1)
            )
        else:
            body[field.name] = _primitive(kafka_type, rng, nullable)
    return body


@pytest.mark.parametrize("api_key", sorted(SUPPORTED_VERSIONS))
def test_every_response_is_written_as_kio_writes_it(api_key: int) -> None:
    """Half the bodies set no tagged struct, so the writer writes them itself; at least
    ``MIN_WRITTEN`` per version must have been, with a top-level array not empty where the
    type has one (else the comparison would quietly be kio against kio)."""
    low, high = SUPPORTED_VERSIONS[api_key]
    for version in range(low, high + 1):
        api = codec.api_codec(api_key, version)
        writer = response_writer(api.response_type)
        rng = random.Random(api_key * 1000 + version)
        written_by_writer = with_items = 0
        for i in range(BODIES_PER_TYPE):
            body = _body(api.response_type, rng, tagged_structs=i % 2 == 1)
            correlation_id = rng.randint(-(1 << 31), (1 << 31) - 1)
            expected = _kio_or_error(correlation_id, api, body)
            if isinstance(expected, Exception):
                with pytest.raises(_REFUSALS):  # refused either way
                    codec.encode_response(correlation_id, api, body)
                continue
            written = codec.encode_response(correlation_id, api, body)
            assert written == expected, (version, body)
            if writer is not None and _writes_itself(writer, body):
                written_by_writer += 1
                with_items += any(isinstance(v, list) and v for v in body.values())
        if writer is not None:
            assert written_by_writer >= MIN_WRITTEN, (version, written_by_writer)
            if _has_array(api.response_type):
                assert with_items, version


def _writes_itself(writer: Any, body: dict[str, Any]) -> bool:
    try:
        writer([], body)
    except NotWritable:
        return False
    return True


def _has_array(entity_type: type) -> bool:
    return any(
        isinstance(classify_field(f), EntityTupleField | PrimitiveTupleField)
        for f in dataclasses.fields(entity_type)
        if get_field_tag(f) is None
    )


def _is_primitive(kind: object) -> bool:
    return not isinstance(kind, EntityField | EntityTupleField | PrimitiveTupleField)


def _kio_or_error(correlation_id: int, api: codec.ApiCodec, body: Any) -> bytes | Exception:
    try:
        return codec.encode_response_with_kio(correlation_id, api, body)
    except _REFUSALS as exc:  # kio refuses the value (out of range, wrong type)
        return exc


# The answers a transactional producer and a consumer get.
HOT_APIS = [
    ApiKey.PRODUCE,
    ApiKey.FETCH,
    ApiKey.ADD_PARTITIONS_TO_TXN,
    ApiKey.ADD_OFFSETS_TO_TXN,
    ApiKey.END_TXN,
    ApiKey.INIT_PRODUCER_ID,
    ApiKey.FIND_COORDINATOR,
    ApiKey.METADATA,
    ApiKey.TXN_OFFSET_COMMIT,
]


@pytest.mark.parametrize("api_key", HOT_APIS)
def test_a_transactions_answers_do_not_go_through_kio(api_key: int) -> None:
    """The writer covers these types at every version the broker answers (the faster path
    is issue 12's cut; a type falling back to kio would lose it silently)."""
    low, high = SUPPORTED_VERSIONS[api_key]
    for version in range(low, high + 1):
        assert response_writer(codec.api_codec(api_key, version).response_type) is not None


def test_a_set_tagged_struct_is_left_to_kio() -> None:
    """Produce v10's current_leader (a tagged struct) set: kio writes it, the same frame."""
    api = codec.api_codec(ApiKey.PRODUCE, 10)
    partition = {
        "index": 0,
        "error_code": ErrorCode.not_leader_or_follower,
        "base_offset": -1,
        "log_append_time": -1,
        "log_start_offset": -1,
        "record_errors": [],
        "error_message": None,
        "current_leader": {"leader_id": 2, "leader_epoch": 7},
    }
    body = {"responses": [{"name": "t", "partition_responses": [partition]}], "throttle_time": 0}
    writer = response_writer(api.response_type)
    assert writer is not None
    with pytest.raises(NotWritable):
        writer([], body)
    framed = codec.encode_response(5, api, body)
    assert framed == codec.encode_response_with_kio(5, api, body)
    assert b"\x02\x00\x00\x00\x07" in framed  # leader 2, epoch 7 on the wire
