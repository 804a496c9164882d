"""Fixtures for the CLI tests: one embedded broker per module, a CliRunner wrapper and a
producer that makes one batch per group of values."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest
from click.testing import CliRunner, Result

from oncelog.cli.main import main
from oncelog.testing import EmbeddedBroker

from .batches import produce_groups_as_batches

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
    """Produce each group of values as its own batch (see batches.py)."""

    def produce(topic: str, batches: Sequence[Sequence[bytes]], partition: int = 0) -> None:
        produce_groups_as_batches(broker.bootstrap_servers, topic, batches, partition)

    return produce
