"""`oncelog produce`: a console producer (confluent-kafka) reading one record per line."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import IO, Any

import click
from confluent_kafka import KafkaError, KafkaException, Message, Producer

from oncelog.cli.output import CliError, bootstrap_option, client_config, reports_errors
from oncelog.client.connection import Bootstrap


class _Deliveries:
    """Counts acknowledged records and reports each failed one as it comes back."""

    def __init__(self) -> None:
        self.delivered = 0
        self.failed = 0

    def __call__(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            self.delivered += 1
            return
        self.failed += 1
        click.echo(f"delivery to {message.topic()} failed: {error.name()}: {error.str()}", err=True)


def _records(lines: IO[bytes], separator: bytes | None) -> Iterator[tuple[bytes | None, bytes]]:
    for number, line in enumerate(lines, start=1):
        line = line.removesuffix(b"\n").removesuffix(b"\r")
        if separator is None:
            yield None, line
            continue
        key, found, value = line.partition(separator)
        if not found:
            raise CliError(f"line {number} has no key separator {separator.decode()!r}")
        yield key, value


@click.command()
@bootstrap_option
@click.option("--topic", required=True, help="Topic to write to.")
@click.option(
    "--key-separator",
    metavar="SEP",
    help="Each line is KEY SEP VALUE (split at the first SEP); without it lines have no key.",
)
@click.option(
    "--acks",
    type=click.Choice(["0", "1", "-1", "all"]),
    default="all",
    show_default=True,
    help="Acknowledgements the producer waits for.",
)
@click.option(
    "--partition",
    type=click.IntRange(min=0),
    help="Write every record to this partition [default: the key's partition].",
)
@click.option(
    "--compression",
    type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
    default="none",
    show_default=True,
    help="Codec of the batches sent (the topic's compression.type may recompress them).",
)
@click.option(
    "--timeout-ms",
    type=click.IntRange(min=1),
    default=30_000,
    show_default=True,
    help="Give up on a record not acknowledged within this time (message.timeout.ms).",
)
@reports_errors
def produce(
    bootstrap: Bootstrap,
    topic: str,
    key_separator: str | None,
    acks: str,
    partition: int | None,
    compression: str,
    timeout_ms: int,
) -> None:
    """Send each line of stdin as one record.

    The count goes to stderr; the exit status is non-zero if any record was not delivered.
    """
    producer = Producer(
        client_config(
            bootstrap,
            **{
                "acks": acks,
                "linger.ms": 5,
                "message.timeout.ms": timeout_ms,
                "compression.type": compression,
            },
        )
    )
    deliveries = _Deliveries()
    extra: dict[str, Any] = {} if partition is None else {"partition": partition}
    separator = key_separator.encode() if key_separator else None
    try:
        for key, value in _records(sys.stdin.buffer, separator):
            _send(producer, topic, key, value, deliveries, extra)
    finally:
        producer.flush()
    noun = "record" if deliveries.delivered == 1 else "records"
    click.echo(
        f"{deliveries.delivered} {noun} produced to {topic}"
        + (f", {deliveries.failed} failed" if deliveries.failed else ""),
        err=True,
    )
    if deliveries.failed:
        raise SystemExit(1)


def _send(
    producer: Producer,
    topic: str,
    key: bytes | None,
    value: bytes,
    deliveries: _Deliveries,
    extra: dict[str, Any],
) -> None:
    """Produce one record, waiting for room when librdkafka's local queue is full."""
    while True:
        try:
            producer.produce(topic, value, key, on_delivery=deliveries, **extra)
        except BufferError:
            producer.poll(0.1)
            continue
        except KafkaException as exc:  # raised synchronously, e.g. an unknown partition
            raise CliError(f"cannot produce to {topic}: {exc}") from exc
        producer.poll(0)
        return
