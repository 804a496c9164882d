"""The record batch and its codecs import nothing of kio: Spark's Python workers decode
fetched batches with them (`oncelog.spark.record_columns`), and importing any of kio
imports its static types and, with them, hypothesis's strategies (a reviewer counted a
worker's objects at 45,098 before its first compressed batch and 63,321 after it; PySpark
collects them all after every task). kio comes in only with a Kafka error code, on a
fault."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

WATCHED = ("kio", "hypothesis", "oncelog.protocol.codec")


def _run(probe: str) -> object:
    """What the last line `probe` prints, from a new interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    return ast.literal_eval(done.stdout.strip().splitlines()[-1])


_COMPRESSED_READ = f"""
import sys
from oncelog.protocol import compression
from oncelog.protocol.record_batch import Record, build_batch, decode_records
from oncelog.spark import record_columns
from oncelog.spark.schema import arrow_schema

values = []
for codec in (compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD):
    records = [Record(key=b"k", value=b"v%d" % i * 20) for i in range(50)]
    batch = build_batch(records, timestamp_ms=1, compression=codec)
    values.append([r.value for r in decode_records(batch)] == [r.value for r in records])
    assert record_columns.native_columns_loaded()  # the Spark reader's own decoder, built
    chosen = record_columns.select(batch, 0, 50, None)
    rows = record_columns.arrow_batch(chosen.parts, "t", 0, arrow_schema(False))
    values.append(rows.column("value").to_pylist() == [r.value for r in records])
print((values, sorted(m for m in {WATCHED!r} if m in sys.modules)))
"""


def test_reading_compressed_batches_imports_nothing_of_kio() -> None:
    decoded, imported = _run(_COMPRESSED_READ)  # type: ignore[misc]
    assert len(decoded) == 8 and all(decoded)  # 4 codecs, 2 decoders
    assert imported == []


def test_the_protocol_package_imports_its_names_on_first_use() -> None:
    probe = (
        "import sys\nimport oncelog.protocol as p\nbefore = 'kio' in sys.modules\n"
        "code = p.ErrorCode.corrupt_message\n"
        "print((before, 'kio' in sys.modules, int(code), p.ApiKey.FETCH.value))"
    )
    assert _run(probe) == (False, True, 2, 1)


def test_a_fault_still_carries_kafkas_error_code() -> None:
    """The codecs' and the batch's errors look their code up when raised."""
    from oncelog.protocol.compression import ZSTD, CorruptPayload, decompress
    from oncelog.protocol.errors import ErrorCode, KafkaError
    from oncelog.protocol.record_batch import MalformedRecords

    with pytest.raises(CorruptPayload) as corrupt:
        decompress(ZSTD, b"not zstd", 1024)
    assert corrupt.value.code is ErrorCode.corrupt_message
    assert isinstance(corrupt.value, KafkaError) and isinstance(corrupt.value, ValueError)
    assert MalformedRecords("x").code is ErrorCode.corrupt_message
