"""What a Python worker imports to run the connector's tasks: not oncelog's own protocol
client and kio's types. PySpark's worker runs `gc.collect()` after every task, and those
modules were two fifths of the worker's objects (68,000 against 47,000 without them; a
collection took 26-43 ms against 9-12 ms with hypothesis installed, which gives kio's
types hooks)."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

WORKER_MODULES = (
    "oncelog.spark.source",
    "oncelog.spark.reader",
    "oncelog.spark.consume",
    "oncelog.spark.writer",
    "oncelog.spark.claims",
    "oncelog.spark.producers",
)


def _imported_by(imports: tuple[str, ...], watched: tuple[str, ...]) -> list[str]:
    """Which of `watched` a new interpreter has in sys.modules after importing `imports`."""
    probe = (
        f"import importlib, sys\nfor name in {imports!r}:\n    importlib.import_module(name)\n"
        f"print(sorted(m for m in {watched!r} if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    return list(ast.literal_eval(done.stdout.strip()))


def test_the_connector_modules_leave_the_protocol_client_unimported() -> None:
    # oncelog.protocol's record batch and codecs are kio-free, and the Fetch path uses them
    watched = ("kio", "oncelog.protocol.codec", "oncelog.client.connection", "hypothesis")
    assert _imported_by(WORKER_MODULES, watched) == []


def test_a_streaming_sources_runner_leaves_the_writer_unimported() -> None:
    """PySpark starts a new interpreter for every streaming query's Python source; it
    imports `oncelog.spark.source` (the pickled data source's module) and, to plan, the
    reader. The package's `__init__` imported the writer, its claims and producers there
    too (part of the 0.13 s `oncelog.spark` took per query start, docs/spark.md)."""
    runner = ("oncelog.spark.source", "oncelog.spark.reader")
    writer = ("oncelog.spark.writer", "oncelog.spark.claims", "oncelog.spark.producers")
    assert _imported_by(runner, (*writer, "oncelog.spark.sink")) == []
    assert _imported_by(("oncelog.spark.writer",), writer) == sorted(writer)  # the control


def test_the_fault_injecting_source_leaves_the_broker_unimported() -> None:
    """The demonstration's sink (`oncelog_faults`) fails every task's first attempt, and
    PySpark runs each retry in a new worker, which unpickles the data source and so imports
    `oncelog.testing`. Its `__init__` imported the embedded broker (about 1.3 CPU-seconds
    more, with kio's types and hypothesis's hooks): seconds of every retry on two cores."""
    broker = ("kio", "oncelog.protocol.codec", "oncelog.broker", "hypothesis")
    assert _imported_by(("oncelog.testing.spark",), broker) == []
    assert _imported_by(("oncelog.testing.embedded",), broker) != []  # the control


def test_the_testing_package_still_gives_its_names() -> None:
    import oncelog.testing
    from oncelog.testing.embedded import EmbeddedBroker
    from oncelog.testing.proxy import FaultInjectionProxy

    assert oncelog.testing.EmbeddedBroker is EmbeddedBroker
    assert oncelog.testing.FaultInjectionProxy is FaultInjectionProxy
    assert set(oncelog.testing._HOME) == set(oncelog.testing.__all__)  # no drift
    assert set(oncelog.testing.__all__) <= set(dir(oncelog.testing))
    assert all(getattr(oncelog.testing, name) is not None for name in oncelog.testing.__all__)
    with pytest.raises(AttributeError, match="Nothing"):
        oncelog.testing.Nothing  # noqa: B018


def test_the_spark_package_still_gives_its_names() -> None:
    import oncelog.spark
    from oncelog.spark.client import ClusterError
    from oncelog.spark.source import OncelogDataSource
    from oncelog.spark.writer import SinkGuaranteeError

    assert oncelog.spark.OncelogDataSource is OncelogDataSource
    assert oncelog.spark.SinkGuaranteeError is SinkGuaranteeError
    assert oncelog.spark.ClusterError is ClusterError
    assert set(oncelog.spark._HOME) | {"register"} == set(oncelog.spark.__all__)  # no drift
    assert set(oncelog.spark.__all__) <= set(dir(oncelog.spark))
    assert all(getattr(oncelog.spark, name) is not None for name in oncelog.spark.__all__)
    with pytest.raises(AttributeError, match="Nothing"):
        oncelog.spark.Nothing  # noqa: B018


def test_the_client_package_still_gives_its_names() -> None:
    from oncelog import client
    from oncelog.client.admin import Admin
    from oncelog.client.connection import KafkaConnection

    assert client.Admin is Admin and client.KafkaConnection is KafkaConnection
    assert {"Admin", "KafkaConnection"} <= set(dir(client))
    with pytest.raises(AttributeError, match="Nothing"):
        client.Nothing  # noqa: B018
