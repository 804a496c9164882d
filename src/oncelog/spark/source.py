"""The `oncelog` data source: Spark's Kafka source and sink options, exactly-once writes.

Options are checked as early as Spark lets a Python data source check them: a read's
when the DataFrame is loaded (`schema()`, before any query runs), a write's when the
writer is made. One check, streaming-only, can only run when the stream reader is made;
PySpark (4.3) hides an exception raised there behind an `UnboundLocalError` of its own
(its runner's `finally: reader.stop()`), so that error is carried by a reader that
raises it from its first call instead, where Spark reports it as it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from oncelog.spark.options import OptionError, parse_read_options, parse_write_options
from oncelog.spark.schema import spark_schema


class OncelogDataSource(DataSource):
    """`spark.dataSource.register(OncelogDataSource)`, then `format("oncelog")`."""

    @classmethod
    def name(cls) -> str:
        return "oncelog"

    def schema(self) -> StructType:
        # every check that holds for batch and streaming reads alike, at load()
        options = parse_read_options(self.options, streaming=None)
        return spark_schema(options.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        from oncelog.spark.reader import OncelogBatchReader

        return OncelogBatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from oncelog.spark.reader import OncelogStreamReader

        try:
            options = parse_read_options(self.options, streaming=True)
        except OptionError as exc:
            return _RefusedStreamReader(exc)
        return OncelogStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from oncelog.spark.writer import OncelogBatchWriter

        return OncelogBatchWriter(parse_write_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from oncelog.spark.writer import OncelogStreamWriter

        return OncelogStreamWriter(parse_write_options(self.options), schema)


class _RefusedStreamReader(DataSourceStreamReader):
    """A stream whose options are wrong: every call raises the option error."""

    def __init__(self, error: OptionError) -> None:
        self.error = error

    def initialOffset(self) -> dict:
        raise self.error

    def latestOffset(self, start: dict | None = None, limit: object = None) -> dict:
        raise self.error

    def partitions(self, start: dict, end: dict) -> list[Any]:
        raise self.error

    def read(self, partition: object) -> Iterator[Any]:
        raise self.error
