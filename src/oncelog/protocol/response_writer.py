"""Responses written straight from the handlers' dicts, without building kio entities.

The codec used to turn a handler's dict into a kio entity (``codec.build``: every field
converted, every value checked by kio's phantom types as the entity is made) and then let
kio's writer walk the entity, opening a ``BytesIO`` for the tagged fields of every flexible
struct: about four times what this module's writer costs for the answers a transaction
gets (``bench/encode.py`` prints both), on an event loop whose CPU per transaction bounds
the commit latency with many producers (issue 12).

Here each response type gets a writer made once from kio's schema (the same field
metadata kio's own writer reads): a run of fixed-size fields is one ``struct.pack``, the
dict is read directly, and pieces are joined once at the end. The bytes are kio's, byte
for byte (``tests/protocol/test_response_writer.py`` compares every response type and
version the broker answers). Where this writer does not know a field's kind
:func:`response_writer` gives None, and where an answer sets a tagged field that is a
struct or an array (e.g. Produce's ``current_leader``, whose defaults kio compares as
entities) writing raises :class:`NotWritable`; the codec then uses kio for that answer.
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
import uuid
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from oncelog.protocol.fixed_types import STRUCT_FORMATS

Pieces = list[bytes]
StructWriter = Callable[[Pieces, Mapping[str, Any]], None]
_ValueWriter = Callable[[Pieces, Any], None]

_LEGACY_STRING_MAX = (1 << 15) - 1
_ZERO_UUID = bytes(16)


class NotWritable(Exception):
    """This answer needs kio's writer (a tagged struct or array field is set, or a value
    is an entity rather than a dict)."""


class _UnknownKind(Exception):
    """A field kind this writer does not handle: the response type is left to kio."""


def _uvarint(value: int) -> bytes:
    if value < 0x80:
        return _SMALL_UVARINTS[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL_UVARINTS = [bytes((n,)) for n in range(0x80)]


# -- fixed-size fields: struct format and the conversion of the dict's value ---------------


def _error_code(value: Any) -> int:
    return value if isinstance(value, ErrorCode) else ErrorCode(value)


def _milliseconds(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, int):
        return value
    return round(float(value))  # as kio's timedelta(milliseconds=value) rounds it


def _epoch_milliseconds(value: Any) -> int:
    """A datetime field as the handlers give it (milliseconds, or -1 / None for none)."""
    if value is None:
        return -1
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    return value if value >= 0 else -1


def _uuid_bytes(value: uuid.UUID | None) -> bytes:
    return _ZERO_UUID if value is None else value.bytes


# The values the handlers' dicts hold where the wire has a number or bytes.
_CONVERSIONS: dict[str, Callable[[Any], Any]] = {
    "error_code": _error_code,
    "timedelta_i32": _milliseconds,
    "timedelta_i64": _milliseconds,
    "uuid": _uuid_bytes,
    "datetime_i64": _epoch_milliseconds,
}
_FIXED: dict[str, tuple[str, Callable[[Any], Any] | None]] = {
    name: (fmt, _CONVERSIONS.get(name)) for name, fmt in STRUCT_FORMATS.items()
}


# -- variable-size values -------------------------------------------------------------------


def _text_writer(kafka_type: str, flexible: bool, nullable: bool) -> _ValueWriter:
    is_bytes = kafka_type in ("bytes", "records")

    def write(out: Pieces, value: Any) -> None:
        if value is None:
            if not nullable:
                raise TypeError("Unexpectedly received None value")
            out.append(b"\0" if flexible else (b"\xff\xff\xff\xff" if is_bytes else b"\xff\xff"))
            return
        data = value.encode() if isinstance(value, str) else value
        if flexible:
            out.append(_uvarint(len(data) + 1))
        elif is_bytes:
            out.append(struct.pack(">i", len(data)))
        else:
            if len(data) > _LEGACY_STRING_MAX:
                raise ValueError(f"string of {len(data)} bytes is too long for int16 length")
            out.append(struct.pack(">h", len(data)))
        out.append(data)

    return write


def _fixed_value_writer(kafka_type: str) -> _ValueWriter:
    fmt, convert = _FIXED[kafka_type]
    packer = struct.Struct(">" + fmt)
    if convert is None:
        return lambda out, value: out.append(packer.pack(value))
    return lambda out, value: out.append(packer.pack(convert(value)))


def _primitive_writer(kafka_type: str, flexible: bool, nullable: bool) -> _ValueWriter:
    if kafka_type in _FIXED:
        return _fixed_value_writer(kafka_type)
    if kafka_type in ("string", "bytes", "records"):
        return _text_writer(kafka_type, flexible, nullable)
    raise _UnknownKind(kafka_type)


def _array_writer(item: _ValueWriter, flexible: bool) -> _ValueWriter:
    def write(out: Pieces, items: Sequence[Any] | None) -> None:
        if items is None:
            out.append(b"\0" if flexible else b"\xff\xff\xff\xff")
            return
        out.append(_uvarint(len(items) + 1) if flexible else struct.pack(">i", len(items)))
        for value in items:
            item(out, value)

    return write


def _nullable_struct(write_struct: StructWriter) -> _ValueWriter:
    """KIP-893: a nullable struct is an int8 marker (-1 null, 1 present) before it."""

    def write(out: Pieces, value: Any) -> None:
        if value is None:
            out.append(b"\xff")
            return
        out.append(b"\x01")
        write_struct(out, value)

    return write


def _field_writer(field: dataclasses.Field[Any], flexible: bool) -> _ValueWriter:
    """The writer of one untagged field's value, as kio's ``get_field_writer`` chooses it."""
    nullable = is_optional(field)
    kind = classify_field(field)
    if isinstance(kind, PrimitiveField | PrimitiveTupleField):
        item = _primitive_writer(
            get_schema_field_type(field), flexible, nullable and not kind.is_array
        )
    elif isinstance(kind, EntityTupleField):
        item = _entity(kind.type_)
    else:
        assert isinstance(kind, EntityField)
        inner = _entity(kind.type_)
        item = _nullable_struct(inner) if nullable else inner
    return _array_writer(item, flexible) if kind.is_array else item


# -- structs --------------------------------------------------------------------------------


_MISSING: Any = dataclasses.MISSING


def _default_of(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return _MISSING


def _absent(name: str, default: Any, owner: type) -> Any:
    """The value of a field the dict leaves out: its default, as ``codec.build`` takes it."""
    if default is _MISSING:
        raise TypeError(f"{owner.__module__}.{owner.__qualname__} needs field {name!r}")
    return default


def _fixed_run(
    fields: list[tuple[str, Any, Callable[[Any], Any] | None]], fmt: str, owner: type
) -> _ValueWriter:
    """Several consecutive fixed-size fields written by one ``struct.pack``."""
    packer = struct.Struct(">" + fmt)

    def write(out: Pieces, data: Any) -> None:
        values = []
        for name, default, convert in fields:
            value = data[name] if name in data else _absent(name, default, owner)
            values.append(value if convert is None else convert(value))
        out.append(packer.pack(*values))

    return write


def _variable(name: str, default: Any, write_value: _ValueWriter, owner: type) -> _ValueWriter:
    def write(out: Pieces, data: Any) -> None:
        write_value(out, data[name] if name in data else _absent(name, default, owner))

    return write


def _tag_writer(field: dataclasses.Field[Any], flexible: bool) -> Callable[[Any], bytes | None]:
    """One tagged field: its tag, length and value, or None where kio leaves it out (the
    value equals the field's default). A struct or non-empty array set in the answer is
    left to kio (NotWritable), which compares entities with their defaults. A tagged field
    without a default, or of a kind kio converts before it compares, makes the whole type
    kio's (_UnknownKind): no response type has one today."""
    tag = get_field_tag(field)
    assert tag is not None
    name, kind, default = field.name, classify_field(field), field.default
    if default is dataclasses.MISSING:
        raise _UnknownKind(f"tagged field {name} without a default")
    if not isinstance(kind, PrimitiveField):

        def not_primitive(data: Mapping[str, Any]) -> bytes | None:
            value = data.get(name, default)
            if value is default or (kind.is_array and value is not None and not len(value)):
                return None
            raise NotWritable(f"tagged field {name} set")

        return not_primitive
    kafka_type = get_schema_field_type(field)
    if _FIXED.get(kafka_type, ("", None))[1] is not None:
        raise _UnknownKind(f"tagged {kafka_type} field {name}")
    write_value = _primitive_writer(kafka_type, flexible, False)
    head = _uvarint(tag)

    def write(data: Mapping[str, Any]) -> bytes | None:
        value = data.get(name, default)
        if value == default:
            return None
        pieces: Pieces = []
        write_value(pieces, value)
        encoded = b"".join(pieces)
        return head + _uvarint(len(encoded)) + encoded

    return write


@cache
def _entity(entity_type: type) -> StructWriter:
    """The writer of one struct type (raises _UnknownKind for a field it cannot write)."""
    flexible = bool(entity_type.__flexible__)  # type: ignore[attr-defined]
    steps: list[_ValueWriter] = []
    run: list[tuple[str, Any, Callable[[Any], Any] | None]] = []
    run_format = ""
    tags: list[tuple[int, Callable[[Any], bytes | None]]] = []
    for field in dataclasses.fields(entity_type):
        tag = get_field_tag(field)
        if tag is not None:
            tags.append((tag, _tag_writer(field, flexible)))
            continue
        kafka_type = field.metadata.get("kafka_type", "")
        kind = classify_field(field)
        if isinstance(kind, PrimitiveField) and kafka_type in _FIXED:
            fmt, convert = _FIXED[kafka_type]
            run.append((field.name, _default_of(field), convert))
            run_format += fmt
            continue
        if run:
            steps.append(_fixed_run(run, run_format, entity_type))
            run, run_format = [], ""
        steps.append(
            _variable(field.name, _default_of(field), _field_writer(field, flexible), entity_type)
        )
    if run:
        steps.append(_fixed_run(run, run_format, entity_type))
    tags.sort(key=lambda pair: pair[0])
    tag_writers = [write for _, write in tags]

    def write_struct(out: Pieces, data: Any) -> None:
        # A dict first: isinstance against the Mapping ABC is a Python-level check.
        if type(data) is not dict and not isinstance(data, Mapping):
            raise NotWritable(f"{entity_type.__qualname__} given as {type(data).__name__}")
        for step in steps:
            step(out, data)
        if not flexible:
            return
        written = [piece for write in tag_writers if (piece := write(data)) is not None]
        out.append(_uvarint(len(written)))
        out.extend(written)

    return write_struct


@cache
def response_writer(response_type: type) -> StructWriter | None:
    """The writer of ``response_type``'s body from a handler's dict; None when one of its
    fields is of a kind this module does not write (kio writes that type)."""
    try:
        return _entity(response_type)
    except _UnknownKind:
        return None
