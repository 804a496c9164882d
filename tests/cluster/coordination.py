"""Raw protocol steps of a transaction against chosen brokers of a LocalCluster, for tests
that must see what each broker answers (a real client retries those answers away)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from oncelog.client.connection import KafkaConnection
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.record_batch import Record, build_batch
from oncelog.testing.cluster import LocalCluster

GROUP, TRANSACTION = 0, 1
TXN_STATE = "__transaction_state"
OFFSETS = "__consumer_offsets"
TopicPartition = tuple[str, int]

INTERNAL_PARTITIONS = 3
# Small internal topics, and groups that form at once: coordinators load in moments.
COORDINATOR_CONFIG = {
    "transaction.state.log.num.partitions": str(INTERNAL_PARTITIONS),
    "offsets.topic.num.partitions": str(INTERNAL_PARTITIONS),
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
}
# A killed broker's session, and a follower that stopped fetching, noticed within seconds.
FAST_FAILOVER_CONFIG = {
    "zookeeper.session.timeout.ms": "3000",
    "replica.lag.time.max.ms": "3000",
}


def connect(cluster: LocalCluster, broker_id: int) -> KafkaConnection:
    return KafkaConnection(cluster.address(broker_id), client_id="eos-test", timeout_s=30)


def find_coordinator(conn: KafkaConnection, key: str, key_type: int) -> tuple[ErrorCode, int]:
    """(error, coordinator's broker id) as FindCoordinator v4 answers for ``key``."""
    answer = conn.request(
        ApiKey.FIND_COORDINATOR, {"key_type": key_type, "coordinator_keys": [key]}, version=4
    )
    (found,) = answer.coordinators
    return ErrorCode(found.error_code), found.node_id


def wait_for_coordinator(
    cluster: LocalCluster,
    key: str,
    key_type: int,
    timeout_s: float = 60,
    *,
    not_in: Iterable[int] = (),
) -> int:
    """The coordinator every live broker names for ``key`` (once it is none of
    ``not_in``)."""
    excluded = set(not_in)
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        live = [b for b, p in cluster.brokers.items() if p.running]
        try:
            answers = set()
            for broker_id in live:
                with connect(cluster, broker_id) as conn:
                    answers.add(find_coordinator(conn, key, key_type))
            if len(answers) == 1:
                ((code, node),) = answers
                if code == ErrorCode.none and node not in excluded:
                    return node
            last = answers
        except Exception as exc:  # a broker between death and restart
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"no coordinator for {key!r} within {timeout_s} s: {last}")


