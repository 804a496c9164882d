"""Copy a flexible message without the tagged fields its schema does not know.

kio's native reader raises ``KeyError('Unknown tagged field tag: N')`` on a tag it does not
know, where Kafka skips it by its declared size (KIP-482: a newer client may add tagged
fields to a version we already speak). When that happens, the codec calls
:func:`strip_unknown_tags` on the header and on the body, then decodes the copy with kio.
Requests without unknown tags never come here.

The walk is driven by the kio entity classes themselves: each primitive field (and array of
primitives) is measured with kio's own field reader, so the widths can never disagree with
kio's; nested structs, arrays of structs and tagged sections are walked here, at every
depth. Known tagged fields are kept as sent, except that a known tagged struct is walked
too (it has a tagged section of its own) and re-framed with its new size.

Part of the kio adapter: only :mod:`oncelog.protocol.codec` imports it. Uses kio's field
introspection, which is not kio's public API: the kio version is pinned in pyproject.toml.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)
from kio.serial._parse import get_field_reader
from kio.serial.readers import (
    read_compact_array_length,
    read_int8,
    read_legacy_array_length,
    read_unsigned_varint,
)
from kio.serial.writers import write_unsigned_varint

__all__ = ["TaggedFieldError", "strip_unknown_tags"]

_NULL_STRUCT = -1  # KIP-893 marker of a null nullable struct; kio reads any other value as present


class TaggedFieldError(ValueError):
    """The bytes do not fit the schema (a size or count points past the end)."""


@dataclass(frozen=True, slots=True)
class _Field:
    """How to copy one field: measured by a kio reader, or walked as (an array of) structs."""

    name: str
    read: Callable[[bytes, int], tuple[Any, int]] | None  # primitive or array of primitives
    struct: type | None = None  # nested struct class, walked with its own plan
    array: bool = False  # an array of `struct`
    nullable: bool = False  # a nullable `struct`, preceded by an int8 marker


@dataclass(frozen=True, slots=True)
class _Plan:
    flexible: bool
    fields: tuple[_Field, ...]  # in wire order
    tagged: Mapping[int, _Field]  # by tag


def strip_unknown_tags(entity_type: type, data: bytes, offset: int = 0) -> tuple[bytes, int]:
    """The entity at `offset` re-encoded without unknown tags, and how many bytes it took.

    Raises TaggedFieldError or one of kio's read errors on bytes that do not fit the schema.
    """
    out = io.BytesIO()
    end = _copy_struct(_plan(entity_type), data, offset, out)
    return out.getvalue(), end - offset


@cache
def _plan(entity_type: type) -> _Plan:
    is_request_header = entity_type.__name__ == "RequestHeader"  # as kio decides it
    fields: list[_Field] = []
    tagged: dict[int, _Field] = {}
    for f in dataclasses.fields(entity_type):
        tag = get_field_tag(f)
        kind = classify_field(f)
        if isinstance(kind, (EntityField, EntityTupleField)):
            nullable = tag is None and isinstance(kind, EntityField) and is_optional(f)
            plan = _Field(f.name, None, kind.type_, isinstance(kind, EntityTupleField), nullable)
        else:
            plan = _Field(
                f.name, get_field_reader(entity_type, f, is_request_header, tag is not None)
            )
        if tag is None:
            fields.append(plan)
        else:
            tagged[int(tag)] = plan
    return _Plan(entity_type.__flexible__, tuple(fields), tagged)


def _copy_struct(plan: _Plan, data: bytes, pos: int, out: io.BytesIO) -> int:
    for field in plan.fields:
        pos = _copy_field(field, plan.flexible, data, pos, out)
    if plan.flexible:
        pos = _copy_tagged_section(plan, data, pos, out)
    return pos


def _copy_field(field: _Field, flexible: bool, data: bytes, pos: int, out: io.BytesIO) -> int:
    """Copy one field starting at `pos`; returns the position after it."""
    if field.read is not None:
        _, size = field.read(data, pos)
        out.write(data[pos : pos + size])
        return pos + size
    assert field.struct is not None
    if field.array:
        count, size = (read_compact_array_length if flexible else read_legacy_array_length)(
            data, pos
        )
        out.write(data[pos : pos + size])
        pos += size
        if count is None or count < 0:  # a null array
            return pos
        if count > len(data) - pos:  # every struct takes at least one byte
            raise TaggedFieldError(f"{field.name}: {count} items in {len(data) - pos} bytes")
        for _ in range(count):
            pos = _copy_struct(_plan(field.struct), data, pos, out)
        return pos
    if field.nullable:
        marker, size = read_int8(data, pos)
        out.write(data[pos : pos + size])
        pos += size
        if marker == _NULL_STRUCT:
            return pos
    return _copy_struct(_plan(field.struct), data, pos, out)


def _copy_tagged_section(plan: _Plan, data: bytes, pos: int, out: io.BytesIO) -> int:
    """Copy the known fields of a tagged section, skip the others by their declared size."""
    count, size = read_unsigned_varint(data, pos)
    pos += size
    kept = io.BytesIO()
    kept_count = 0
    for _ in range(count):  # each field takes at least two bytes: an underflow ends a bad count
        start = pos
        tag, size = read_unsigned_varint(data, pos)
        pos += size
        length, size = read_unsigned_varint(data, pos)
        pos += size
        end = pos + length
        if end > len(data):
            raise TaggedFieldError(f"tagged field {tag}: {length} bytes, {len(data) - pos} left")
        field = plan.tagged.get(tag)
        if field is None:  # unknown: skipped, as Kafka does
            pos = end
            continue
        kept_count += 1
        if field.read is not None:
            kept.write(data[start:end])
        else:  # a tagged struct has tagged fields of its own
            value = io.BytesIO()
            if _copy_field(field, True, data[pos:end], 0, value) != length:
                raise TaggedFieldError(
                    f"tagged field {tag} ({field.name}) does not fill its {length} bytes"
                )
            write_unsigned_varint(kept, tag)
            write_unsigned_varint(kept, len(value.getbuffer()))
            kept.write(value.getbuffer())
        pos = end
    write_unsigned_varint(out, kept_count)
    out.write(kept.getbuffer())
    return pos
