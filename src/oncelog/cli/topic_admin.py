"""The protocol calls behind `oncelog topics`: Kafka requests in, plain dataclasses out.

Kept apart from the click commands so the rendering never sees kio entities and every
Kafka error code becomes one CliError carrying the broker's own message.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from oncelog.cli.output import CliError
from oncelog.client.connection import KafkaConnection
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode

EARLIEST = -2
LATEST = -1
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
TIMEOUT_MS = 30_000


@dataclass(frozen=True)
class TopicSummary:
    name: str
    topic_id: str
    partitions: int
    internal: bool


@dataclass(frozen=True)
class PartitionOffsets:
    partition: int
    leader: int  # -1: no leader (offline); the offsets are then -1
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    size_bytes: int | None  # None: DescribeLogDirs did not report the partition
    log_end_offset: int  # the leader's: the high watermark plus DescribeLogDirs' offset lag
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()

    @property
    def under_replicated(self) -> bool:
        """Fewer in-sync replicas than replicas (Kafka's UnderReplicatedPartitions)."""
        return len(self.isr) < len(self.replicas)


@dataclass(frozen=True)
class TopicDescription:
    summary: TopicSummary
    log_dir: str | None  # of the (first) leader asked
    partitions: list[PartitionOffsets]
    brokers: int = 1  # live brokers Metadata listed

    @property
    def replicated(self) -> bool:
        return self.brokers > 1 or any(len(p.replicas) > 1 for p in self.partitions)


def _check(code: int, message: str | None, what: str) -> None:
    if code != ErrorCode.none:
        name = ErrorCode(code).name.upper()
        raise CliError(f"{what}: {name}" + (f": {message}" if message else ""))


class TopicAdmin:
    """Topic administration over one blocking connection."""

    def __init__(self, connection: KafkaConnection) -> None:
        self._conn = connection

    def create(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> TopicSummary:
        with self._controller() as controller:
            response = controller.request(
                ApiKey.CREATE_TOPICS,
                {
                    "topics": [
                        {
                            "name": name,
                            "num_partitions": partitions,
                            "replication_factor": replication_factor,
                            "assignments": [],
                            "configs": [{"name": k, "value": v} for k, v in configs.items()],
                        }
                    ],
                    "timeout": TIMEOUT_MS,
                    "validate_only": False,
                },
            )
        (result,) = response.topics
        _check(result.error_code, getattr(result, "error_message", None), f"cannot create {name!r}")
        return self._summary(name)

    def delete(self, name: str) -> str:
        """Delete by name and return the id the topic had."""
        with self._controller() as controller:
            response = controller.request(
                ApiKey.DELETE_TOPICS,
                {
                    "topics": [{"name": name, "topic_id": None}],
                    "topic_names": [name],
                    "timeout": TIMEOUT_MS,
                },
            )
        (result,) = response.responses
        _check(result.error_code, getattr(result, "error_message", None), f"cannot delete {name!r}")
        return str(getattr(result, "topic_id", "") or "")

    def list_topics(self) -> list[TopicSummary]:
        return sorted((self._summarise(t) for t in self._metadata(None)), key=lambda t: t.name)

    def describe(self, name: str) -> TopicDescription:
        """Each partition's offsets, asked of its leader (in a cluster: of each leader in
        turn, at the address Metadata gives), with replicas and ISR."""
        response = self._metadata_response([name])
        (topic,) = response.topics
        _check(topic.error_code, None, f"topic {topic.name!r}")
        summary = self._summarise(topic)
        addresses = {b.node_id: f"{b.host}:{b.port}" for b in response.brokers}
        by_leader: dict[int, list[int]] = {}
        for p in topic.partitions:
            by_leader.setdefault(p.leader_id, []).append(p.partition_index)
        offsets: dict[int, tuple[int, int, int, int | None, int]] = {}
        log_dir = None
        for leader, indexes in sorted(by_leader.items()):
            if leader not in addresses:
                offsets.update(dict.fromkeys(indexes, (-1, -1, -1, None, -1)))
                continue
            with KafkaConnection(addresses[leader], client_id=self._conn.client_id) as conn:
                leader_admin = TopicAdmin(conn)
                start = leader_admin._offsets(name, indexes, EARLIEST, READ_UNCOMMITTED)
                high = leader_admin._offsets(name, indexes, LATEST, READ_UNCOMMITTED)
                stable = leader_admin._offsets(name, indexes, LATEST, READ_COMMITTED)
                leader_dir, sizes = leader_admin._sizes(name, indexes)
            log_dir = log_dir or leader_dir
            for i in indexes:
                size, lag = sizes.get(i, (None, 0))
                offsets[i] = (start[i], high[i], stable[i], size, high[i] + lag)
        partitions = []
        for p in sorted(topic.partitions, key=lambda p: p.partition_index):
            start_offset, high_watermark, stable_offset, size, end = offsets[p.partition_index]
            partitions.append(
                PartitionOffsets(
                    p.partition_index,
                    p.leader_id,
                    start_offset,
                    high_watermark,
                    stable_offset,
                    size,
                    end,
                    tuple(p.replica_nodes),
                    tuple(p.isr_nodes),
                )
            )
        return TopicDescription(summary, log_dir, partitions, len(response.brokers))

    # -- requests ----------------------------------------------------------------------

    @contextmanager
    def _controller(self) -> Iterator[KafkaConnection]:
        """A connection to the controller, which alone creates and deletes topics in a
        cluster (NOT_CONTROLLER elsewhere); a single node is its own controller."""
        response = self._metadata_response([])
        addresses = {b.node_id: f"{b.host}:{b.port}" for b in response.brokers}
        if len(addresses) <= 1 or response.controller_id not in addresses:
            yield self._conn
            return
        with KafkaConnection(
            addresses[response.controller_id], client_id=self._conn.client_id
        ) as controller:
            yield controller

    def _summary(self, name: str) -> TopicSummary:
        (topic,) = self._metadata([name])
        return self._summarise(topic)

    @staticmethod
    def _summarise(topic: Any) -> TopicSummary:
        return TopicSummary(
            topic.name, str(topic.topic_id), len(topic.partitions), topic.is_internal
        )

    def _metadata(self, names: list[str] | None) -> Any:
        response = self._metadata_response(names)
        for topic in response.topics:
            _check(topic.error_code, None, f"topic {topic.name!r}")
        return response.topics

    def _metadata_response(self, names: list[str] | None) -> Any:
        return self._conn.request(
            ApiKey.METADATA,
            {
                "topics": None if names is None else [{"name": n, "topic_id": None} for n in names],
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            },
        )

    def _offsets(
        self, name: str, indexes: list[int], timestamp: int, isolation: int
    ) -> dict[int, int]:
        response = self._conn.request(
            ApiKey.LIST_OFFSETS,
            {
                "replica_id": -1,
                "isolation_level": isolation,
                "timeout": TIMEOUT_MS,
                "topics": [
                    {
                        "name": name,
                        "partitions": [
                            {
                                "partition_index": i,
                                "current_leader_epoch": -1,
                                "timestamp": timestamp,
                            }
                            for i in indexes
                        ],
                    }
                ],
            },
        )
        found = {}
        for partition in response.topics[0].partitions:
            _check(partition.error_code, None, f"offsets of {name}-{partition.partition_index}")
            found[partition.partition_index] = partition.offset
        return found

    def _sizes(
        self, name: str, indexes: list[int]
    ) -> tuple[str | None, dict[int, tuple[int, int]]]:
        """The log dir, and each partition's (size in bytes, log end past the HW)."""
        response = self._conn.request(
            ApiKey.DESCRIBE_LOG_DIRS,
            {
                "topics": [{"topic": name, "partitions": indexes}],
            },
        )
        _check(getattr(response, "error_code", ErrorCode.none), None, "log dirs")
        for result in response.results:
            _check(result.error_code, None, f"log dir {result.log_dir}")
            for topic in result.topics:
                if topic.name == name:
                    return result.log_dir, {
                        p.partition_index: (p.partition_size, p.offset_lag)
                        for p in topic.partitions
                    }
        return (response.results[0].log_dir if response.results else None), {}
