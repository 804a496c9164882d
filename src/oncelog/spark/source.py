"""The `oncelog` data source: Spark's Kafka source and sink options, exactly-once writes."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from oncelog.spark.options import parse_read_options, parse_write_options

SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int, headers array<struct<key: string, value: binary>>"
)


class OncelogDataSource(DataSource):
    """`spark.dataSource.register(OncelogDataSource)`, then `format("oncelog")`."""

    @classmethod
    def name(cls) -> str:
        return "oncelog"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        from oncelog.spark.reader import OncelogBatchReader

        return OncelogBatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from oncelog.spark.reader import OncelogStreamReader

        return OncelogStreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from oncelog.spark.writer import OncelogBatchWriter

        return OncelogBatchWriter(parse_write_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from oncelog.spark.writer import OncelogStreamWriter

        return OncelogStreamWriter(parse_write_options(self.options), schema)
