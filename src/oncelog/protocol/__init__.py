"""The Kafka wire format: the API keys and versions the broker speaks, Kafka's error
codes, and the v2 record batch (read and checked as bytes, never re-encoded). The one
adapter to kio, :mod:`oncelog.protocol.codec`, is for the broker and the client only.

The names are imported on first use, not with the package: importing a module of it (the
record batch, its codecs) must not import the others, and `ErrorCode` is kio's, which
Spark's Python workers are kept free of (tests/protocol/test_kio_free.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.lazy_names import lazy_names

if TYPE_CHECKING:
    from oncelog.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
    from oncelog.protocol.errors import ErrorCode, KafkaError
    from oncelog.protocol.record_batch import (
        BatchHeader,
        DecodedRecord,
        Record,
        build_batch,
        build_control_batch,
        decode_records,
        parse_header,
    )

__all__ = [
    "SUPPORTED_VERSIONS",
    "ApiKey",
    "BatchHeader",
    "DecodedRecord",
    "ErrorCode",
    "KafkaError",
    "Record",
    "build_batch",
    "build_control_batch",
    "decode_records",
    "parse_header",
]
_HOME = {
    "SUPPORTED_VERSIONS": "oncelog.protocol.api_versions",
    "ApiKey": "oncelog.protocol.api_versions",
    "BatchHeader": "oncelog.protocol.record_batch",
    "DecodedRecord": "oncelog.protocol.record_batch",
    "ErrorCode": "oncelog.protocol.errors",
    "KafkaError": "oncelog.protocol.errors",
    "Record": "oncelog.protocol.record_batch",
    "build_batch": "oncelog.protocol.record_batch",
    "build_control_batch": "oncelog.protocol.record_batch",
    "decode_records": "oncelog.protocol.record_batch",
    "parse_header": "oncelog.protocol.record_batch",
}

__getattr__, __dir__ = lazy_names(__name__, _HOME, globals())
