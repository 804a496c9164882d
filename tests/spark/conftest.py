"""One SparkSession for the whole test session (start-up costs about 5 s), master
`local[2,3]`: two cores, and a failed task is tried up to three times, as on a cluster.
Its Python workers are forked by PySpark's own daemon, what users get unless they set
`spark.python.daemon.module` (tests/spark/test_spark_daemon.py runs the connector under
`oncelog.spark.daemon`, as `pipeline.job.new_session` sets it)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    # executors' Python workers must run this interpreter (the one with oncelog installed)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from oncelog.spark import register
    from oncelog.testing.spark import register_faults

    session = (
        SparkSession.builder.master("local[2,3]")
        .appName("oncelog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    register_faults(session)
    yield session
    session.stop()


@pytest.fixture
def bootstrap(oncelog_session_broker) -> str:  # type: ignore[no-untyped-def]
    return oncelog_session_broker.bootstrap_servers
