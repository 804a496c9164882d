"""Valid request frames built from kio's schemas, with a map of where each field lies.

This is the fuzzer's own encoder, independent of the code under test
(:mod:`oncelog.protocol.schema_walk`) and of kio's writer: it walks a request class's
dataclass fields, draws a plausible value for each (topic names from a small pool,
partitions 0..2, small offsets, valid record batches), writes the Kafka wire format, and
records a :class:`Span` for every length-prefixed field (arrays, strings, bytes, record
batches, nullable structs, tagged sections). The mutators use the spans to aim at counts
and lengths instead of flipping bits blindly. ``tests/fuzz/test_frames.py`` checks the
encoder against kio's reader for every advertised API version.
"""

from __future__ import annotations

import dataclasses
import random
import struct
import types
import typing
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from kio.index import load_request_schema
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
)

from oncelog.protocol.record_batch import Record, build_batch

_FIXED_FORMATS = {
    "bool": ">?",
    "int8": ">b",
    "int16": ">h",
    "uint16": ">H",
    "int32": ">i",
    "timedelta_i32": ">i",
    "int64": ">q",
    "timedelta_i64": ">q",
    "float64": ">d",
}
_LEGACY_PREFIX = {"string": ">h", "bytes": ">i", "records": ">i"}


@dataclass(frozen=True, slots=True)
class Span:
    """One length-prefixed field of a frame (offsets into the frame, without its size)."""

    kind: str  # "array", "string", "bytes", "records", "struct" (null marker), "tags"
    path: str  # e.g. "topics[0].partitions[1].records"
    start: int  # where the count, length or marker begins
    prefix_end: int  # where it ends
    end: int  # where the whole field ends
    compact: bool  # an unsigned-varint prefix (flexible versions)
    nullable: bool  # the schema allows null here


@dataclass(frozen=True, slots=True)
class Frame:
    api_key: int
    version: int
    data: bytes  # header and body, without the size prefix
    header_end: int
    spans: tuple[Span, ...]


@dataclass
class Pools:
    """The names a generated request refers to, so that many requests hit real state."""

    topics: Sequence[str] = ("fuzz-a", "fuzz-b", "fuzz-c")
    groups: Sequence[str] = ("fuzz-group",)
    transactional_ids: Sequence[str] = ("fuzz-txn",)


