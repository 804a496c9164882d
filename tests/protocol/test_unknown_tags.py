"""Unknown tagged fields in a flexible request are skipped, as Kafka does (KIP-482).

kio's reader raises KeyError on a tag its schema does not know; the codec then strips the
unknown tags (oncelog.protocol.schema_walk) and decodes again. The reference here is kio's
own writer: a "newer client" is simulated by a copy of the schema whose structs declare
extra tagged fields, so the frames with unknown tags are written by kio, not by the code
under test.
"""

from __future__ import annotations

import dataclasses
import io
import uuid
from collections.abc import Callable
from functools import cache
from typing import Any, get_args, get_origin

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records

from oncelog.protocol import codec
from oncelog.protocol.codec import MalformedRequest

# kio registers hypothesis strategies for its primitives, except for record batches.
st.register_type_strategy(Records, st.binary(max_size=64).map(Records))

METADATA_V13 = (3, 13)
FETCH_V16 = (1, 16)
CLIENT_ID = "tags"
HEADER_END = (
    8 + 2 + len(CLIENT_ID)
)  # the header's tag section: key, version, correlation id, client id
METADATA_BODY = {
    "topics": [{"topic_id": uuid.UUID(int=7), "name": "t"}],
    "allow_auto_topic_creation": False,
    "include_topic_authorized_operations": False,
}
FETCH_BODY = {
    "max_wait": 500,
    "min_bytes": 1,
    "max_bytes": 1 << 20,
    "isolation_level": 1,
    "session_id": 0,
    "session_epoch": -1,
    "rack_id": "",
    "topics": [
        {
            "topic_id": uuid.UUID(int=9),
            "partitions": [
                {
                    "partition": 0,
                    "current_leader_epoch": 3,
                    "fetch_offset": 10,
                    "last_fetched_epoch": -1,
                    "log_start_offset": -1,
                    "partition_max_bytes": 1 << 20,
                }
            ],
        }
    ],
    "forgotten_topics_data": [],
}
# Two unknown fields, as a tagged section: tag 99 with 3 bytes, tag 123 empty.
UNKNOWN_SECTION = b"\x02" + b"\x63\x03abc" + b"\x7b\x00"


def clean_frame(api: tuple[int, int], body: Any, correlation_id: int = 1) -> bytes:
    """A request frame as the codec's own client writes it, without its size prefix."""
    return codec.encode_request(codec.api_codec(*api), correlation_id, CLIENT_ID, body)[4:]


def kio_decode(api: tuple[int, int], frame: bytes) -> Any:
    header, size = entity_reader(RequestHeaderV2)(frame, 0)
    return header, codec.api_codec(*api).read_request(frame, size)[0]


def decode(api: tuple[int, int], frame: bytes) -> tuple[codec.RequestHeader, Any]:
    return codec.decode_request(frame, codec.api_codec(*api))


def outcome(api: tuple[int, int], frame: bytes) -> Any:
    """What the codec makes of a frame: header and body, or the word "malformed"."""
    try:
        return decode(api, frame)
    except MalformedRequest:
        return "malformed"


# -- a newer client's schema: every struct (or the named ones) has extra tagged fields ----------


def _tag(f: dataclasses.Field) -> int | None:
    return f.metadata.get("tag")


@cache
def future(cls: type, tags: frozenset[int], only: str | None = None) -> type:
    """`cls` as a newer client declares it: structs named `only` (all if None) have extra
    tagged fields `unknown_<tag>` (bytes) for each of `tags` they do not already use."""
    specs: list[tuple[str, Any, dataclasses.Field]] = []
    for f in dataclasses.fields(cls):
        default = dataclasses.field(metadata=f.metadata)
        if f.default is not dataclasses.MISSING:
            default = dataclasses.field(
                metadata=f.metadata, default=to_future(f.default, tags, only)
            )
        specs.append((f.name, _future_type(f.type, tags, only), default))
    if cls.__flexible__ and only in (None, cls.__name__):
        known = {_tag(f) for f in dataclasses.fields(cls)}
        for tag in sorted(tags - known):
            field = dataclasses.field(metadata={"kafka_type": "bytes", "tag": tag}, default=None)
            specs.append((f"unknown_{tag}", bytes | None, field))
    class_vars = {
        name: getattr(cls, name)
        for name in ("__type__", "__version__", "__flexible__", "__api_key__", "__header_schema__")
        if hasattr(cls, name)
    }
    # The same name: kio treats a class called RequestHeader specially (legacy client id).
    return dataclasses.make_dataclass(
        cls.__name__, specs, namespace=class_vars, frozen=True, slots=True, kw_only=True
    )


def _future_type(hint: Any, tags: frozenset[int], only: str | None) -> Any:
    if dataclasses.is_dataclass(hint):
        return future(hint, tags, only)
    args = get_args(hint)
    if get_origin(hint) is tuple:
        return tuple[_future_type(args[0], tags, only), ...]  # type: ignore[misc]
    if type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        return _future_type(inner, tags, only) | None
    return hint


