"""`oncelog produce` then `oncelog consume`, both through the CLI against a real broker."""

from __future__ import annotations

import base64
import json

import pytest

from oncelog.testing import EmbeddedBroker


@pytest.fixture(scope="module")
def topic(broker: EmbeddedBroker) -> str:
    """A two-partition topic holding three keyed records, all in partition 1."""
    from click.testing import CliRunner

    from oncelog.cli.main import main

    bootstrap = ["--bootstrap-server", broker.bootstrap_servers]
    runner = CliRunner()
    created = runner.invoke(
        main, ["topics", "create", *bootstrap, "--topic", "lines", "--partitions", "2"]
    )
    assert created.exit_code == 0, created.output
    produced = runner.invoke(
        main,
        ["produce", *bootstrap, "--topic", "lines", "--partition", "1", "--key-separator", ":"],
        input=b"k1:v1\nk2:v:2\n:\xff\r\n",
    )
    assert produced.exit_code == 0, produced.output
    assert produced.stderr == "3 records produced to lines\n"
    return "lines"


def _consume(cli, broker: EmbeddedBroker, topic: str, *extra: str):
    return cli(
        "consume",
        "--bootstrap-server",
        broker.bootstrap_servers,
        "--topic",
        topic,
        "--timeout-ms",
        "5000",
        *extra,
    )


def test_plain_values_and_keys(broker: EmbeddedBroker, cli, topic: str) -> None:
    result = _consume(
        cli,
        broker,
        topic,
        "--from-beginning",
        "--max-messages",
        "3",
        "--print-key",
        "--key-separator",
        "=",
    )
    assert result.exit_code == 0, result.output
    assert result.stdout_bytes == b"k1=v1\nk2=v:2\n=\xff\n"
    assert result.stderr == "Processed a total of 3 messages\n"


def test_json_records(broker: EmbeddedBroker, cli, topic: str) -> None:
    result = _consume(
        cli, broker, topic, "--from-beginning", "--max-messages", "3", "--partition", "1", "--json"
    )
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["partition"], r["offset"], r["key"], r["value"]) for r in records] == [
        (1, 0, "k1", "v1"),
        (1, 1, "k2", "v:2"),
        (1, 2, "", "\ufffd"),
    ]
    assert all(r["topic"] == "lines" and r["timestamp"] > 0 and r["headers"] == [] for r in records)

    binary = _consume(
        cli, broker, topic, "--from-beginning", "--max-messages", "3", "--json", "--binary"
    )
    values = [json.loads(line)["value"] for line in binary.stdout.splitlines()]
    assert [base64.b64decode(v) for v in values] == [b"v1", b"v:2", b"\xff"]


def test_idle_timeout_stops_an_empty_read(broker: EmbeddedBroker, cli, topic: str) -> None:
    result = cli(
        "consume",
        "--bootstrap-server",
        broker.bootstrap_servers,
        "--topic",
        topic,
        "--from-beginning",
        "--partition",
        "0",
        "--timeout-ms",
        "300",
    )
    assert result.exit_code == 0 and result.stdout == ""
    assert result.stderr == "Processed a total of 0 messages\n"


def test_consume_refusals(broker: EmbeddedBroker, cli, topic: str) -> None:
    unknown = _consume(cli, broker, "no-such-topic")
    assert unknown.exit_code == 1 and "cannot read topic 'no-such-topic'" in unknown.stderr
    partition = _consume(cli, broker, topic, "--partition", "7")
    assert partition.exit_code == 1 and "has no partition 7" in partition.stderr


def test_line_without_separator_is_refused(broker: EmbeddedBroker, cli, topic: str) -> None:
    result = cli(
        "produce",
        "--bootstrap-server",
        broker.bootstrap_servers,
        "--topic",
        topic,
        "--key-separator",
        ":",
        input="fine:1\nno separator\n",
    )
    assert result.exit_code == 1
    assert "line 2 has no key separator ':'" in result.stderr


def test_delivery_failures_are_reported(broker: EmbeddedBroker, cli, topic: str) -> None:
    result = cli(
        "produce",
        "--bootstrap-server",
        broker.bootstrap_servers,
        "--topic",
        topic,
        "--partition",
        "9",
        "--timeout-ms",
        "2000",
        input="lost\n",
    )
    assert result.exit_code == 1
    assert "delivery to lines failed" in result.stderr
    assert result.stderr.endswith("0 records produced to lines, 1 failed\n")
