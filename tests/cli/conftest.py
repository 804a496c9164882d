"""Fixtures for the CLI tests: one embedded broker per module, a CliRunner wrapper and a
producer that makes one batch per group of values."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Producer

from oncelog.cli.main import main
from oncelog.testing import EmbeddedBroker

Cli = Callable[..., Result]
ProduceBatches = Callable[..., None]


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as running:
        yield running


@pytest.fixture
def cli() -> Cli:
    """Invoke `oncelog ARGS`; an exception escaping a command fails the test."""

    def invoke(*args: str, input: bytes | str | None = None) -> Result:
        return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)

    return invoke


@pytest.fixture
def produce_batches(broker: EmbeddedBroker) -> ProduceBatches:
    """Produce each group of values as its own batch: a flush between groups."""

    def produce(topic: str, batches: Sequence[Sequence[bytes]], partition: int = 0) -> None:
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 20})
        for values in batches:
            for value in values:
                producer.produce(topic, value, key=b"k", partition=partition)
            assert producer.flush(10) == 0

    return produce