def varint(value: int) -> bytes:
    """An unsigned varint (values past 2^32 too: a mutator writes those on purpose)."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def build_frame(
    api_key: int,
    version: int,
    rng: random.Random,
    pools: Pools | None = None,
    correlation_id: int = 1,
) -> Frame:
    """A valid request frame of `api_key` at `version`, drawn with `rng`."""
    request_type = load_request_schema(api_key, version)
    writer = _Writer(rng, pools or Pools())
    flexible = bool(request_type.__flexible__)
    out = writer.out
    out += struct.pack(">hhi", api_key, version, correlation_id)
    client_id = b"fuzz"
    out += struct.pack(">h", len(client_id)) + client_id
    if flexible:
        out += b"\x00"
    header_end = len(out)
    writer.entity(request_type, flexible, "")
    return Frame(api_key, version, bytes(out), header_end, tuple(writer.spans))


@dataclass
class _Writer:
    rng: random.Random
    pools: Pools
    out: bytearray = field(default_factory=bytearray)
    spans: list[Span] = field(default_factory=list)

    def entity(self, cls: type, flexible: bool, path: str) -> None:
        tagged: list[tuple[int, dataclasses.Field[object]]] = []
        for f in dataclasses.fields(cls):
            tag = get_field_tag(f)
            if tag is None:
                self.field(f, flexible, _join(path, f.name), tagged_field=False)
            else:
                tagged.append((int(tag), f))
        if flexible:
            self.tagged_section(tagged, path)

    def tagged_section(
        self, tagged: list[tuple[int, dataclasses.Field[object]]], path: str
    ) -> None:
        start = len(self.out)
        chosen = [(tag, f) for tag, f in tagged if self.rng.random() < 0.3]
        self.out += varint(len(chosen))
        prefix_end = len(self.out)
        for tag, f in sorted(chosen, key=lambda pair: pair[0]):
            inner = _Writer(self.rng, self.pools)
            inner.field(f, True, _join(path, f.name), tagged_field=True)
            self.out += varint(tag) + varint(len(inner.out))
            self.out += inner.out  # spans inside tagged values are not recorded
        self.spans.append(
            Span("tags", path or "<body>", start, prefix_end, len(self.out), True, False)
        )

    def field(
        self, f: dataclasses.Field[object], flexible: bool, path: str, *, tagged_field: bool
    ) -> None:
        kind = classify_field(f)
        nullable = _is_nullable(f.type)
        if isinstance(kind, (EntityTupleField, PrimitiveTupleField)):
            self.array(f, kind, flexible, path, nullable)
        elif isinstance(kind, EntityField):
            if nullable and not tagged_field:
                start = len(self.out)
                if self.rng.random() < 0.2:
                    self.out += b"\xff"
                    self.spans.append(
                        Span("struct", path, start, start + 1, start + 1, False, True)
                    )
                    return
                self.out += b"\x01"
                self.entity(kind.type_, flexible, path)
                self.spans.append(
                    Span("struct", path, start, start + 1, len(self.out), False, True)
                )
            else:
                self.entity(kind.type_, flexible, path)
        else:  # kio reads no null inside a tagged field: never send one there
            self.primitive(
                get_schema_field_type(f), f.name, flexible, path, nullable and not tagged_field
            )

    def array(
        self,
        f: dataclasses.Field[object],
        kind: EntityTupleField | PrimitiveTupleField,
        flexible: bool,
        path: str,
        nullable: bool,
    ) -> None:
        start = len(self.out)
        if nullable and self.rng.random() < 0.15:
            self.out += varint(0) if flexible else struct.pack(">i", -1)
            self.spans.append(
                Span("array", path, start, len(self.out), len(self.out), flexible, True)
            )
            return
        count = self.rng.choice((0, 1, 1, 1, 2, 3))
        self.out += varint(count + 1) if flexible else struct.pack(">i", count)
        prefix_end = len(self.out)
        for index in range(count):
            item_path = f"{path}[{index}]"
            if isinstance(kind, EntityTupleField):
                self.entity(kind.type_, flexible, item_path)
            else:
                item_hint = typing.get_args(_without_none(f.type))[0]
                self.primitive(
                    get_schema_field_type(f), f.name, flexible, item_path, _is_nullable(item_hint)
                )
        self.spans.append(Span("array", path, start, prefix_end, len(self.out), flexible, nullable))

    def primitive(
        self, kafka_type: str, name: str, flexible: bool, path: str, nullable: bool
    ) -> None:
        if kafka_type in _FIXED_FORMATS:
            self.out += struct.pack(_FIXED_FORMATS[kafka_type], self.number(kafka_type, name))
            return
        if kafka_type == "uuid":
            self.out += self.rng.choice((bytes(16), uuid.uuid4().bytes))
            return
        if kafka_type not in _LEGACY_PREFIX:
            raise TypeError(f"{path}: no value for Kafka type {kafka_type!r}")
        compact = flexible
        value = self.sized_value(kafka_type, name, nullable)
        start = len(self.out)
        if value is None:
            self.out += varint(0) if compact else struct.pack(_LEGACY_PREFIX[kafka_type], -1)
        else:
            self.out += (
                varint(len(value) + 1)
                if compact
                else struct.pack(_LEGACY_PREFIX[kafka_type], len(value))
            )
        prefix_end = len(self.out)
        self.out += value or b""
        self.spans.append(
            Span(kafka_type, path, start, prefix_end, len(self.out), compact, nullable)
        )

    def number(self, kafka_type: str, name: str) -> int | float | bool:
        rng = self.rng
        if kafka_type == "bool":
            return rng.random() < 0.5
        if kafka_type == "float64":
            return rng.choice((0.0, 1.5, -1.0))
        if name in ("partition", "partition_index", "index", "partition_id"):
            return rng.choice((0, 0, 1, 2))
        if name == "acks":
            return rng.choice((-1, 0, 1))
        if name in ("num_partitions",):
            return rng.choice((-1, 1, 2))
        if name in ("replication_factor",):
            return rng.choice((-1, 1))
        if name in ("producer_id",):
            return rng.choice((-1, 0, 1))
        if name in ("producer_epoch", "epoch", "generation_id", "member_epoch"):
            return rng.choice((-1, 0, 1))
        if kafka_type.startswith("timedelta"):
            return rng.choice((0, 10, 100, 1000))
        if kafka_type == "int8":
            return rng.choice((0, 1, -1))
        return rng.choice((-1, 0, 1, 2, 10, 100))

    def sized_value(self, kafka_type: str, name: str, nullable: bool) -> bytes | None:
        rng = self.rng
        if nullable and rng.random() < 0.2:
            return None
        if kafka_type == "records":
            values = [Record(None, b"fuzz-%d" % i) for i in range(rng.choice((1, 1, 2, 5)))]
            return build_batch(values, timestamp_ms=1_700_000_000_000)
        if kafka_type == "bytes":
            return rng.randbytes(rng.choice((0, 1, 8, 32)))
        if name in ("name", "topic", "topic_name", "resource_name") or name.endswith("topic"):
            return rng.choice(self.pools.topics).encode()
        if "group" in name:
            return rng.choice(self.pools.groups).encode()
        if "transactional" in name:
            return rng.choice(self.pools.transactional_ids).encode()
        return rng.choice((b"", b"x", b"fuzz", b"member-1", b"range"))


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _is_nullable(hint: object) -> bool:
    origin = typing.get_origin(hint)
    return origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)


def _without_none(hint: object) -> object:
    if not _is_nullable(hint):
        return hint
    (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
    return inner


def with_prefix(frame: Frame, span: Span, prefix: bytes) -> bytes:
    """The frame's bytes with `span`'s count, length or marker replaced by `prefix`."""
    return frame.data[: span.start] + prefix + frame.data[span.prefix_end :]


def count_prefix(span: Span, count: int) -> bytes:
    """`count` as `span`'s kind of prefix writes it (-1: null)."""
    if span.compact:
        return varint(count + 1)
    width = ">h" if span.kind == "string" else ">i"
    return struct.pack(width, count)


def with_null(frame: Frame, span: Span) -> bytes:
    """The frame's bytes with `span`'s field sent as null (its items or bytes dropped)."""
    return frame.data[: span.start] + count_prefix(span, -1) + frame.data[span.end :]