def to_future(
    value: Any,
    tags: frozenset[int],
    only: str | None = None,
    unknown: Callable[[str], bytes | None] = lambda name: None,
) -> Any:
    """`value` (an entity, tuple, or primitive) as the newer client's types, with the
    unknown fields set by `unknown(field name)` (None: not sent)."""
    if isinstance(value, tuple):
        return tuple(to_future(v, tags, only, unknown) for v in value)
    if not (dataclasses.is_dataclass(value) and not isinstance(value, type)):
        return value
    cls = future(type(value), tags, only)
    kwargs = {
        f.name: to_future(getattr(value, f.name), tags, only, unknown)
        for f in dataclasses.fields(value)
    }
    for f in dataclasses.fields(cls):
        if f.name.startswith("unknown_"):
            kwargs[f.name] = unknown(f.name)
    return cls(**kwargs)


def newer_client_frame(
    api: tuple[int, int],
    body: Any,
    tags: frozenset[int],
    only: str | None = None,
    unknown: Callable[[str], bytes | None] = lambda name: b"?",
) -> bytes:
    """The frame a newer client sends: header and body written by kio from the future schema."""
    api_codec = codec.api_codec(*api)
    header = RequestHeaderV2(
        request_api_key=api[0], request_api_version=api[1], correlation_id=1, client_id=CLIENT_ID
    )
    entity = codec.build(api_codec.request_type, body)
    buffer = io.BytesIO()
    for value in (header, entity):
        future_value = to_future(value, tags, only, unknown)
        entity_writer(type(future_value))(buffer, future_value)
    return buffer.getvalue()


# -- examples --------------------------------------------------------------------------------


def test_unknown_tags_in_the_header_are_skipped() -> None:
    clean = clean_frame(METADATA_V13, METADATA_BODY)
    assert clean[HEADER_END] == 0
    tagged = clean[:HEADER_END] + UNKNOWN_SECTION + clean[HEADER_END + 1 :]
    assert decode(METADATA_V13, tagged) == decode(METADATA_V13, clean)


def test_unknown_tags_in_the_body_are_skipped() -> None:
    clean = clean_frame(METADATA_V13, METADATA_BODY)
    assert clean[-1] == 0
    assert decode(METADATA_V13, clean[:-1] + UNKNOWN_SECTION) == decode(METADATA_V13, clean)


def test_unknown_tags_in_a_nested_struct_are_skipped() -> None:
    clean = clean_frame(METADATA_V13, METADATA_BODY)
    # topics: compact array length, then the topic: uuid, compact name "t", its tag section
    topic_tags = HEADER_END + 1 + 1 + 16 + 2
    assert clean[topic_tags - 2 : topic_tags + 1] == b"\x02t\x00"
    tagged = clean[:topic_tags] + UNKNOWN_SECTION + clean[topic_tags + 1 :]
    header, body = decode(METADATA_V13, tagged)
    assert (header, body) == decode(METADATA_V13, clean)
    assert body.topics[0].name == "t" and body.topics[0].topic_id == uuid.UUID(int=7)


@pytest.mark.parametrize(
    "only", ["FetchTopic", "FetchPartition", "RequestHeader", "FetchRequest", None]
)
def test_unknown_tags_written_by_a_newer_client_fetch(only: str | None) -> None:
    tags = frozenset({2, 99, 1000, 2**28})  # 2**28: a tag of five varint bytes
    tagged = newer_client_frame(FETCH_V16, FETCH_BODY, tags, only)
    clean = clean_frame(FETCH_V16, FETCH_BODY)
    with pytest.raises(KeyError, match="Unknown tagged field"):  # kio alone refuses it
        kio_decode(FETCH_V16, tagged)
    assert decode(FETCH_V16, tagged) == decode(FETCH_V16, clean)


def test_known_tagged_fields_still_decode() -> None:
    """Fetch v15+ carries cluster_id (tag 0) and replica_state (tag 1, a struct with its own
    tag section) as tagged fields; unknown tags around and inside them are skipped."""
    body = {
        **FETCH_BODY,
        "cluster_id": "cluster-a",
        "replica_state": {"replica_id": 4, "replica_epoch": 17},
    }
    clean = clean_frame(FETCH_V16, body)
    _, decoded = decode(FETCH_V16, clean)
    assert decoded.cluster_id == "cluster-a"
    assert (decoded.replica_state.replica_id, decoded.replica_state.replica_epoch) == (4, 17)
    for only in ("FetchRequest", "ReplicaState", None):
        tagged = newer_client_frame(FETCH_V16, body, frozenset({2, 7, 300}), only)
        assert decode(FETCH_V16, tagged) == decode(FETCH_V16, clean), only


