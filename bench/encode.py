"""Response encoding: the codec's writer against kio's, for the answers a transaction and a
consumer get (issue 12).

    .venv/bin/python bench/encode.py
    .venv/bin/python bench/encode.py --rounds 11 --number 20000

Each answer (Produce v9 for one partition, AddPartitionsToTxn v3, EndTxn v3, Fetch v12 with
a 10 KiB batch) is framed ``--number`` times by ``codec.encode_response`` (the response
writer) and by ``codec.encode_response_with_kio``, alternately for ``--rounds`` rounds; it
prints the median µs of each and their ratio (within one run: the machine is shared).
"""

from __future__ import annotations

import argparse
import statistics
import timeit
from functools import partial
from typing import Any

from common import uptime
from oncelog.protocol import codec
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import Record, build_batch


def answers() -> dict[str, tuple[codec.ApiCodec, dict[str, Any]]]:
    partition = {
        "index": 0,
        "error_code": ErrorCode.none,
        "base_offset": 12345,
        "log_append_time": -1,
        "log_start_offset": 0,
        "record_errors": [],
        "error_message": None,
    }
    records = build_batch([Record(None, b"x" * 1024)] * 10, timestamp_ms=1_700_000_000_000)
    fetched = {
        "partition_index": 0,
        "error_code": ErrorCode.none,
        "high_watermark": 10,
        "last_stable_offset": 10,
        "log_start_offset": 0,
        "aborted_transactions": [],
        "preferred_read_replica": -1,
        "records": records,
    }
    return {
        "Produce v9": (
            codec.api_codec(ApiKey.PRODUCE, 9),
            {
                "responses": [{"name": "topic", "partition_responses": [partition]}],
                "throttle_time": 0,
            },
        ),
        "AddPartitionsToTxn v3": (
            codec.api_codec(ApiKey.ADD_PARTITIONS_TO_TXN, 3),
            {
                "throttle_time": 0,
                "results_by_topic_v3_and_below": [
                    {
                        "name": "topic",
                        "results_by_partition": [
                            {"partition_index": 0, "partition_error_code": ErrorCode.none}
                        ],
                    }
                ],
            },
        ),
        "EndTxn v3": (
            codec.api_codec(ApiKey.END_TXN, 3),
            {"throttle_time": 0, "error_code": ErrorCode.none},
        ),
        "Fetch v12": (
            codec.api_codec(ApiKey.FETCH, 12),
            {
                "throttle_time": 0,
                "error_code": ErrorCode.none,
                "session_id": 0,
                "responses": [{"topic": "topic", "partitions": [fetched]}],
            },
        ),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--number", type=int, default=5000)
    args = parser.parse_args()
    print(f"load: {uptime()}")
    print(f"median of {args.rounds} rounds of {args.number:,} encodes, µs per answer")
    for name, (api, body) in answers().items():
        assert codec.encode_response(7, api, body) == codec.encode_response_with_kio(7, api, body)
        writer: list[float] = []
        kio: list[float] = []
        for _ in range(args.rounds):
            for times, encode in (
                (kio, codec.encode_response_with_kio),
                (writer, codec.encode_response),
            ):
                seconds = timeit.timeit(partial(encode, 7, api, body), number=args.number)
                times.append(seconds / args.number * 1e6)
        fast, slow = statistics.median(writer), statistics.median(kio)
        print(f"  {name:<22} kio {slow:6.1f}  writer {fast:6.1f}  writer/kio {fast / slow:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