def init_producer_id(
    conn: KafkaConnection, transactional_id: str | None = None, timeout_ms: int = 60_000
) -> tuple[ErrorCode, int, int]:
    answer = conn.request(
        ApiKey.INIT_PRODUCER_ID,
        {
            "transactional_id": transactional_id,
            "transaction_timeout": timeout_ms,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    )
    return ErrorCode(answer.error_code), answer.producer_id, answer.producer_epoch


def until(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """Whether ``condition`` held within ``timeout_s`` (polled)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def txn_state(conn: KafkaConnection, transactional_id: str) -> str:
    """The id's state as DescribeTransactions names it ("Ongoing", "CompleteCommit"...)."""
    answer = conn.request(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [transactional_id]})
    return str(answer.transaction_states[0].transaction_state)


def by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """Partition indexes grouped by topic, as requests list them."""
    topics: dict[str, list[int]] = {}
    for topic, index in partitions:
        topics.setdefault(topic, []).append(index)
    return topics


def add_partitions(
    conn: KafkaConnection,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    partitions: Iterable[TopicPartition],
) -> dict[TopicPartition, ErrorCode]:
    """AddPartitionsToTxn as clients send it (v3: one transaction)."""
    topics = by_topic(partitions)
    answer = conn.request(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        {
            "v3_and_below_transactional_id": transactional_id,
            "v3_and_below_producer_id": producer_id,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": t, "partitions": p} for t, p in topics.items()],
        },
        version=3,
    )
    return {
        (t.name, p.partition_index): ErrorCode(p.partition_error_code)
        for t in answer.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


def end_txn(
    conn: KafkaConnection, transactional_id: str, producer_id: int, epoch: int, commit: bool
) -> ErrorCode:
    answer = conn.request(
        ApiKey.END_TXN,
        {
            "transactional_id": transactional_id,
            "producer_id": producer_id,
            "producer_epoch": epoch,
            "committed": commit,
        },
        version=3,
    )
    return ErrorCode(answer.error_code)


def add_offsets(
    conn: KafkaConnection, transactional_id: str, producer_id: int, epoch: int, group_id: str
) -> ErrorCode:
    answer = conn.request(
        ApiKey.ADD_OFFSETS_TO_TXN,
        {
            "transactional_id": transactional_id,
            "producer_id": producer_id,
            "producer_epoch": epoch,
            "group_id": group_id,
        },
    )
    return ErrorCode(answer.error_code)


def txn_offset_commit(
    conn: KafkaConnection,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    group_id: str,
    offsets: dict[TopicPartition, int],
) -> dict[TopicPartition, ErrorCode]:
    """TxnOffsetCommit of a simple group (no generation, no member)."""
    answer = conn.request(
        ApiKey.TXN_OFFSET_COMMIT,
        {
            "transactional_id": transactional_id,
            "group_id": group_id,
            "producer_id": producer_id,
            "producer_epoch": epoch,
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": _commit_topics(offsets),
        },
    )
    return _commit_answers(answer)


def offset_commit(
    conn: KafkaConnection, group_id: str, offsets: dict[TopicPartition, int]
) -> dict[TopicPartition, ErrorCode]:
    """OffsetCommit of a simple group (no generation, no member)."""
    answer = conn.request(
        ApiKey.OFFSET_COMMIT,
        {
            "group_id": group_id,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "retention_time": -1,
            "topics": _commit_topics(offsets),
        },
    )
    return _commit_answers(answer)


def _commit_topics(offsets: dict[TopicPartition, int]) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, index), offset in offsets.items():
        topics.setdefault(topic, []).append(
            {
                "partition_index": index,
                "committed_offset": offset,
                "committed_leader_epoch": -1,
                "committed_metadata": "",
            }
        )
    return [{"name": t, "partitions": p} for t, p in topics.items()]


def _commit_answers(answer: Any) -> dict[TopicPartition, ErrorCode]:
    return {
        (t.name, p.partition_index): ErrorCode(p.error_code)
        for t in answer.topics
        for p in t.partitions
    }


def stable_offset(
    conn: KafkaConnection, group_id: str, topic: str, partition: int
) -> tuple[ErrorCode, int]:
    """(error, committed offset) OffsetFetch answers with ``require_stable``, as a
    read_committed consumer asks: UNSTABLE_OFFSET_COMMIT while a transaction holds one."""
    answer = conn.request(
        ApiKey.OFFSET_FETCH,
        {
            "groups": [
                {
                    "group_id": group_id,
                    "member_id": None,
                    "member_epoch": -1,
                    "topics": [{"name": topic, "partition_indexes": [partition]}],
                }
            ],
            "require_stable": True,
        },
    )
    (found,) = answer.groups[0].topics[0].partitions
    return ErrorCode(found.error_code), found.committed_offset


def produce(
    conn: KafkaConnection,
    topic: str,
    partition: int,
    values: list[bytes],
    *,
    producer_id: int = -1,
    epoch: int = -1,
    sequence: int = -1,
    transactional_id: str | None = None,
    acks: int = -1,
) -> tuple[ErrorCode, int]:
    """(error, base offset) of one batch; transactional when ``transactional_id`` is set."""
    batch = build_batch(
        [Record(None, v) for v in values],
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        transactional=transactional_id is not None,
        timestamp_ms=int(time.time() * 1000),
    )
    answer = conn.request(
        ApiKey.PRODUCE,
        {
            "transactional_id": transactional_id,
            "acks": acks,
            "timeout": 30_000,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": batch}]}
            ],
        },
    )
    (result,) = answer.responses[0].partition_responses
    return ErrorCode(result.error_code), result.base_offset


def write_markers(
    conn: KafkaConnection,
    producer_id: int,
    epoch: int,
    commit: bool,
    coordinator_epoch: int,
    partitions: Iterable[TopicPartition],
) -> dict[TopicPartition, ErrorCode]:
    """WriteTxnMarkers, as a transaction coordinator sends it to a partition leader."""
    topics = by_topic(partitions)
    answer = conn.request(
        ApiKey.WRITE_TXN_MARKERS,
        {
            "markers": [
                {
                    "producer_id": producer_id,
                    "producer_epoch": epoch,
                    "transaction_result": commit,
                    "topics": [{"name": t, "partition_indexes": p} for t, p in topics.items()],
                    "coordinator_epoch": coordinator_epoch,
                }
            ]
        },
    )
    return {
        (t.name, p.partition_index): ErrorCode(p.error_code)
        for marker in answer.markers
        for t in marker.topics
        for p in t.partitions
    }


def list_offset(
    conn: KafkaConnection, topic: str, partition: int, *, read_committed: bool
) -> tuple[ErrorCode, int]:
    """(error, end offset) ListOffsets answers: the LSO under read_committed, else the HW."""
    answer = conn.request(
        ApiKey.LIST_OFFSETS,
        {
            "replica_id": -1,
            "isolation_level": 1 if read_committed else 0,
            "timeout": 30_000,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": partition, "current_leader_epoch": -1, "timestamp": -1}
                    ],
                }
            ],
        },
    )
    result = answer.topics[0].partitions[0]
    return ErrorCode(result.error_code), result.offset


def fetch_stored(
    conn: KafkaConnection, topic: str, partition: int, *, read_committed: bool = False
) -> tuple[ErrorCode, bytes, list[tuple[int, int]]]:
    """(error, the stored batches from offset 0 up to what the leader serves, the aborted
    transactions as (producer id, first offset)) as a consumer's Fetch gets them."""
    answer = conn.request(
        ApiKey.FETCH,
        {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 24,
            "isolation_level": 1 if read_committed else 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": partition,
                            "current_leader_epoch": -1,
                            "fetch_offset": 0,
                            "log_start_offset": -1,
                            "partition_max_bytes": 1 << 24,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
        version=12,
    )
    result: Any = answer.responses[0].partitions[0]
    aborted = [(a.producer_id, a.first_offset) for a in result.aborted_transactions or ()]
    return ErrorCode(result.error_code), bytes(result.records or b""), aborted
