"""`oncelog topics`: a create/list/describe/delete round trip with real numbers, and errors."""

from __future__ import annotations

import json
import socket

from oncelog.testing import EmbeddedBroker


def _json(result) -> object:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_round_trip(broker: EmbeddedBroker, cli, produce_batches) -> None:
    bootstrap = ["--bootstrap-server", broker.bootstrap_servers]
    created = _json(
        cli(
            "topics",
            "create",
            *bootstrap,
            "--topic",
            "orders",
            "--partitions",
            "2",
            "--config",
            "retention.ms=600000",
            "--json",
        )
    )
    assert created["name"] == "orders" and created["partitions"] == 2 and not created["internal"]

    listed = _json(cli("topics", "list", *bootstrap, "--json"))
    assert {
        "name": "orders",
        "topic_id": created["topic_id"],
        "partitions": 2,
        "internal": False,
    } in listed

    produce_batches("orders", [[b"v%d" % i for i in range(7)]])
    described = _json(
        cli(
            "topics",
            "describe",
            *bootstrap,
            "--topic",
            "orders",
            "--data-dir",
            str(broker.data_dir),
            "--json",
        )
    )
    assert described["name"] == "orders" and described["topic_id"] == created["topic_id"]
    first, second = described["partitions"]
    segment = broker.data_dir / "orders-0" / "00000000000000000000.log"
    assert first == {
        "partition": 0,
        "leader": 0,
        "log_start_offset": 0,
        "high_watermark": 7,
        "last_stable_offset": 7,
        "log_end_offset": 7,
        "segments": 1,
        "size_bytes": segment.stat().st_size,
        "replicas": [0],
        "isr": [0],
        "under_replicated": False,
    }
    assert first["size_bytes"] > 0
    assert second["high_watermark"] == 0 and second["size_bytes"] == 0 and second["segments"] == 1

    without_dir = _json(cli("topics", "describe", *bootstrap, "--topic", "orders", "--json"))
    assert [p["segments"] for p in without_dir["partitions"]] == [None, None]

    table = cli("topics", "describe", *bootstrap, "--topic", "orders")
    assert table.exit_code == 0
    assert "High watermark" in table.stdout and "Log dir" in table.stdout

    deleted = _json(cli("topics", "delete", *bootstrap, "--topic", "orders", "--json"))
    assert deleted == {"name": "orders", "topic_id": created["topic_id"], "deleted": True}
    assert "orders" not in [t["name"] for t in _json(cli("topics", "list", *bootstrap, "--json"))]
    gone = cli("topics", "describe", *bootstrap, "--topic", "orders")
    assert gone.exit_code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in gone.stderr


def test_segment_count_follows_rolls(broker: EmbeddedBroker, cli, produce_batches) -> None:
    bootstrap = ["--bootstrap-server", broker.bootstrap_servers]
    assert (
        cli(
            "topics",
            "create",
            *bootstrap,
            "--topic",
            "rolling",
            "--partitions",
            "1",
            "--config",
            "segment.bytes=100",
        ).exit_code
        == 0
    )
    produce_batches("rolling", [[b"a" * 20], [b"b" * 20], [b"c" * 20]])  # ~90 bytes each
    (partition,) = _json(
        cli(
            "topics",
            "describe",
            *bootstrap,
            "--topic",
            "rolling",
            "--data-dir",
            str(broker.data_dir),
            "--json",
        )
    )["partitions"]
    logs = list((broker.data_dir / "rolling-0").glob("*.log"))
    assert partition["segments"] == len(logs) == 3
    assert partition["size_bytes"] == sum(f.stat().st_size for f in logs)
    assert partition["high_watermark"] == 3


def test_refusals_are_one_line_and_exit_1(broker: EmbeddedBroker, cli) -> None:
    bootstrap = ["--bootstrap-server", broker.bootstrap_servers]
    assert cli("topics", "create", *bootstrap, "--topic", "twice").exit_code == 0
    again = cli("topics", "create", *bootstrap, "--topic", "twice")
    assert again.exit_code == 1
    assert again.stderr.startswith("Error: ") and "TOPIC_ALREADY_EXISTS" in again.stderr
    bad = cli("topics", "create", *bootstrap, "--topic", "no spaces!")
    assert bad.exit_code == 1 and "INVALID_TOPIC_EXCEPTION" in bad.stderr
    replicas = cli("topics", "create", *bootstrap, "--topic", "rf", "--replication-factor", "3")
    assert replicas.exit_code == 1 and "INVALID_REPLICATION_FACTOR" in replicas.stderr
    config = cli("topics", "create", *bootstrap, "--topic", "cfg", "--config", "retention.ms")
    assert config.exit_code == 2 and "KEY=VALUE" in config.stderr
    missing = cli("topics", "delete", *bootstrap, "--topic", "never-was")
    assert missing.exit_code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr


def test_unreachable_broker(cli) -> None:
    with socket.socket() as s:  # a port nobody listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = cli("topics", "list", "--bootstrap-server", f"127.0.0.1:{port}")
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: cannot connect to 127.0.0.1:")
    malformed = cli("topics", "list", "--bootstrap-server", "localhost")
    assert malformed.exit_code == 1 and "'localhost' is not HOST:PORT" in malformed.stderr
