"""The rows of the source: one definition, as Arrow, from which Spark's schema is derived.

The columns and types are those of Spark's Kafka source: `key`, `value`, `topic`,
`partition`, `offset`, `timestamp`, `timestampType`, and `headers` only with
`includeHeaders=true`. The reader builds Arrow batches in exactly this schema and the data
source declares the Spark schema converted from it, so the two cannot disagree.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
# Kafka's record timestamps are milliseconds; Spark's `timestamp` column is microseconds.
KAFKA_TIMESTAMP = pa.timestamp("ms", tz="UTC")
SPARK_TIMESTAMP = pa.timestamp("us", tz="UTC")

_COLUMNS = (
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", SPARK_TIMESTAMP),
    pa.field("timestampType", pa.int32()),
)
_HEADERS = pa.field("headers", pa.list_(HEADER))

ARROW_SCHEMA = pa.schema(_COLUMNS)
ARROW_SCHEMA_WITH_HEADERS = pa.schema([*_COLUMNS, _HEADERS])


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema of the source's rows: 7 columns, 8 with `includeHeaders`."""
    return ARROW_SCHEMA_WITH_HEADERS if include_headers else ARROW_SCHEMA


def spark_schema(include_headers: bool) -> StructType:
    """The same schema as Spark sees it (binary, string, int, bigint, timestamp, array)."""
    return from_arrow_schema(arrow_schema(include_headers))
