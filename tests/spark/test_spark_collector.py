"""The range reader pauses Python's cyclic garbage collector only while it fetches and builds
a batch: whoever iterates (PySpark, user code) always runs with the collector as it was."""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from oncelog.spark.consume import collector_paused, read_range
from oncelog.spark.offsets import OffsetRange
from oncelog.spark.options import parse_read_options

from .spark_helpers import create_topic, unique


@pytest.fixture
def collector_enabled() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


@pytest.mark.usefixtures("collector_enabled")
def test_collector_paused_restores_the_state_it_found() -> None:
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(KeyError), collector_paused():
        raise KeyError("fails inside")
    assert gc.isenabled()
    gc.disable()  # a caller that runs without the collector keeps it off
    with collector_paused():
        pass
    assert not gc.isenabled()


@pytest.mark.usefixtures("collector_enabled")
def test_the_collector_runs_between_batches_and_after_the_range(bootstrap: str) -> None:
    topic = create_topic(bootstrap, unique("collector"), partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(20_000):
        producer.produce(topic, value=b"%05d" % i)
    assert producer.flush(30) == 0
    options = dataclasses.replace(  # the consumer's path: the one that builds objects
        parse_read_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic}, False),
        own_fetch=False,
    )
    rows = 0
    for batch in read_range(options, OffsetRange(topic, 0, 0, 20_000), "collector-test"):
        assert gc.isenabled()
        rows += batch.num_rows
    assert rows == 20_000
    assert gc.isenabled()
    # a reader closed after its first batch (PySpark stops reading on a limit)
    batches = read_range(options, OffsetRange(topic, 0, 0, 20_000), "collector-test")
    assert next(batches).num_rows > 0
    batches.close()
    assert gc.isenabled()
