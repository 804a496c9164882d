"""The Kafka wire format: the API keys and versions the broker speaks, Kafka's error
codes, and the v2 record batch (read and checked as bytes, never re-encoded). The one
adapter to kio, :mod:`oncelog.protocol.codec`, is for the broker and the client only."""

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