@pytest.mark.parametrize(
    "section",
    [
        b"\x01\x63\x05ab",  # the field's size runs past the end of the frame
        b"\x03\x63\x01a",  # more fields announced than sent
        b"\x01\x63",  # the size is missing
        b"\x01",  # the tag is missing
        b"\x01\x63\xff\xff\xff\xff\xff",  # a size varint of more than five bytes
        b"\x01\xff\xff\xff\xff\xff\x00",  # a tag varint of more than five bytes
    ],
)
def test_truncated_tagged_section_is_malformed(section: bytes) -> None:
    clean = clean_frame(METADATA_V13, METADATA_BODY)
    with pytest.raises(MalformedRequest):
        decode(METADATA_V13, clean[:-1] + section)
    with pytest.raises(MalformedRequest):  # in the header, followed by the whole body
        decode(METADATA_V13, clean[:HEADER_END] + section)


def test_known_tagged_struct_that_does_not_fill_its_size_is_malformed() -> None:
    body = {**FETCH_BODY, "replica_state": {"replica_id": 4, "replica_epoch": 17}}
    tagged = bytearray(newer_client_frame(FETCH_V16, body, frozenset({5}), "FetchRequest"))
    # the body's tag section ends the frame: tag 1 (replica_state), then tag 5 (unknown, "?")
    replica_state = len(tagged) - len(b"\x05\x02\x02?") - 15
    # tag 1, 13 bytes: int32 replica_id, int64 replica_epoch, an empty tag section
    assert tagged[replica_state : replica_state + 2] == b"\x01\x0d"
    tagged[replica_state + 1] = 0x0E  # one byte more than the struct takes
    with pytest.raises(MalformedRequest, match="does not fill"):
        decode(FETCH_V16, bytes(tagged))


def test_every_cut_of_a_frame_with_unknown_tags_is_malformed() -> None:
    tagged = newer_client_frame(FETCH_V16, FETCH_BODY, frozenset({2, 99}))
    decode(FETCH_V16, tagged)
    for end in range(len(tagged)):
        with pytest.raises(MalformedRequest):
            decode(FETCH_V16, tagged[:end])


# -- properties ---------------------------------------------------------------------------------


PROPERTY_APIS = [METADATA_V13, (18, 3), (0, 10), FETCH_V16]
unknown_tags = st.frozensets(st.integers(0, 40) | st.integers(0, 2**31 - 1), min_size=1, max_size=4)
unknown_values = st.none() | st.binary(max_size=20)


@pytest.mark.parametrize("api", PROPERTY_APIS, ids=lambda api: f"{api[0]}v{api[1]}")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), tags=unknown_tags)
def test_random_requests_with_random_unknown_tags_decode_as_without(
    api: tuple[int, int], data: st.DataObject, tags: frozenset[int]
) -> None:
    request_type = codec.api_codec(*api).request_type
    entity = data.draw(st.from_type(request_type), label="request")
    expected = outcome(api, clean_frame(api, entity))  # kio refuses some values it writes
    sent: list[bytes] = []

    def unknown(name: str) -> bytes | None:
        value = data.draw(unknown_values, label=name)
        sent.extend([] if value is None else [value])
        return value

    tagged = newer_client_frame(api, entity, tags, unknown=unknown)
    if sent:  # kio alone refuses the frame: the fallback is what decodes it
        with pytest.raises(KeyError, match="Unknown tagged field"):
            kio_decode(api, tagged)
    assert outcome(api, tagged) == expected


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_damaged_frames_only_ever_raise_malformed_request(data: st.DataObject) -> None:
    tagged = bytearray(newer_client_frame(FETCH_V16, FETCH_BODY, frozenset({2, 99, 1000})))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(tagged) - 1))
        tagged[position] = data.draw(st.integers(0, 255))
    try:
        decode(FETCH_V16, bytes(tagged))
    except MalformedRequest:
        pass


def _flexible_request_apis() -> list[tuple[int, int]]:
    apis = []
    for key in range(100):
        for version in range(30):
            try:
                if load_request_schema(key, version).__flexible__:
                    apis.append((key, version))
            except Exception:  # kio does not know this pair
                continue
    return apis


@pytest.mark.parametrize("api", _flexible_request_apis(), ids=lambda api: f"{api[0]}v{api[1]}")
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_flexible_request_kio_knows_is_walked(
    api: tuple[int, int], data: st.DataObject
) -> None:
    """No field type of any flexible request schema is beyond the walker."""
    entity = data.draw(st.from_type(load_request_schema(*api)), label="request")
    tagged = newer_client_frame(api, entity, frozenset({77}))
    # kio refuses some values it writes (a timedelta_i64 near 2**63 ms): then both are refused
    assert outcome(api, tagged) == outcome(api, clean_frame(api, entity))


def test_requests_without_tags_do_not_take_the_slow_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object) -> None:
        raise AssertionError("the fallback ran for a request kio decodes itself")

    monkeypatch.setattr(codec, "strip_unknown_tags", fail)
    assert decode(FETCH_V16, clean_frame(FETCH_V16, FETCH_BODY))[0].client_id == CLIENT_ID
    metadata_v4 = clean_frame((3, 4), {"topics": None, "allow_auto_topic_creation": False})
    assert decode((3, 4), metadata_v4)[1].topics is None
