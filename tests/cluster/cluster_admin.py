"""Helpers for the admin tests on a cluster: DescribeConfigs asked of one given broker,
waiting for every broker to agree, topics created with confluent-kafka, and what
ZooKeeper holds."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from click.testing import CliRunner
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.cli.main import main
from oncelog.client.connection import KafkaConnection
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.testing.cluster import LocalCluster

TIMEOUT_S = 60.0
TOPIC, BROKER = 2, 4  # DescribeConfigs resource types
TOPIC_CONFIG, DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 1, 2, 3, 4, 5


def eventually(
    condition: Callable[[], Any], what: str | Callable[[], str], timeout_s: float = TIMEOUT_S
) -> Any:
    """The first truthy value of ``condition()``; AssertionError naming ``what`` (or what
    it returns then) after the timeout (brokers apply ZooKeeper changes through watches, a
    moment later)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")
        time.sleep(0.1)


def describe(
    cluster: LocalCluster, broker_id: int, kind: int, name: str
) -> dict[str, tuple[str | None, int]]:
    """Each key's (value, source) as broker ``broker_id`` answers DescribeConfigs."""
    result = _describe_configs(cluster, broker_id, kind, name)
    assert result.error_code == ErrorCode.none, (broker_id, name, result.error_message)
    return {c.name: (c.value, c.config_source) for c in result.configs}


def describe_once_known(
    cluster: LocalCluster, broker_id: int, kind: int, name: str
) -> dict[str, tuple[str | None, int]] | None:
    """As :func:`describe`, or None while the broker does not know the resource yet (a
    restarted broker is registered a moment before its metadata has every topic)."""
    result = _describe_configs(cluster, broker_id, kind, name)
    if result.error_code == ErrorCode.unknown_topic_or_partition:
        return None
    assert result.error_code == ErrorCode.none, (broker_id, name, result.error_message)
    return {c.name: (c.value, c.config_source) for c in result.configs}


def _describe_configs(cluster: LocalCluster, broker_id: int, kind: int, name: str) -> Any:
    with KafkaConnection(cluster.address(broker_id)) as conn:
        response = conn.request(
            ApiKey.DESCRIBE_CONFIGS,
            {
                "resources": [
                    {"resource_type": kind, "resource_name": name, "configuration_keys": None}
                ],
                "include_synonyms": False,
                "include_documentation": False,
            },
        )
    (result,) = response.results
    return result


def on_every_broker(
    cluster: LocalCluster, kind: int, name: str, key: str, expected: tuple[str | None, int]
) -> None:
    """Wait until every broker describes ``key`` of the resource as ``expected``."""
    for broker_id in cluster.broker_ids:
        _agree(cluster, broker_id, kind, name, key, expected)


def _agree(
    cluster: LocalCluster,
    broker_id: int,
    kind: int,
    name: str,
    key: str,
    expected: tuple[str | None, int],
) -> None:
    seen: list[tuple[str | None, int]] = []

    def agrees() -> bool:
        seen.append(describe(cluster, broker_id, kind, name)[key])
        return seen[-1] == expected

    eventually(
        agrees, lambda: f"broker {broker_id} to describe {name}'s {key} as {expected}: {seen[-1]}"
    )


def oncelog_cli(bootstrap: str, *args: str) -> str:
    """Run an ``oncelog`` command in-process against ``bootstrap``; its output."""
    result = CliRunner().invoke(
        main, [*args, "--bootstrap-server", bootstrap], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return result.output


def new_topic(
    admin: AdminClient, partitions: int = 1, replication_factor: int = 3, **configs: str
) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    topic = NewTopic(name, partitions, replication_factor, config=dict(configs))
    admin.create_topics([topic], operation_timeout=30)[name].result(TIMEOUT_S)
    return name


def znode_json(cluster: LocalCluster, path: str) -> Any:
    data = cluster.znode(path)
    assert data is not None, f"no znode {path}"
    return json.loads(data)


def config_changes(cluster: LocalCluster) -> list[str]:
    """The entity paths of the config change notifications present, oldest first."""
    names = cluster.znode_children("/config/changes")
    return [znode_json(cluster, f"/config/changes/{n}")["entity_path"] for n in names]
