"""Structure-aware mutations of a valid request frame.

Each mutator takes a :class:`~.frames.Frame` (valid bytes plus the map of its
length-prefixed fields) and returns damaged bytes. Most aim at the spans: a count or
length made huge, negative or null, a string made invalid UTF-8, a tagged section made
inconsistent, a record batch replaced by a damaged one. The others are blind: bit flips,
cuts, spliced garbage, a version the body was not written for. "valid" sends the frame as
built, so that every API is also exercised on the path that succeeds.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from dataclasses import dataclass

from .batches import damage
from .frames import Frame, Span, count_prefix, varint, with_null, with_prefix

_HUGE_COUNTS = (2**31 - 1, 2**32 - 1, 2**35 - 2, 2**20, 65_536)


@dataclass(frozen=True, slots=True)
class Mutated:
    kind: str
    data: bytes
    detail: str = ""


def _spans(frame: Frame, *kinds: str) -> list[Span]:
    return [span for span in frame.spans if span.kind in kinds]


def _valid(frame: Frame, rng: random.Random) -> Mutated | None:
    return Mutated("valid", frame.data)


def _bit_flips(frame: Frame, rng: random.Random) -> Mutated | None:
    data = bytearray(frame.data)
    flips = rng.choice((1, 1, 2, 4, 8))
    for _ in range(flips):
        # the first 4 bytes (api key and version) are the wrong-version mutator's
        position = rng.randrange(4, len(data)) if len(data) > 4 else 0
        data[position] ^= 1 << rng.randrange(8)
    return Mutated("bit-flips", bytes(data), f"{flips} bits")


def _truncate(frame: Frame, rng: random.Random) -> Mutated | None:
    end = rng.randrange(8, len(frame.data)) if len(frame.data) > 8 else 8
    return Mutated("truncate", frame.data[:end], f"cut at {end} of {len(frame.data)}")


def _huge_count(frame: Frame, rng: random.Random) -> Mutated | None:
    spans = _spans(frame, "array", "string", "bytes", "records")
    if not spans:
        return None
    span = rng.choice(spans)
    if span.compact:
        count = rng.choice(_HUGE_COUNTS)
    else:
        count = 2**15 - 1 if span.kind == "string" else rng.choice((2**31 - 1, 2**20, 65_536))
    data = with_prefix(frame, span, count_prefix(span, count))
    return Mutated("huge-count", data, f"{span.path}: {count}")


def _negative_count(frame: Frame, rng: random.Random) -> Mutated | None:
    spans = [s for s in _spans(frame, "array", "string", "bytes", "records") if not s.compact]
    if not spans:
        return None
    span = rng.choice(spans)
    count = rng.choice((-2, -(2**15)) if span.kind == "string" else (-2, -(2**31)))
    return Mutated("negative-count", with_prefix(frame, span, count_prefix(span, count)), span.path)


def _null(frame: Frame, rng: random.Random) -> Mutated | None:
    spans = _spans(frame, "array", "string", "bytes", "records")
    if not spans:
        return None
    span = rng.choice(spans)
    allowed = "nullable" if span.nullable else "not nullable"
    return Mutated("null", with_null(frame, span), f"{span.path} ({allowed})")


def _bad_utf8(frame: Frame, rng: random.Random) -> Mutated | None:
    spans = [s for s in _spans(frame, "string") if s.end > s.prefix_end]
    if not spans:
        return None
    span = rng.choice(spans)
    data = bytearray(frame.data)
    bad = rng.choice((b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"))
    position = rng.randrange(span.prefix_end, span.end)
    data[position : position + len(bad)] = bad[: span.end - position]
    return Mutated("bad-utf8", bytes(data), span.path)


def _wrong_version(frame: Frame, rng: random.Random) -> Mutated | None:
    version = rng.choice((frame.version - 1, frame.version + 1, frame.version + 5, -1, 0x7FFF))
    data = frame.data[:2] + struct.pack(">h", version) + frame.data[4:]
    return Mutated("wrong-version", data, f"v{frame.version} body sent as v{version}")


def _bad_tags(frame: Frame, rng: random.Random) -> Mutated | None:
    sections = _spans(frame, "tags")
    if not sections:
        return None
    span = rng.choice(sections)
    tag = rng.choice((0, 1, 2, 99, 2**28))
    choices = {
        "huge count": varint(rng.choice((2**31, 2**32 - 1, 1000))),
        "size past the end": varint(1) + varint(tag) + varint(10_000),
        "unknown tag": varint(1) + varint(99) + varint(3) + b"abc",
        "known tag, garbage": varint(1) + varint(tag) + varint(4) + rng.randbytes(4),
        "duplicate tag": varint(2) + (varint(tag) + varint(1) + b"\x00") * 2,
        "varint too long": b"\xff\xff\xff\xff\xff\xff",
    }
    what = rng.choice(sorted(choices))
    data = frame.data[: span.start] + choices[what] + frame.data[span.end :]
    return Mutated("bad-tags", data, f"{span.path}: {what}")


def _batch_spans(frame: Frame) -> list[Span]:
    return [s for s in _spans(frame, "records") if s.end > s.prefix_end]


def _garbage_batch(frame: Frame, rng: random.Random) -> Mutated | None:
    spans = _batch_spans(frame)
    if not spans:
        return None
    span = rng.choice(spans)
    damaged = damage(frame.data[span.prefix_end : span.end], rng)
    prefix = varint(len(damaged.data) + 1) if span.compact else struct.pack(">i", len(damaged.data))
    data = frame.data[: span.start] + prefix + damaged.data + frame.data[span.end :]
    return Mutated("garbage-batch", data, f"{span.path}: {damaged.kind}")


def _random_span(frame: Frame, rng: random.Random) -> Mutated | None:
    """A field's content replaced by random bytes of the same length."""
    spans = [s for s in frame.spans if s.end > s.prefix_end]
    if not spans:
        return None
    span = rng.choice(spans)
    data = (
        frame.data[: span.prefix_end]
        + rng.randbytes(span.end - span.prefix_end)
        + frame.data[span.end :]
    )
    return Mutated("random-span", data, span.path)


def _splice(frame: Frame, rng: random.Random) -> Mutated | None:
    position = rng.randrange(8, len(frame.data) + 1) if len(frame.data) > 8 else len(frame.data)
    junk = rng.randbytes(rng.choice((1, 4, 16, 64)))
    return Mutated("splice", frame.data[:position] + junk + frame.data[position:], f"at {position}")


MUTATORS: dict[str, Callable[[Frame, random.Random], Mutated | None]] = {
    "valid": _valid,
    "bit-flips": _bit_flips,
    "truncate": _truncate,
    "huge-count": _huge_count,
    "negative-count": _negative_count,
    "null": _null,
    "bad-utf8": _bad_utf8,
    "wrong-version": _wrong_version,
    "bad-tags": _bad_tags,
    "garbage-batch": _garbage_batch,
    "random-span": _random_span,
    "splice": _splice,
}


def mutate(frame: Frame, rng: random.Random) -> Mutated:
    """One mutation of `frame`, drawn with `rng` among those that apply to it."""
    names = sorted(MUTATORS)
    if frame.api_key == 0 and _batch_spans(frame) and rng.random() < 0.5:
        names = ["garbage-batch"]  # Produce: half of the cases damage a batch
    while True:
        mutated = MUTATORS[rng.choice(names)](frame, rng)
        if mutated is not None:
            return mutated
