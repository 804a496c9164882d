"""The one adapter between oncelog and the `kio` schema package.

Everything that knows kio's entity classes, readers and writers lives here (and in
:mod:`oncelog.protocol.schema_walk`, which checks every request frame before kio's native
decoder may see it), so the codec can be swapped without touching the broker. Handlers
describe responses as plain nested dicts holding every field of the newest version;
:func:`build` turns such a dict into the entity of the version the client asked for,
dropping fields that version lacks.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, cast

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32
from kio.static.protocol import RequestPayload, ResponsePayload

from oncelog.protocol.response_writer import NotWritable, response_writer
from oncelog.protocol.schema_walk import strip_unknown_tags, walk

_EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)


class MalformedRequest(Exception):
    """The peer sent bytes that do not decode as the request it announced."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """The request header fields the broker uses, whatever the header version."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@dataclass(frozen=True, slots=True)
class ApiCodec:
    """Readers and writers of one (api key, version) pair, for both sides of the wire."""

    request_type: type[RequestPayload]
    response_type: type[ResponsePayload]
    read_request: Callable[[bytes, int], tuple[Any, int]]
    write_response: Callable[[io.BytesIO, Any], None]
    write_request: Callable[[io.BytesIO, Any], None]
    read_response: Callable[[bytes, int], tuple[Any, int]]
    flexible_request: bool
    flexible_response_header: bool


_read_header_v1 = entity_reader(RequestHeaderV1)
_read_header_v2 = entity_reader(RequestHeaderV2)
_write_response_header_v0 = entity_writer(ResponseHeaderV0)
_write_response_header_v1 = entity_writer(ResponseHeaderV1)
_write_header_v1 = entity_writer(RequestHeaderV1)
_write_header_v2 = entity_writer(RequestHeaderV2)
_read_response_header_v0 = entity_reader(ResponseHeaderV0)
_read_response_header_v1 = entity_reader(ResponseHeaderV1)

API_VERSIONS_KEY = 18


@cache
def api_codec(api_key: int, version: int) -> ApiCodec:
    """The codec of one API version; raises KeyError if kio does not know it."""
    try:
        request_type = load_request_schema(api_key, version)
        response_type = load_response_schema(api_key, version)
    except Exception as exc:  # kio raises its own index errors
        raise KeyError((api_key, version)) from exc
    return ApiCodec(
        request_type=request_type,
        response_type=response_type,
        read_request=entity_reader(request_type),
        write_response=entity_writer(response_type),
        write_request=entity_writer(request_type),
        read_response=entity_reader(response_type),
        flexible_request=request_type.__flexible__,
        # ApiVersions answers with header v0 at every version, so that a client that
        # does not yet know the broker's versions can always read the reply.
        flexible_response_header=response_type.__flexible__ and api_key != API_VERSIONS_KEY,
    )


# Api key, version, correlation id: signed, big-endian, at the start of every request.
_API_PREFIX = struct.Struct(">hhi")


def peek_api(frame: bytes) -> tuple[int, int, int]:
    """Api key, version and correlation id: the fixed prefix of every request header."""
    if len(frame) < 8:
        raise MalformedRequest(f"request of {len(frame)} bytes is shorter than a header")
    return _API_PREFIX.unpack_from(frame)


def decode_request(frame: bytes, codec: ApiCodec) -> tuple[RequestHeader, Any]:
    """Decode header and body; any decoding failure becomes MalformedRequest.

    The frame is walked along the schema first (:mod:`oncelog.protocol.schema_walk`): a
    count or size the frame cannot hold, or a null where the schema forbids one, is refused
    before kio's native decoder, which would reserve memory for any count it is given, sees
    the bytes. Unknown tagged fields are skipped, as Kafka does (KIP-482).
    """
    header_type = RequestHeaderV2 if codec.flexible_request else RequestHeaderV1
    read_header = _read_header_v2 if codec.flexible_request else _read_header_v1
    try:
        header_extent = walk(header_type, frame, 0)
        body_extent = walk(codec.request_type, frame, header_extent.end)
        if header_extent.unknown_tags or body_extent.unknown_tags:
            header_bytes, _ = strip_unknown_tags(header_type, frame, 0)
            body_bytes, _ = strip_unknown_tags(codec.request_type, frame, header_extent.end)
            frame = header_bytes + body_bytes
        header, size = read_header(frame, 0)
        body, _ = codec.read_request(frame, size)
    except Exception as exc:  # FrameError; kio's ValueError, BufferUnderflow, InvalidUnicode...
        raise MalformedRequest(f"{type(exc).__name__}: {exc}") from exc
    # Bytes after the body are ignored, as Kafka's own parser does: librdkafka 2.16
    # sends three of them after some Metadata v13 requests.
    return (
        RequestHeader(
            header.request_api_key,
            header.request_api_version,
            header.correlation_id,
            header.client_id,
        ),
        body,
    )


