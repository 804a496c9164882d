"""PySpark data source for Kafka-protocol clusters (oncelog or any Kafka), with an
exactly-once sink. Needs the `spark` extra: `pip install 'oncelog[spark]'`.

    from oncelog.spark import register
    register(spark)
    df = spark.readStream.format("oncelog").option("kafka.bootstrap.servers", ...)...

docs/spark.md documents the options, the guarantee and its limits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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


if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Register the `oncelog` format on a SparkSession."""
    spark.dataSource.register(OncelogDataSource)
