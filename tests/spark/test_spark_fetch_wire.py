"""The Spark reader's hand-written Fetch v11 and Metadata v4 (`oncelog.spark.fetch_wire`)
against kio's encoding of the same messages (the broker's codec, generated from Kafka's
JSON schemas): the same request bytes, the same fields read from kio-encoded answers, and
a cut answer refused as malformed, never misread."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from oncelog.protocol import codec
from oncelog.protocol.api_versions import ApiKey
from oncelog.spark import fetch_wire

FETCH = codec.api_codec(ApiKey.FETCH, fetch_wire.FETCH_VERSION)
METADATA = codec.api_codec(ApiKey.METADATA, fetch_wire.METADATA_VERSION)


def _partition(index: int, aborted: list[dict] | None, records: bytes | None) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": 0,
        "high_watermark": 10,
        "last_stable_offset": 9,
        "log_start_offset": 0,
        "aborted_transactions": aborted,
        "preferred_read_replica": -1,
        "records": records,
    }


def _answer(api: codec.ApiCodec, body: dict[str, Any]) -> memoryview:
    return memoryview(codec.encode_response(12, api, body))[4:]  # without the size


def test_the_requests_are_the_bytes_kio_writes() -> None:
    ours = fetch_wire.frame(
        fetch_wire.FETCH,
        fetch_wire.FETCH_VERSION,
        5,
        "cid",
        fetch_wire.fetch_request("tp", 3, 77, 8 << 20, 100, 1),
    )
    body = {
        "max_wait": 100,
        "min_bytes": 1,
        "max_bytes": 8 << 20,
        "isolation_level": 1,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": "tp",
                "partitions": [
                    {"partition": 3, "fetch_offset": 77, "partition_max_bytes": 8 << 20}
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    assert ours == codec.encode_request(FETCH, 5, "cid", body)
    ours = fetch_wire.frame(
        fetch_wire.METADATA,
        fetch_wire.METADATA_VERSION,
        0,
        "cid",
        fetch_wire.metadata_request("tp"),
    )
    body = {"topics": [{"name": "tp"}], "allow_auto_topic_creation": False}
    assert ours == codec.encode_request(METADATA, 0, "cid", body)


FETCHED = {
    "throttle_time": 0,
    "error_code": 0,
    "session_id": 0,
    "responses": [
        {
            "topic": "other",
            "partitions": [_partition(3, [{"producer_id": 9, "first_offset": 4}], b"zz")],
        },
        {
            "topic": "tp",
            "partitions": [
                _partition(2, None, None),
                _partition(
                    3,
                    [{"producer_id": 7, "first_offset": 2}, {"producer_id": 8, "first_offset": 5}],
                    b"abc",
                ),
            ],
        },
    ],
}


def test_a_fetch_answer_reads_as_kio_wrote_it() -> None:
    answer = fetch_wire.fetched_partition(_answer(FETCH, FETCHED), "tp", 3)
    assert (answer.error_code, answer.aborted, bytes(answer.records)) == (
        0,
        [(2, 7), (5, 8)],
        b"abc",
    )
    empty = fetch_wire.fetched_partition(_answer(FETCH, FETCHED), "tp", 2)
    assert (empty.aborted, bytes(empty.records)) == (None, b"")  # both null
    refused = fetch_wire.fetched_partition(_answer(FETCH, {**FETCHED, "error_code": 7}), "tp", 3)
    assert refused.error_code == 7
    with pytest.raises(fetch_wire.MalformedAnswer, match="lacks tp-9"):
        fetch_wire.fetched_partition(_answer(FETCH, FETCHED), "tp", 9)
    assert fetch_wire.correlation_id(_answer(FETCH, FETCHED)) == 12


def test_a_metadata_answer_names_the_leader() -> None:
    partitions = [
        {
            "error_code": 0,
            "partition_index": 0,
            "leader_id": 1,
            "replica_nodes": [1, 2],
            "isr_nodes": [1],
        },
        {
            "error_code": 0,
            "partition_index": 3,
            "leader_id": 2,
            "replica_nodes": [2, 1],
            "isr_nodes": [2],
        },
        {
            "error_code": 5,
            "partition_index": 4,
            "leader_id": -1,
            "replica_nodes": [1],
            "isr_nodes": [],
        },
    ]
    body = {
        "throttle_time": 0,
        "brokers": [
            {"node_id": 1, "host": "h1", "port": 1, "rack": None},
            {"node_id": 2, "host": "h2", "port": 2, "rack": "r"},
        ],
        "cluster_id": None,
        "controller_id": 1,
        "topics": [{"error_code": 0, "name": "tp", "is_internal": False, "partitions": partitions}],
    }
    answer = _answer(METADATA, body)
    assert fetch_wire.leader_address(answer, "tp", 3) == "h2:2"
    assert fetch_wire.leader_address(answer, "tp", 0) == "h1:1"
    assert fetch_wire.leader_address(answer, "tp", 4) is None  # LEADER_NOT_AVAILABLE
    assert fetch_wire.leader_address(answer, "nope", 0) is None
    not_utf8 = bytes(answer).replace(b"h2", b"\xff\xfe")
    with pytest.raises(fetch_wire.MalformedAnswer, match="not UTF-8"):
        fetch_wire.leader_address(not_utf8, "tp", 3)


def test_a_cut_answer_is_malformed_never_misread() -> None:
    no_topics = {
        "throttle_time": 0,
        "brokers": [],
        "cluster_id": None,
        "controller_id": 1,
        "topics": [],
    }
    cases: list[tuple[memoryview, Callable[[memoryview], object]]] = [
        (_answer(FETCH, FETCHED), lambda a: fetch_wire.fetched_partition(a, "tp", 3)),
        (_answer(METADATA, no_topics), lambda a: fetch_wire.leader_address(a, "tp", 3)),
    ]
    for answer, read in cases:
        for cut in range(len(answer)):
            with pytest.raises(fetch_wire.MalformedAnswer):
                read(answer[:cut])
