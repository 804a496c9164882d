"""The fixed-size Kafka types as kio names them, each with the big-endian ``struct`` format
it is written in: the one table behind the request walker's widths
(:mod:`oncelog.protocol.schema_walk`) and the response writer's packing
(:mod:`oncelog.protocol.response_writer`), so the two cannot disagree on a type."""

from __future__ import annotations

import struct
from collections.abc import Mapping
from types import MappingProxyType

STRUCT_FORMATS: Mapping[str, str] = MappingProxyType(
    {
        "bool": "?",
        "int8": "b",
        "uint8": "B",
        "int16": "h",
        "uint16": "H",
        "error_code": "h",
        "int32": "i",
        "uint32": "I",
        "timedelta_i32": "i",
        "int64": "q",
        "uint64": "Q",
        "float64": "d",
        "timedelta_i64": "q",
        "datetime_i64": "q",
        "uuid": "16s",
    }
)

WIDTHS: Mapping[str, int] = MappingProxyType(
    {name: struct.calcsize(">" + fmt) for name, fmt in STRUCT_FORMATS.items()}
)
