"""What the decoder guard costs: request decode time with and without the schema walk.

    .venv/bin/python bench/decode.py
    .venv/bin/python bench/decode.py --rounds 50000

Every request the broker reads is first walked along its kio schema in Python
(``oncelog.protocol.schema_walk``: counts and lengths checked against the bytes left,
forbidden nulls refused) and only then decoded by kio's native reader. This prints, for
requests shaped as the real clients send them, the time of kio's decode alone, of the
walk alone, and of ``codec.decode_request`` (walk + decode), per request, best of five
repeats, with the ratio. In-process, no broker: the figures are CPU time of one core.
"""

from __future__ import annotations

import argparse
import os
import time
import timeit
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader

from oncelog.client.connection import KafkaConnection
from oncelog.protocol import codec
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.record_batch import Record, build_batch
from oncelog.protocol.schema_walk import walk
from oncelog.testing import EmbeddedBroker

BATCH = build_batch([Record(None, b"x" * 1024) for _ in range(16)], timestamp_ms=1)
FETCH_PARTITION = {
    "current_leader_epoch": -1,
    "fetch_offset": 10,
    "last_fetched_epoch": -1,
    "log_start_offset": -1,
    "partition_max_bytes": 1 << 20,
}
FETCH = {
    "replica_id": -1,
    "max_wait": 500,
    "min_bytes": 1,
    "max_bytes": 1 << 20,
    "isolation_level": 1,
    "session_id": 0,
    "session_epoch": -1,
    "rack_id": "",
    "forgotten_topics_data": [],
}


def produce(partitions: int) -> dict[str, Any]:
    return {
        "transactional_id": None,
        "acks": -1,
        "timeout": 5000,
        "topic_data": [
            {
                "name": "orders",
                "partition_data": [{"index": i, "records": BATCH} for i in range(partitions)],
            }
        ],
    }


CASES: dict[str, tuple[tuple[int, int], dict[str, Any]]] = {
    "Produce v10, 1 partition, 16 KiB (librdkafka)": ((0, 10), produce(1)),
    "Produce v7, 3 partitions (aiokafka)": ((0, 7), produce(3)),
    "Fetch v16, 3 partitions (librdkafka)": (
        (1, 16),
        {
            **FETCH,
            "topics": [
                {
                    "topic_id": uuid.UUID(int=1),
                    "partitions": [{"partition": i, **FETCH_PARTITION} for i in range(3)],
                }
            ],
        },
    ),
    "Fetch v4, 3 partitions (aiokafka)": (
        (1, 4),
        {
            **FETCH,
            "topics": [
                {
                    "topic": "orders",
                    "partitions": [{"partition": i, **FETCH_PARTITION} for i in range(3)],
                }
            ],
        },
    ),
    "Metadata v12, 10 topics": (
        (3, 12),
        {
            "topics": [{"topic_id": None, "name": f"topic-{i}"} for i in range(10)],
            "allow_auto_topic_creation": True,
            "include_topic_authorized_operations": False,
        },
    ),
    "Heartbeat v4": (
        (12, 4),
        {
            "group_id": "group",
            "generation_id": 3,
            "member_id": "member-1",
            "group_instance_id": None,
        },
    ),
}


def per_request_us(action: Callable[[], object], rounds: int) -> float:
    return min(timeit.repeat(action, number=rounds, repeat=5)) / rounds * 1e6


def measure(
    api: tuple[int, int], body: dict[str, Any], rounds: int
) -> tuple[int, float, float, float]:
    """Frame size, then µs per request: kio alone, the walk alone, both (the broker's path)."""
    api_codec = codec.api_codec(*api)
    frame = codec.encode_request(api_codec, 1, "bench", body)[4:]
    header_type = RequestHeaderV2 if api_codec.flexible_request else RequestHeaderV1
    read_header = entity_reader(header_type)

    def kio_only() -> None:
        _, size = read_header(frame, 0)
        api_codec.read_request(frame, size)

    def walk_only() -> None:
        walk(api_codec.request_type, frame, walk(header_type, frame, 0).end)

    def guarded() -> None:
        codec.decode_request(frame, api_codec)

    return (
        len(frame),
        per_request_us(kio_only, rounds),
        per_request_us(walk_only, rounds),
        per_request_us(guarded, rounds),
    )


def kio_only_decode(frame: bytes, api_codec: codec.ApiCodec) -> tuple[codec.RequestHeader, Any]:
    """The decode before the guard existed (no walk): for the comparison only."""
    header: RequestHeaderV1 | RequestHeaderV2
    if api_codec.flexible_request:
        header, size = entity_reader(RequestHeaderV2)(frame, 0)
    else:
        header, size = entity_reader(RequestHeaderV1)(frame, 0)
    body, _ = api_codec.read_request(frame, size)
    return codec.RequestHeader(
        header.request_api_key, header.request_api_version, header.correlation_id, header.client_id
    ), body


def round_trips(rounds: int) -> None:
    """Produce and Metadata round trips, with and without the walk, interleaved."""
    guarded = codec.decode_request
    timings: dict[tuple[str, str], list[float]] = {}
    with EmbeddedBroker({"log.flush.interval.messages": "9223372036854775807"}) as broker:
        with KafkaConnection(broker.bootstrap_servers, client_id="bench") as conn:
            produce_body = {**produce(1), "acks": 1}
            metadata_body = {"topics": [{"name": "orders"}], "allow_auto_topic_creation": True}
            conn.request(ApiKey.METADATA, metadata_body, version=4)  # creates the topic
            requests = {
                "Produce v10": lambda: conn.request(ApiKey.PRODUCE, produce_body, version=10),
                "Metadata v4": lambda: conn.request(ApiKey.METADATA, metadata_body, version=4),
            }
            for _ in range(5):
                for decoder_name, decoder in (("walk+kio", guarded), ("kio", kio_only_decode)):
                    codec.decode_request = decoder  # type: ignore[assignment]
                    try:
                        for name, send in requests.items():
                            started = time.perf_counter()
                            for _ in range(rounds):
                                send()
                            spent = (time.perf_counter() - started) / rounds * 1e6
                            timings.setdefault((name, decoder_name), []).append(spent)
                    finally:
                        codec.decode_request = guarded
    print(f"\nround trips through an embedded broker, {rounds} x 5 each (best of 5)")
    for name in ("Produce v10", "Metadata v4"):
        with_walk = min(timings[(name, "walk+kio")])
        without = min(timings[(name, "kio")])
        print(
            f"{name:14s} kio only {without:8.1f}µs   walk+kio {with_walk:8.1f}µs"
            f"   ratio {with_walk / without:.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20_000)
    parser.add_argument("--round-trips", type=int, default=500)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} (2 cores shared); {args.rounds} rounds x 5")
    print(f"{'request':48s} {'bytes':>6s} {'kio':>8s} {'walk':>8s} {'both':>8s} {'ratio':>6s}")
    for name, (api, body) in CASES.items():
        size, kio_us, walk_us, both_us = measure(api, body, args.rounds)
        print(
            f"{name:48s} {size:6d} {kio_us:7.2f}µ {walk_us:7.2f}µ {both_us:7.2f}µ"
            f" {both_us / kio_us:5.1f}x"
        )
    round_trips(args.round_trips)


if __name__ == "__main__":
    main()
