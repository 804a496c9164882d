"""PySpark data source for Kafka-protocol clusters (oncelog or any Kafka), with an
exactly-once sink. Needs the `spark` extra: `pip install 'oncelog[spark]'`.

    from oncelog.spark import register
    register(spark)
    df = spark.readStream.format("oncelog").option("kafka.bootstrap.servers", ...)...

docs/spark.md documents the options, the guarantee and its limits.

The names are imported on first use, not with the package: PySpark starts a new
interpreter for every streaming query's Python source, which imports this package before
`oncelog.spark.source`, and importing the writer (with its claims and producers) there
too cost every query's start for modules a source never uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.lazy_names import lazy_names

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from oncelog.spark.client import ClusterError, TopicNotFoundError
    from oncelog.spark.consume import DataLossError
    from oncelog.spark.options import AT_LEAST_ONCE, EXACTLY_ONCE, OptionError
    from oncelog.spark.schema import spark_schema
    from oncelog.spark.source import OncelogDataSource
    from oncelog.spark.writer import SinkGuaranteeError

__all__ = [
    "AT_LEAST_ONCE",
    "EXACTLY_ONCE",
    "ClusterError",
    "DataLossError",
    "OncelogDataSource",
    "OptionError",
    "SinkGuaranteeError",
    "TopicNotFoundError",
    "register",
    "spark_schema",
]
_HOME = {
    "AT_LEAST_ONCE": "oncelog.spark.options",
    "EXACTLY_ONCE": "oncelog.spark.options",
    "ClusterError": "oncelog.spark.client",
    "DataLossError": "oncelog.spark.consume",
    "OncelogDataSource": "oncelog.spark.source",
    "OptionError": "oncelog.spark.options",
    "SinkGuaranteeError": "oncelog.spark.writer",
    "TopicNotFoundError": "oncelog.spark.client",
    "spark_schema": "oncelog.spark.schema",
}


__getattr__, __dir__ = lazy_names(__name__, _HOME, globals())


def register(spark: SparkSession) -> None:
    """Register the `oncelog` format on a SparkSession."""
    from oncelog.spark.source import OncelogDataSource

    spark.dataSource.register(OncelogDataSource)