def encode_response(correlation_id: int, codec: ApiCodec, body: Any) -> bytes:
    """Frame a response: size prefix, response header, body.

    `correlation_id` is the request's, as :func:`peek_api` read it from four signed bytes:
    always within i32's range, so it is not checked again here (kio's i32() would).
    The body is written from the handler's dict by :mod:`oncelog.protocol.response_writer`
    where it can (the same bytes, several times faster), else by kio.
    """
    write_body = response_writer(codec.response_type)
    if write_body is not None and (type(body) is dict or isinstance(body, Mapping)):
        pieces = [b"", correlation_id.to_bytes(4, "big", signed=True)]
        if codec.flexible_response_header:
            pieces.append(b"\0")  # the response header's (empty) tagged fields
        try:
            write_body(pieces, body)
        except NotWritable:
            return encode_response_with_kio(correlation_id, codec, body)
        pieces[0] = sum(map(len, pieces)).to_bytes(4, "big")
        return b"".join(pieces)
    return encode_response_with_kio(correlation_id, codec, body)


def encode_response_with_kio(correlation_id: int, codec: ApiCodec, body: Any) -> bytes:
    """:func:`encode_response` by kio's entities and writer (what the faster writer must
    match, and what it leaves to kio)."""
    return encode_response_entity(correlation_id, codec, build(codec.response_type, body))


def encode_response_entity(correlation_id: int, codec: ApiCodec, entity: Any) -> bytes:
    """Frame a response whose body is already kio's entity (one :func:`decode_response`
    read, say)."""
    wire_id = cast(i32, correlation_id)
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    if codec.flexible_response_header:
        _write_response_header_v1(buffer, ResponseHeaderV1(correlation_id=wire_id))
    else:
        _write_response_header_v0(buffer, ResponseHeaderV0(correlation_id=wire_id))
    codec.write_response(buffer, entity)
    data = buffer.getbuffer()
    data[0:4] = (len(data) - 4).to_bytes(4, "big")
    return bytes(data)


def encode_error_response(correlation_id: int, codec: ApiCodec, code: ErrorCode) -> bytes | None:
    """The answer to a request whose handling failed: `code` in the response's top-level
    error field and every other field empty; None if this response has no such field.

    The broker's last resort (Kafka answers an unexpected failure with
    UNKNOWN_SERVER_ERROR the same way): a response without a top-level error field cannot
    carry the failure, so the caller closes the connection instead.
    """
    if "error_code" not in _untagged_fields(codec.response_type):
        return None
    return encode_response(correlation_id, codec, _blank(codec.response_type, code))


def _untagged_fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls) if f.metadata.get("tag") is None}


def _blank(cls: type, code: ErrorCode) -> dict[str, Any]:
    """Every required field of `cls` at its emptiest; `error_code` set to `code`."""
    hints = typing.get_type_hints(cls)
    blank: dict[str, Any] = {"error_code": code} if "error_code" in hints else {}
    for f in dataclasses.fields(cls):
        if f.name in blank or f.default is not dataclasses.MISSING:
            continue
        hint = hints[f.name]
        nested = _entity_type_of(_without_none(hint))
        kafka_type = f.metadata.get("kafka_type", "")
        if typing.get_origin(_without_none(hint)) is tuple:
            blank[f.name] = ()
        elif nested is not None:
            blank[f.name] = _blank(nested, ErrorCode.none)
        elif _without_none(hint) is not hint:
            blank[f.name] = None
        else:
            blank[f.name] = _EMPTY_BY_KAFKA_TYPE.get(kafka_type, 0)
    return blank


_EMPTY_BY_KAFKA_TYPE: dict[str, Any] = {
    "string": "",
    "bytes": b"",
    "records": b"",
    "bool": False,
    "uuid": uuid.UUID(int=0),
    "float64": 0.0,
    "error_code": ErrorCode.none,
}


