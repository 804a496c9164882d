"""`oncelog configs`, `records delete`, `topics alter` and the `groups` clean-up verbs
against a real broker: what they print, what they change, and one-line refusals."""

from __future__ import annotations

import json

from confluent_kafka import Consumer, TopicPartition

from oncelog.testing import EmbeddedBroker


def _json(result) -> object:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_configs_topics_alter_and_records_delete(
    broker: EmbeddedBroker, cli, produce_batches
) -> None:
    bootstrap = ["--bootstrap-server", broker.bootstrap_servers]
    assert cli("topics", "create", *bootstrap, "--topic", "verbs").exit_code == 0
    changed = _json(
        cli(
            "configs", "alter", *bootstrap, "--entity-type", "topics", "--entity-name", "verbs",
            "--add-config", "retention.ms=60000", "--add-config", "segment.bytes=2048", "--json",
        )
    )  # fmt: skip
    assert changed["changed"] == ["retention.ms", "segment.bytes"]
    described = _json(
        cli(
            "configs",
            "describe",
            *bootstrap,
            "--entity-type",
            "topics",
            "--entity-name",
            "verbs",
            "--json",
        )
    )
    assert {
        "name": "retention.ms",
        "value": "60000",
        "source": "topic",
        "read_only": False,
    } in described
    refused = cli(
        "configs", "alter", *bootstrap, "--entity-type", "topics", "--entity-name", "verbs",
        "--add-config", "retention.ms=soon",
    )  # fmt: skip
    assert refused.exit_code == 1 and "INVALID_CONFIG" in refused.output
    assert len(refused.output.strip().splitlines()) == 1

    assert _json(
        cli("topics", "alter", *bootstrap, "--topic", "verbs", "--partitions", "3", "--json")
    )
    assert (
        "INVALID_PARTITIONS"
        in cli("topics", "alter", *bootstrap, "--topic", "verbs", "--partitions", "2").output
    )

    produce_batches("verbs", [[b"%d" % i for i in range(10)]])
    deleted = _json(
        cli(
            "records",
            "delete",
            *bootstrap,
            "--topic",
            "verbs",
            "--partition",
            "0",
            "--before",
            "4",
            "--json",
        )
    )
    assert deleted == [{"partition": 0, "low_watermark": 4}]
    everything = _json(cli("records", "delete", *bootstrap, "--topic", "verbs", "--json"))
    assert {"partition": 0, "low_watermark": 10} in everything


def test_group_verbs(broker: EmbeddedBroker, cli, produce_batches) -> None:
    bootstrap = ["--bootstrap-server", broker.bootstrap_servers]
    assert (
        cli("topics", "create", *bootstrap, "--topic", "grouped", "--partitions", "2").exit_code
        == 0
    )
    produce_batches("grouped", [[b"a", b"b", b"c"]])
    plan = _json(
        cli(
            "groups",
            "reset-offsets",
            *bootstrap,
            "--group",
            "g",
            "--topic",
            "grouped",
            "--to-latest",
            "--json",
        )
    )
    assert plan["executed"] is False
    done = _json(
        cli(
            "groups", "reset-offsets", *bootstrap, "--group", "g", "--topic", "grouped",
            "--to-latest", "--execute", "--json",
        )
    )  # fmt: skip
    assert {"topic": "grouped", "partition": 0, "offset": 3} in done["offsets"]
    assert committed(broker, "g", "grouped") == [3, 0]

    deleted = _json(
        cli(
            "groups",
            "delete-offsets",
            *bootstrap,
            "--group",
            "g",
            "--topic",
            "grouped",
            "--partition",
            "1",
            "--json",
        )
    )
    assert deleted == [{"topic": "grouped", "partition": 1, "error": "OK"}]
    assert committed(broker, "g", "grouped") == [3, -1001]

    assert _json(cli("groups", "delete", *bootstrap, "--group", "g", "--json")) == [
        {"group": "g", "error": "OK"}
    ]
    assert committed(broker, "g", "grouped") == [-1001, -1001]
    missing = cli("groups", "delete", *bootstrap, "--group", "nobody")
    assert missing.exit_code == 1 and "GROUP_ID_NOT_FOUND" in missing.output


def committed(broker: EmbeddedBroker, group: str, topic: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], 10)
        return [tp.offset for tp in found]
    finally:
        consumer.close()
