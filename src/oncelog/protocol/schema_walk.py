"""Walk a request's bytes along its kio schema before kio's native decoder sees them.

kio 0.6.5's native reader reserves memory for whatever an array count says before it
checks that the items are there: a 20-byte Metadata request declaring 2^32-1 topics makes
it ask for 32 GiB, and the Rust allocator aborts the whole broker process, beyond the
reach of any ``except``. So every frame is walked here first, in Python, field by field:

- every length and array count is checked against the bytes that remain (an array of N
  items needs at least N times its item's smallest size, and at least N bytes, as Kafka's
  own generated readers require), so kio is only ever handed counts the frame can hold;
- null where the schema forbids it (a non-nullable array, string or bytes field) is
  refused here, once, instead of reaching a handler as ``None``;
- unknown tagged fields are noticed. kio raises ``KeyError`` on a tag it does not know,
  where Kafka skips it by its declared size (KIP-482: a newer client may add tagged fields
  to a version we already speak); :func:`strip_unknown_tags` copies the entity without
  them, for kio to decode the copy. Known tagged fields are walked like any other field
  (a tagged struct may hold arrays too) and must fill exactly their declared size.

Values are not interpreted (UTF-8, enum values and timestamps are kio's to refuse): the
walk only proves that kio's reads stay inside the frame. The plans come from the kio
entity classes, using kio's field introspection, which is not its public API: the kio
version is pinned in pyproject.toml. Part of the kio adapter: only
:mod:`oncelog.protocol.codec` imports it.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import types
import typing
from dataclasses import dataclass
from functools import cache
from typing import NamedTuple

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
)
from kio.serial.readers import read_unsigned_varint
from kio.serial.writers import write_unsigned_varint
from kio.static.primitive import uvarint
from kio.static.protocol import Entity

from oncelog.protocol.fixed_types import WIDTHS

__all__ = ["Extent", "FrameError", "strip_unknown_tags", "walk"]

_NULL = -1  # a null array, string, bytes, or (as the int8 marker) a null struct

# Strings and byte fields are length-prefixed (int16 / int32 before flexible versions, an
# unsigned varint after); the fixed-size types' widths are in fixed_types.WIDTHS.
_LEGACY_PREFIX_WIDTHS = {"string": 2, "bytes": 4, "records": 4}


class FrameError(ValueError):
    """The bytes do not fit the schema: a size or count past the end, or a forbidden null."""


class Extent(NamedTuple):
    """Where a walked entity ends, and whether it carries tagged fields kio does not know."""

    end: int
    unknown_tags: bool


class _Kind(enum.Enum):
    FIXED = enum.auto()  # `width` bytes
    SIZED = enum.auto()  # a length prefix, then that many bytes (string, bytes, records)
    STRUCT = enum.auto()  # a nested entity (`nullable`: preceded by an int8 marker)
    ARRAY = enum.auto()  # a count, then `count` items


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    kind: _Kind
    nullable: bool = False
    width: int = 0  # FIXED: the value; SIZED: the legacy length prefix (0: compact varint)
    struct: _Plan | None = None  # STRUCT, or ARRAY of structs: the entity's plan
    item: _Field | None = None  # ARRAY of primitives: the item
    compact: bool = False  # ARRAY: a compact (varint) count

    @property
    def min_size(self) -> int:
        """The fewest bytes this field can take on the wire."""
        if self.kind is _Kind.FIXED:
            return self.width
        if self.kind is _Kind.SIZED:
            return self.width or 1
        if self.kind is _Kind.ARRAY:
            return 1 if self.compact else 4
        assert self.struct is not None
        return 1 if self.nullable else self.struct.min_size


@dataclass(frozen=True, slots=True)
class _Plan:
    name: str
    flexible: bool
    fields: tuple[_Field, ...]  # in wire order
    tagged: dict[int, _Field]  # by tag
    min_size: int


def walk(entity_type: type[Entity], data: bytes, offset: int = 0) -> Extent:
    """Check the entity at `offset` against its schema; where it ends.

    Raises FrameError on bytes that do not fit the schema.
    """
    walker = _Walker(data, None)
    end = walker.struct(_plan(entity_type), offset)
    return Extent(end, walker.unknown_tags)


def strip_unknown_tags(
    entity_type: type[Entity], data: bytes, offset: int = 0
) -> tuple[bytes, int]:
    """The entity at `offset` re-encoded without unknown tags, and how many bytes it took.

    Raises FrameError on bytes that do not fit the schema.
    """
    out = io.BytesIO()
    end = _Walker(data, out).struct(_plan(entity_type), offset)
    return out.getvalue(), end - offset


# -- plans: one per entity class, built from its dataclass fields ------------------------------


@cache
def _plan(entity_type: type[Entity]) -> _Plan:
    flexible = bool(entity_type.__flexible__)
    # kio's rule: the request header's client id is a legacy string even in header v2.
    compact_strings = flexible and entity_type.__name__ != "RequestHeader"
    fields: list[_Field] = []
    tagged: dict[int, _Field] = {}
    for f in dataclasses.fields(entity_type):
        tag = get_field_tag(f)
        planned = _plan_field(f, flexible, compact_strings, tagged=tag is not None)
        if tag is None:
            fields.append(planned)
        else:
            tagged[int(tag)] = planned
    min_size = sum(field.min_size for field in fields) + (1 if flexible else 0)
    return _Plan(entity_type.__name__, flexible, _merge_fixed(fields), tagged, min_size)


def _merge_fixed(fields: list[_Field]) -> tuple[_Field, ...]:
    """Adjacent fixed-width fields as one: the walk only needs their total width."""
    merged: list[_Field] = []
    for field in fields:
        if merged and field.kind is _Kind.FIXED and merged[-1].kind is _Kind.FIXED:
            previous = merged.pop()
            field = _Field(
                f"{previous.name}+{field.name}", _Kind.FIXED, width=previous.width + field.width
            )
        merged.append(field)
    return tuple(merged)


def _plan_field(
    f: dataclasses.Field[object], flexible: bool, compact_strings: bool, *, tagged: bool
) -> _Field:
    kind = classify_field(f)
    nullable = _is_nullable(f.type)
    if isinstance(kind, EntityTupleField):
        return _Field(f.name, _Kind.ARRAY, nullable, struct=_plan(kind.type_), compact=flexible)
    if isinstance(kind, EntityField):
        # A tagged struct is framed by its tag's size and has no null marker (KIP-893).
        return _Field(f.name, _Kind.STRUCT, nullable and not tagged, struct=_plan(kind.type_))
    kafka_type = get_schema_field_type(f)
    if isinstance(kind, PrimitiveTupleField):
        item_hint = typing.get_args(_without_none(f.type))[0]
        item = _primitive(f.name, kafka_type, _is_nullable(item_hint), compact_strings)
        return _Field(f.name, _Kind.ARRAY, nullable, item=item, compact=flexible)
    return _primitive(f.name, kafka_type, nullable, compact_strings)


def _primitive(name: str, kafka_type: str, nullable: bool, compact: bool) -> _Field:
    if kafka_type in WIDTHS:
        return _Field(name, _Kind.FIXED, width=WIDTHS[kafka_type])
    if kafka_type in _LEGACY_PREFIX_WIDTHS:
        width = 0 if compact else _LEGACY_PREFIX_WIDTHS[kafka_type]
        return _Field(name, _Kind.SIZED, nullable, width=width)
    raise TypeError(f"field {name}: Kafka type {kafka_type!r} is unknown to the walker")


def _is_nullable(hint: object) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(
        None
    ) in typing.get_args(hint)


def _without_none(hint: object) -> object:
    """`X | None` -> X."""
    if not _is_nullable(hint):
        return hint
    (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
    return inner


# -- the walk ---------------------------------------------------------------------------------


class _Walker:
    """One pass over `data`; copies what it keeps to `out` when there is one."""

    __slots__ = ("data", "out", "size", "unknown_tags")

    def __init__(self, data: bytes, out: io.BytesIO | None) -> None:
        self.data = data
        self.out = out
        self.size = len(data)
        self.unknown_tags = False

    def struct(self, plan: _Plan, pos: int) -> int:
        checking = self.out is None
        for field in plan.fields:
            if checking and field.kind is _Kind.FIXED:  # ``field``'s first case, inline:
                pos += field.width  # every request walks a few (issue 12)
                if pos > self.size:
                    raise FrameError(f"{field.name}: runs past the end of the frame")
            else:
                pos = self.field(field, pos)
        if plan.flexible:
            pos = self.tagged_section(plan, pos)
        return pos

    def field(self, field: _Field, pos: int) -> int:
        """Walk one field starting at `pos`; returns the position after it."""
        kind = field.kind
        if kind is _Kind.FIXED:
            end = pos + field.width
            if end > self.size:
                raise FrameError(f"{field.name}: runs past the end of the frame")
            if self.out is not None:
                self.out.write(self.data[pos:end])
            return end
        if kind is _Kind.SIZED:
            length, start = self.length(field, pos, field.width)  # checks the size fits
            end = start + length if length > 0 else start
            if self.out is not None:
                self.out.write(self.data[pos:end])
            return end
        if kind is _Kind.ARRAY:
            return self.array(field, pos)
        assert field.struct is not None
        if field.nullable:
            marker_end = self.skip(pos, pos + 1, field)
            if int.from_bytes(self.data[pos:marker_end], "big", signed=True) == _NULL:
                return marker_end
            pos = marker_end
        return self.struct(field.struct, pos)

    def array(self, field: _Field, pos: int) -> int:
        count, start = self.length(field, pos, 0 if field.compact else 4)
        if self.out is not None:
            self.copy(pos, start)
        if count == _NULL:
            return start
        item = field.item
        plan = field.struct
        if item is not None:
            item_size = item.min_size
        else:
            assert plan is not None, f"{field.name}: an array has an item or a struct plan"
            item_size = plan.min_size
        left = self.size - start
        if count * max(item_size, 1) > left:
            raise FrameError(
                f"{field.name}: {count} items of at least {item_size} bytes in {left} bytes"
            )
        pos = start
        if item is not None and item.kind is _Kind.FIXED:
            return self.skip(pos, pos + count * item.width, field)
        if item is not None:
            for _ in range(count):
                pos = self.field(item, pos)
            return pos
        assert plan is not None
        for _ in range(count):
            pos = self.struct(plan, pos)
        return pos

    def length(self, field: _Field, pos: int, prefix_width: int) -> tuple[int, int]:
        """A length or count prefix at `pos` (-1: null, refused unless nullable) and where
        its bytes start."""
        data = self.data
        if prefix_width:
            end = pos + prefix_width
            if end > self.size:
                raise FrameError(f"{field.name}: its size is cut off by the end of the frame")
            value = int.from_bytes(data[pos:end], "big", signed=True)
        elif pos < self.size and data[pos] < 0x80:  # a one-byte varint: most sizes
            value, end = data[pos] - 1, pos + 1
        else:
            try:
                raw, size = read_unsigned_varint(data, pos)
            except Exception as exc:  # kio: BufferUnderflow, "Varint is too long"
                raise FrameError(f"{field.name}: bad size varint ({exc})") from exc
            value, end = raw - 1, pos + size
        if value == _NULL:
            if not field.nullable:
                raise FrameError(f"{field.name}: null where the schema forbids it")
        elif value < 0:
            raise FrameError(f"{field.name}: negative size {value}")
        elif field.kind is _Kind.SIZED and end + value > self.size:
            raise FrameError(f"{field.name}: {value} bytes, {self.size - end} left")
        return value, end

    def skip(self, pos: int, end: int, field: _Field) -> int:
        if end > self.size:
            raise FrameError(f"{field.name}: runs past the end of the frame")
        self.copy(pos, end)
        return end

    def copy(self, pos: int, end: int) -> None:
        if self.out is not None:
            self.out.write(self.data[pos:end])

    def tagged_section(self, plan: _Plan, pos: int) -> int:
        """Walk the known fields of a tagged section; skip the others by their size."""
        data = self.data
        if pos < self.size and data[pos] == 0 and self.out is None:  # no tagged fields: most
            return pos + 1
        try:
            count, size = read_unsigned_varint(data, pos)
        except Exception as exc:
            raise FrameError(f"{plan.name}: bad tagged-field count ({exc})") from exc
        pos += size
        kept = io.BytesIO() if self.out is not None else None
        kept_count = 0
        for _ in range(count):  # each field takes at least two bytes: an underflow ends it
            try:
                tag, size = read_unsigned_varint(data, pos)
                length, length_size = read_unsigned_varint(data, pos + size)
            except Exception as exc:
                raise FrameError(f"{plan.name}: bad tagged field ({exc})") from exc
            start = pos + size + length_size
            end = start + length
            if end > self.size:
                raise FrameError(f"tagged field {tag}: {length} bytes, {self.size - start} left")
            field = plan.tagged.get(tag)
            if field is None:  # unknown: skipped, as Kafka does
                self.unknown_tags = True
            else:
                kept_count += 1
                value = io.BytesIO() if kept is not None else None
                inner = _Walker(data[start:end], value)
                if inner.field(field, 0) != length:
                    raise FrameError(
                        f"tagged field {tag} ({field.name}) does not fill its {length} bytes"
                    )
                self.unknown_tags |= inner.unknown_tags
                if kept is not None and value is not None:
                    write_unsigned_varint(kept, uvarint(tag))
                    write_unsigned_varint(kept, uvarint(len(value.getbuffer())))
                    kept.write(value.getbuffer())
            pos = end
        if self.out is not None and kept is not None:
            write_unsigned_varint(self.out, uvarint(kept_count))
            self.out.write(kept.getbuffer())
        return pos