def encode_unsupported_api_versions(
    correlation_id: int, supported: Mapping[int, tuple[int, int]]
) -> bytes:
    """ApiVersions UNSUPPORTED_VERSION in the v0 layout, which every client can parse.

    The body still lists our versions so the client can retry at one we support.
    """
    body = bytearray()
    body += int(ErrorCode.unsupported_version).to_bytes(2, "big", signed=True)
    body += len(supported).to_bytes(4, "big")
    for key, (low, high) in sorted(supported.items()):
        body += key.to_bytes(2, "big") + low.to_bytes(2, "big") + high.to_bytes(2, "big")
    payload = correlation_id.to_bytes(4, "big", signed=True) + bytes(body)
    return len(payload).to_bytes(4, "big") + payload


def encode_request(codec: ApiCodec, correlation_id: int, client_id: str | None, body: Any) -> bytes:
    """Frame a request (client side): size prefix, request header, body."""
    header = {
        "request_api_key": codec.request_type.__api_key__,
        "request_api_version": codec.request_type.__version__,
        "correlation_id": i32(correlation_id),
        "client_id": client_id,
    }
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    if codec.flexible_request:
        _write_header_v2(buffer, build(RequestHeaderV2, header))
    else:
        _write_header_v1(buffer, build(RequestHeaderV1, header))
    codec.write_request(buffer, build(codec.request_type, body))
    data = buffer.getbuffer()
    data[0:4] = (len(data) - 4).to_bytes(4, "big")
    return bytes(data)


def decode_response(codec: ApiCodec, frame: bytes) -> tuple[int, Any]:
    """Correlation id and body of a response frame (without its size prefix)."""
    header: ResponseHeaderV0 | ResponseHeaderV1
    if codec.flexible_response_header:
        header, size = _read_response_header_v1(frame, 0)
    else:
        header, size = _read_response_header_v0(frame, 0)
    body, _ = codec.read_response(frame, size)
    return header.correlation_id, body


# -- building version-specific entities from plain dicts -------------------------------


@dataclass(frozen=True, slots=True)
class _FieldPlan:
    name: str
    convert: Callable[[Any], Any]
    required: bool


def _identity(value: Any) -> Any:
    return value


def _to_timedelta(value: Any) -> Any:
    return (
        value if isinstance(value, datetime.timedelta) else datetime.timedelta(milliseconds=value)
    )


def _to_datetime(value: Any) -> Any:
    if value is None or isinstance(value, datetime.datetime):
        return value
    return None if value < 0 else _EPOCH + datetime.timedelta(milliseconds=value)


def _to_error_code(value: Any) -> Any:
    return value if isinstance(value, ErrorCode) else ErrorCode(value)


def _without_none(hint: Any) -> Any:
    """`X | None` -> X, so optional fields convert like required ones."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return hint


def _entity_type_of(hint: Any) -> type | None:
    """The entity class of `tuple[Entity, ...]` or `Entity`."""
    for candidate in (hint, *typing.get_args(hint)):
        if isinstance(candidate, type) and dataclasses.is_dataclass(candidate):
            return candidate
    return None


@cache
def _plan(cls: type) -> tuple[_FieldPlan, ...]:
    hints = typing.get_type_hints(cls)
    plans = []
    for f in dataclasses.fields(cls):
        hint = _without_none(hints[f.name])
        kafka_type = f.metadata.get("kafka_type", "")
        nested = _entity_type_of(hint)
        is_tuple = typing.get_origin(hint) is tuple
        convert: Callable[[Any], Any]
        if nested is not None and is_tuple:
            convert = _tuple_builder(nested)
        elif nested is not None:
            convert = _optional_builder(nested)
        elif kafka_type.startswith("timedelta"):
            convert = _to_timedelta
        elif kafka_type.startswith("datetime"):
            convert = _to_datetime
        elif kafka_type == "error_code":
            convert = _to_error_code
        elif is_tuple:
            convert = _optional_tuple
        else:
            convert = _identity
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        plans.append(_FieldPlan(f.name, convert, required))
    return tuple(plans)


def _optional_tuple(items: Any) -> Any:
    return None if items is None else tuple(items)


def _tuple_builder(nested: type) -> Callable[[Any], Any]:
    return lambda items: None if items is None else tuple(build(nested, item) for item in items)


def _optional_builder(nested: type) -> Callable[[Any], Any]:
    return lambda item: None if item is None else build(nested, item)


def build(cls: type, data: Mapping[str, Any]) -> Any:
    """Construct entity `cls` from a dict, ignoring keys this version does not have."""
    if isinstance(data, cls):
        return data
    kwargs = {}
    for plan in _plan(cls):
        if plan.name in data:
            kwargs[plan.name] = plan.convert(data[plan.name])
        elif plan.required:
            raise TypeError(f"{cls.__module__}.{cls.__qualname__} needs field {plan.name!r}")
    return cls(**kwargs)
