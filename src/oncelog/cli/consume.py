"""`oncelog consume`: a console consumer (confluent-kafka) that needs no consumer group.

Partitions are assigned, not subscribed, under a throwaway group id with auto-commit off,
so reading never moves anyone's committed offsets.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from typing import IO, Any

import click
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaException,
    Message,
    TopicPartition,
)

from oncelog.cli.output import (
    CliError,
    bootstrap_option,
    client_config,
    render_bytes,
    reports_errors,
)
from oncelog.client.connection import Bootstrap

METADATA_TIMEOUT_S = 10.0
POLL_S = 0.2


@click.command()
@bootstrap_option
@click.option("--topic", required=True, help="Topic to read.")
@click.option(
    "--from-beginning", is_flag=True, help="Start at the log start offset instead of the end."
)
@click.option(
    "--isolation-level",
    type=click.Choice(["read_committed", "read_uncommitted"]),
    default="read_committed",
    show_default=True,
    help="read_committed skips aborted transactional records and stops at the last stable offset.",
)
@click.option("--max-messages", type=click.IntRange(min=1), help="Stop after this many records.")
@click.option(
    "--timeout-ms",
    type=click.IntRange(min=1),
    help="Stop when no record arrived for this long [default: wait forever].",
)
@click.option("--print-key", is_flag=True, help="Print KEY SEP VALUE instead of the value alone.")
@click.option(
    "--key-separator", default="\t", show_default="tab", help="Separator for --print-key."
)
@click.option(
    "--partition", type=click.IntRange(min=0), help="Read only this partition [default: all]."
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="One JSON object per record: topic, partition, offset, timestamp, key, value, headers.",
)
@click.option(
    "--binary", is_flag=True, help="With --json: keys, values and headers in base64, not utf-8."
)
@reports_errors
def consume(
    bootstrap: Bootstrap,
    topic: str,
    from_beginning: bool,
    isolation_level: str,
    max_messages: int | None,
    timeout_ms: int | None,
    print_key: bool,
    key_separator: str,
    partition: int | None,
    as_json: bool,
    binary: bool,
) -> None:
    """Write records to stdout, one per line.

    The count goes to stderr. No consumer group is joined and no offset is committed.
    """
    consumer = Consumer(
        client_config(
            bootstrap,
            **{
                "group.id": f"oncelog-console-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "isolation.level": isolation_level,
            },
        )
    )
    out = sys.stdout.buffer
    count = 0
    try:
        start = OFFSET_BEGINNING if from_beginning else OFFSET_END
        partitions = _partitions(consumer, topic, partition)
        consumer.assign([TopicPartition(topic, p, start) for p in partitions])
        idle_since = time.monotonic()
        while max_messages is None or count < max_messages:
            if timeout_ms is not None and (time.monotonic() - idle_since) * 1000 >= timeout_ms:
                break
            message = consumer.poll(POLL_S)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                raise CliError(f"consuming {topic} failed: {error.str()}")
            idle_since = time.monotonic()
            count += 1
            if as_json:
                out.write(json.dumps(_as_dict(message, binary)).encode() + b"\n")
            else:
                _write_plain(out, message, key_separator.encode() if print_key else None)
            out.flush()
    except KeyboardInterrupt:
        pass
    except KafkaException as exc:
        raise CliError(f"consuming {topic} failed: {exc.args[0].str()}") from exc
    finally:
        consumer.close()
    click.echo(f"Processed a total of {count} messages", err=True)


def _partitions(consumer: Consumer, topic: str, only: int | None) -> list[int]:
    metadata = consumer.list_topics(topic, timeout=METADATA_TIMEOUT_S).topics.get(topic)
    if metadata is None or metadata.error is not None:
        reason = metadata.error.str() if metadata is not None else "not in metadata"
        raise CliError(f"cannot read topic {topic!r}: {reason}")
    partitions = sorted(metadata.partitions)
    if only is None:
        return partitions
    if only not in partitions:
        raise CliError(f"topic {topic!r} has no partition {only} (it has {len(partitions)})")
    return [only]


def _write_plain(out: IO[bytes], message: Message, separator: bytes | None) -> None:
    value = message.value()
    line = b"null" if value is None else value
    if separator is not None:
        key = message.key()
        line = (b"null" if key is None else key) + separator + line
    out.write(line + b"\n")


def _as_dict(message: Message, binary: bool) -> dict[str, Any]:
    _, timestamp = message.timestamp()
    return {
        "topic": message.topic(),
        "partition": message.partition(),
        "offset": message.offset(),
        "timestamp": timestamp,
        "key": render_bytes(message.key(), binary=binary),
        "value": render_bytes(message.value(), binary=binary),
        "headers": [
            {"key": k, "value": render_bytes(v, binary=binary)} for k, v in _headers(message)
        ],
    }


def _headers(message: Message) -> list[tuple[str, bytes | None]]:
    """A consumed message's headers. A consumer returns a list of (name, bytes) pairs; the
    client's type also allows a dict and str values (what a producer may pass)."""
    raw = message.headers() or []
    pairs = raw.items() if isinstance(raw, dict) else raw
    return [(k, v.encode() if isinstance(v, str) else v) for k, v in pairs]
