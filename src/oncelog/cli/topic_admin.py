"""The protocol calls behind `oncelog topics`: Kafka requests in, plain dataclasses out.

Kept apart from the click commands so the rendering never sees kio entities and every
Kafka error code becomes one CliError carrying the broker's own message.
"""

from __future__ import annotations

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
    leader: int
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    size_bytes: int | None  # None: DescribeLogDirs did not report the partition

    @property
    def log_end_offset(self) -> int:
        """A single node has no followers: everything appended is committed, so LEO = HW."""
        return self.high_watermark


@dataclass(frozen=True)
class TopicDescription:
    summary: TopicSummary
    log_dir: str | None
    partitions: list[PartitionOffsets]


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
        response = self._conn.request(
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
        response = self._conn.request(
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
        (topic,) = self._metadata([name])
        summary = self._summarise(topic)
        indexes = sorted(p.partition_index for p in topic.partitions)
        leaders = {p.partition_index: p.leader_id for p in topic.partitions}
        start = self._offsets(name, indexes, EARLIEST, READ_UNCOMMITTED)
        high = self._offsets(name, indexes, LATEST, READ_UNCOMMITTED)
        stable = self._offsets(name, indexes, LATEST, READ_COMMITTED)
        log_dir, sizes = self._sizes(name, indexes)
        return TopicDescription(
            summary,
            log_dir,
            [
                PartitionOffsets(i, leaders[i], start[i], high[i], stable[i], sizes.get(i))
                for i in indexes
            ],
        )

    # -- requests ----------------------------------------------------------------------

    def _summary(self, name: str) -> TopicSummary:
        (topic,) = self._metadata([name])
        return self._summarise(topic)

    @staticmethod
    def _summarise(topic: Any) -> TopicSummary:
        return TopicSummary(
            topic.name, str(topic.topic_id), len(topic.partitions), topic.is_internal
        )

    def _metadata(self, names: list[str] | None) -> Any:
        response = self._conn.request(
            ApiKey.METADATA,
            {
                "topics": None if names is None else [{"name": n, "topic_id": None} for n in names],
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            },
        )
        for topic in response.topics:
            _check(topic.error_code, None, f"topic {topic.name!r}")
        return response.topics

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

    def _sizes(self, name: str, indexes: list[int]) -> tuple[str | None, dict[int, int]]:
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
                        p.partition_index: p.partition_size for p in topic.partitions
                    }
        return (response.results[0].log_dir if response.results else None), {}
