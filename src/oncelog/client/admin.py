"""The admin client every `oncelog` command uses: Kafka's admin requests in, plain
dataclasses out.

One method per question an operator asks (topics, offsets, configs, producer state,
transactions, groups, committed offsets, ACLs, SCRAM users) or action they take (create,
grow and delete topics, delete records, alter configs, write an abort marker, delete groups
and their offsets, reset a group's offsets, add and remove ACLs, set and delete SCRAM
credentials), over one blocking :class:`~oncelog.client.connection.KafkaConnection` (plus
short-lived ones to the controller and to partition leaders where a cluster needs them).
Every Kafka error code becomes one :class:`AdminError` that names what was asked and carries
the broker's own message; no kio entity leaves this module. Like Kafka's ``Admin``, a call
that reaches a broker that is no longer the leader, coordinator or controller it needs asks
again after a new lookup, with backoff, until its API timeout (60 s,
``default.api.timeout.ms``). And like it, it only asks: the tools built on it
(:mod:`oncelog.client.hanging`, :mod:`oncelog.client.group_lag`) and the commands decide
what to make of the answers.
"""

from __future__ import annotations

import enum
import functools
import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

from oncelog.client.connection import Bootstrap, KafkaConnection, ProtocolClientError
from oncelog.protocol import codec
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.configs import ConfigResourceType, OpType
from oncelog.protocol.describe_transactions import (
    DESCRIBE_TRANSACTIONS_VERSION,
    DescribeTransactionsDecodeError,
    decode_describe_transactions,
)
from oncelog.protocol.errors import ErrorCode
from oncelog.security.acl import AclBinding, AclBindingFilter
from oncelog.security.scram import DEFAULT_ITERATIONS, ScramMechanism, salted_password
from oncelog.transactions.state import TxnState

__all__ = [
    "Admin",
    "AdminError",
    "BrokerUnreachable",
    "ConfigEntry",
    "ConfigResourceType",
    "ConsumerGroup",
    "GroupListing",
    "GroupMember",
    "Isolation",
    "OffsetSpec",
    "PartitionOffsets",
    "ProducerState",
    "ScramUser",
    "TopicDescription",
    "TopicPartition",
    "TopicSummary",
    "Transaction",
    "TransactionListing",
]

TIMEOUT_MS = 30_000
API_TIMEOUT_S = 60.0  # Kafka's default.api.timeout.ms: how long a call may retry
RETRY_BACKOFF_S = 0.1  # Kafka's retry.backoff.ms, doubled per attempt ...
RETRY_BACKOFF_MAX_S = 1.0  # ... up to retry.backoff.max.ms (KIP-580)
OFFSET_FETCH_VERSION = 7  # the last one-group layout; 8+ batch groups
FIND_COORDINATOR_VERSION = 4  # the first with many keys per request

TopicPartition = tuple[str, int]


class OffsetSpec(enum.IntEnum):
    """The ListOffsets timestamps that ask for an end of the log instead of a time."""

    EARLIEST = -2  # the log start offset
    LATEST = -1  # the high watermark, or the last stable offset under read_committed


class Isolation(enum.IntEnum):
    """ListOffsets' isolation level: which end LATEST means."""

    READ_UNCOMMITTED = 0  # the high watermark
    READ_COMMITTED = 1  # the last stable offset (LSO)


class CoordinatorType(enum.IntEnum):
    """FindCoordinator's key types."""

    GROUP = 0
    TRANSACTION = 1


class AdminError(Exception):
    """The broker refused what was asked: ``code`` is its Kafka error code (None when it
    answered without one, e.g. unknown state filters)."""

    def __init__(self, text: str, code: ErrorCode | None = None) -> None:
        super().__init__(text)
        self.code = code

    @property
    def moved(self) -> bool:
        """Whether the leader, coordinator or controller asked has moved: asking again after
        a new lookup may succeed."""
        return self.code in MOVED


class BrokerUnreachable(AdminError):
    """A broker that Metadata or FindCoordinator named could not be reached: in a cluster,
    it may just have died, and its partitions and coordinators are about to move."""

    @property
    def moved(self) -> bool:
        return True


# What a broker answers while leadership or a coordinator moves: the request was not applied,
# and asking again (after a new lookup) will reach whoever took over, as Kafka's Admin does.
MOVED = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.not_controller,
    }
)


def check(code: int, message: str | None, what: str) -> None:
    """Raise :class:`AdminError` naming ``what`` unless ``code`` is NONE."""
    if code != ErrorCode.none:
        error = ErrorCode(code)
        raise AdminError(f"{what}: {_refusal(error, message)}", error)


def _refusal(code: ErrorCode, message: str | None) -> str:
    """A Kafka error as the tools show it: ``CODE_NAME: the broker's message``."""
    return code.name.upper() + (f": {message}" if message else "")


# -- results ----------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicSummary:
    """A topic as Metadata lists it."""

    name: str
    topic_id: str
    partitions: int
    internal: bool


@dataclass(frozen=True)
class PartitionOffsets:
    """One partition's leader, offsets, size on disk, replicas and in-sync replicas."""

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
    """A topic with every partition's offsets and the log directory that holds it."""

    summary: TopicSummary
    log_dir: str | None  # of the (first) leader asked
    partitions: list[PartitionOffsets]
    brokers: int = 1  # live brokers Metadata listed

    @property
    def replicated(self) -> bool:
        """A cluster, or a topic with more than one replica: worth showing replicas."""
        return self.brokers > 1 or any(len(p.replicas) > 1 for p in self.partitions)


@dataclass(frozen=True)
class ConfigEntry:
    """One configuration key as DescribeConfigs reports it."""

    name: str
    value: str | None  # None: sensitive, or no value
    source: int  # Kafka's ConfigSource (oncelog.broker.config.ConfigSource's values)
    read_only: bool


@dataclass(frozen=True)
class ProducerState:
    """What a partition keeps of one producer (DescribeProducers); None where Kafka sends -1."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int | None  # None: no transaction marker seen yet
    current_txn_start_offset: int | None  # None: no open transaction


@dataclass(frozen=True)
class TransactionListing:
    """A transactional id as ListTransactions lists it."""

    transactional_id: str
    producer_id: int
    state: str  # TxnState.kafka_name


@dataclass(frozen=True)
class Transaction:
    """A transactional id as DescribeTransactions describes it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str  # TxnState.kafka_name
    timeout_ms: int
    start_time_ms: int | None  # None: no transaction started yet
    partitions: list[str]  # "topic-partition", those of the current transaction


@dataclass(frozen=True)
class GroupListing:
    """A group as ListGroups lists it."""

    group_id: str
    protocol_type: str
    state: str  # GroupState.kafka_name


@dataclass(frozen=True)
class GroupMember:
    """A group member as DescribeGroups describes it; the assignment as sent."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: bytes


@dataclass(frozen=True)
class ConsumerGroup:
    """A group as DescribeGroups describes it."""

    group_id: str
    state: str  # GroupState.kafka_name
    protocol_type: str
    protocol: str
    members: list[GroupMember]


@dataclass(frozen=True)
class ScramUser:
    """A user as DescribeUserScramCredentials reports it: its mechanisms and iterations."""

    user: str
    credentials: tuple[tuple[str, int], ...]  # (mechanism name, iterations)
    error: str | None = None  # the broker's refusal, e.g. RESOURCE_NOT_FOUND: an unknown user


# -- the client ---------------------------------------------------------------------------

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _attempts(timeout_s: float) -> Iterator[None]:
    """One step per attempt: the first at once, each next one after a backoff (doubled each
    time, capped), while the next would start within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    backoff = RETRY_BACKOFF_S
    while True:
        yield
        if time.monotonic() + backoff > deadline:
            return
        time.sleep(backoff)
        backoff = min(2 * backoff, RETRY_BACKOFF_MAX_S)


def _retried_while_moving(
    call: Callable[Concatenate[Admin, _P], _R],
) -> Callable[Concatenate[Admin, _P], _R]:
    """Ask again, from the lookup on, while the answer says that a leader, a coordinator or
    the controller moved (or a broker named as one is unreachable), until the client's API
    timeout: what Kafka's Admin does, so an operator's command run during a failover answers
    once the cluster has settled instead of failing. Only for calls whose every request is
    refused whole when it reaches the wrong broker, or is idempotent, so a second attempt
    changes nothing that the first one did."""

    return _retried(call, frozenset())


def _retried_while_leaders_move(
    call: Callable[Concatenate[Admin, _P], _R],
) -> Callable[Concatenate[Admin, _P], _R]:
    """``_retried_while_moving`` for calls sent to partition leaders, which also ask again
    after KAFKA_STORAGE_ERROR: the replica asked has a failed log, and in a cluster the
    controller elects another leader (on one node the call fails at its API timeout)."""
    return _retried(call, frozenset({ErrorCode.kafka_storage_error}))


def _retried(
    call: Callable[Concatenate[Admin, _P], _R], also: frozenset[ErrorCode]
) -> Callable[Concatenate[Admin, _P], _R]:
    @functools.wraps(call)
    def retrying(admin: Admin, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        moved: AdminError | None = None
        for _ in _attempts(admin.api_timeout_s):
            try:
                return call(admin, *args, **kwargs)
            except AdminError as error:
                if not (error.moved or error.code in also):
                    raise
                moved = error
        assert moved is not None  # there is always a first attempt
        raise moved

    return retrying


class Admin:
    """Kafka's admin requests over one blocking connection (see the module docstring)."""

    def __init__(self, connection: KafkaConnection, api_timeout_s: float = API_TIMEOUT_S) -> None:
        self._conn = connection
        self.api_timeout_s = api_timeout_s  # 0: no retry when a leader or coordinator moved

    @classmethod
    @contextmanager
    def connect(
        cls, bootstrap: str | Bootstrap, api_timeout_s: float = API_TIMEOUT_S
    ) -> Iterator[Admin]:
        """An admin client on a new connection to ``bootstrap``, closed on exit; the
        connections it opens to other brokers are secured the same way."""
        with KafkaConnection(bootstrap) as connection:
            yield cls(connection, api_timeout_s)

    # -- topics --------------------------------------------------------------------------

    def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> TopicSummary:
        """CreateTopics for one topic (-1: the broker's default count or factor), sent to
        the controller."""
        self._create_topic(name, partitions, replication_factor, configs)
        return self._summary_of(name)

    @_retried_while_moving
    def _create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> None:
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
        check(result.error_code, getattr(result, "error_message", None), f"cannot create {name!r}")

    @_retried_while_moving
    def _summary_of(self, name: str) -> TopicSummary:
        (topic,) = self._metadata([name])
        return _summary(topic)

    @_retried_while_moving
    def delete_topic(self, name: str) -> str:
        """DeleteTopics by name, sent to the controller; the id the topic had."""
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
        check(result.error_code, getattr(result, "error_message", None), f"cannot delete {name!r}")
        return str(getattr(result, "topic_id", "") or "")

    def list_topics(self) -> list[TopicSummary]:
        """Every topic, internal ones included, by name."""
        return sorted((_summary(t) for t in self._metadata(None)), key=lambda t: t.name)

    @_retried_while_moving
    def describe_topic(self, name: str) -> TopicDescription:
        """The topic's partitions with their leader, offsets (log start, high watermark,
        last stable offset, log end), size, replicas and ISR. Offsets and sizes are asked of
        each partition's leader (in a cluster: of each leader in turn, at the address
        Metadata gives); a partition without a live leader gets -1 offsets."""
        response = self._metadata_response([name])
        (topic,) = response.topics
        check(topic.error_code, None, f"topic {topic.name!r}")
        addresses = _addresses(response)
        by_leader: dict[int, list[int]] = {}
        for p in topic.partitions:
            by_leader.setdefault(p.leader_id, []).append(p.partition_index)
        offsets: dict[int, tuple[int, int, int, int | None, int]] = {}
        log_dir = None
        for leader, indexes in sorted(by_leader.items()):
            if leader not in addresses:
                offsets.update(dict.fromkeys(indexes, (-1, -1, -1, None, -1)))
                continue
            with self._connect_to(addresses[leader]) as conn:
                where = {name: indexes}
                start = _list_offsets(conn, where, OffsetSpec.EARLIEST)
                high = _list_offsets(conn, where, OffsetSpec.LATEST)
                stable = _list_offsets(conn, where, OffsetSpec.LATEST, Isolation.READ_COMMITTED)
                leader_dir, sizes = Admin(conn)._sizes(name, indexes)
            log_dir = log_dir or leader_dir
            for i in indexes:
                size, lag = sizes.get(i, (None, 0))
                hw = high[(name, i)]
                offsets[i] = (start[(name, i)], hw, stable[(name, i)], size, hw + lag)
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
        return TopicDescription(_summary(topic), log_dir, partitions, len(response.brokers))

    @_retried_while_moving
    def create_partitions(self, topic: str, count: int) -> None:
        """CreatePartitions: grow ``topic`` to ``count`` partitions (existing data stays),
        sent to the controller."""
        with self._controller() as controller:
            response = controller.request(
                ApiKey.CREATE_PARTITIONS,
                {
                    "topics": [{"name": topic, "count": count, "assignments": None}],
                    "timeout": TIMEOUT_MS,
                    "validate_only": False,
                },
            )
        (result,) = response.results
        check(result.error_code, result.error_message, f"topic {topic!r}")

    @_retried_while_leaders_move
    def delete_records(self, topic: str, before: Mapping[int, int]) -> dict[int, int]:
        """DeleteRecords: move each partition's log start offset up to the offset given
        (-1: the high watermark); each partition's new log start offset (low watermark).
        Each partition's request goes to its leader; one without a live leader is sent to
        this broker, whose error names it."""
        response = self._metadata_response([topic])
        (described,) = response.topics
        check(described.error_code, None, f"topic {topic!r}")
        addresses = _addresses(response)
        leaders = {p.partition_index: p.leader_id for p in described.partitions}
        by_leader: dict[int | None, list[int]] = {}
        for index in before:
            leader = leaders.get(index)
            by_leader.setdefault(leader if leader in addresses else None, []).append(index)
        found = {}
        for leader, indexes in by_leader.items():
            with self._connection_to(leader) as conn:
                answered = conn.request(
                    ApiKey.DELETE_RECORDS,
                    {
                        "topics": [
                            {
                                "name": topic,
                                "partitions": [
                                    {"partition_index": i, "offset": before[i]} for i in indexes
                                ],
                            }
                        ],
                        "timeout": TIMEOUT_MS,
                    },
                )
            for answer in answered.topics[0].partitions:
                check(answer.error_code, None, f"{topic}-{answer.partition_index}")
                found[answer.partition_index] = answer.low_watermark
        return dict(sorted(found.items()))

    def topic_partitions(self, topics: Sequence[str] | None) -> dict[str, list[int]]:
        """Partition indexes of the named topics (every topic, internal ones included, when
        None)."""
        return {
            t.name: sorted(p.partition_index for p in t.partitions) for t in self._metadata(topics)
        }

    @_retried_while_leaders_move
    def list_offsets(
        self,
        partitions: Mapping[str, Sequence[int]],
        spec: OffsetSpec,
        isolation: Isolation = Isolation.READ_UNCOMMITTED,
    ) -> dict[TopicPartition, int]:
        """ListOffsets: each partition's log start offset (EARLIEST), or its high watermark
        or last stable offset (LATEST, by isolation), asked of each partition's leader."""
        found: dict[TopicPartition, int] = {}
        for conn, led in self._each_leader(partitions):
            found.update(_list_offsets(conn, led, spec, isolation))
        return found

    # -- ACLs -------------------------------------------------------------------------------

    def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        """CreateAcls; each binding is created or refused alone (Kafka's ``createAcls``),
        so those before a refused one stay created."""
        response = self._conn.request(
            ApiKey.CREATE_ACLS,
            {
                "creations": [
                    {
                        "resource_type": b.pattern.resource_type,
                        "resource_name": b.pattern.name,
                        "resource_pattern_type": b.pattern.pattern_type,
                        "principal": b.entry.principal,
                        "host": b.entry.host,
                        "operation": b.entry.operation,
                        "permission_type": b.entry.permission,
                    }
                    for b in bindings
                ]
            },
        )
        for b, result in zip(bindings, response.results, strict=True):
            check(result.error_code, result.error_message, f"ACL {b.pattern} {b.entry}")

    def describe_acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """DescribeAcls: every ACL the filter matches."""
        response = self._conn.request(ApiKey.DESCRIBE_ACLS, _filter_fields(acl_filter))
        check(response.error_code, response.error_message, "describe ACLs")
        return [_acl(resource, acl) for resource in response.resources for acl in resource.acls]

    def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclBinding]:
        """DeleteAcls: delete every ACL the filters match; the ACLs deleted."""
        response = self._conn.request(
            ApiKey.DELETE_ACLS, {"filters": [_filter_fields(f) for f in filters]}
        )
        deleted = []
        for result in response.filter_results:
            check(result.error_code, result.error_message, "delete ACLs")
            deleted += [_acl(match, match) for match in result.matching_acls]
        return deleted

    # -- SCRAM users ------------------------------------------------------------------------

    def describe_scram_users(self, users: Sequence[str] | None = None) -> list[ScramUser]:
        """DescribeUserScramCredentials: every user with SCRAM credentials (``users``
        None), or those named, each with the broker's refusal if it has one."""
        named = None if users is None else [{"name": user} for user in users]
        response = self._conn.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": named})
        check(response.error_code, response.error_message, "describe SCRAM users")
        found = []
        for result in response.results:
            credentials = tuple(
                (_mechanism_name(info.mechanism), info.iterations)
                for info in result.credential_infos
            )
            error = None
            if result.error_code != ErrorCode.none:
                error = _refusal(ErrorCode(result.error_code), result.error_message)
            found.append(ScramUser(result.user, credentials, error))
        return found

    def upsert_scram_credentials(
        self,
        passwords: Mapping[str, str],
        mechanisms: Sequence[str],
        iterations: int = DEFAULT_ITERATIONS,
    ) -> None:
        """AlterUserScramCredentials: create or replace each user's credential for each
        mechanism, in one request (the broker alters a user entirely or not at all). The
        password is salted and hashed here: only the salted password travels, never the
        password (Kafka's ``UserScramCredentialUpsertion``)."""
        upsertions = []
        for scram in map(_scram, mechanisms):
            for user, password in passwords.items():
                salt = secrets.token_bytes(32)
                upsertions.append(
                    {
                        "name": user,
                        "mechanism": scram.code,
                        "iterations": iterations,
                        "salt": salt,
                        "salted_password": salted_password(scram, password, salt, iterations),
                    }
                )
        self._alter_scram({"deletions": [], "upsertions": upsertions})

    def delete_scram_credentials(self, users: Sequence[str], mechanisms: Sequence[str]) -> None:
        """AlterUserScramCredentials: delete each user's credential for each mechanism, in
        one request."""
        deletions = [
            {"name": user, "mechanism": scram.code}
            for scram in map(_scram, mechanisms)
            for user in users
        ]
        self._alter_scram({"deletions": deletions, "upsertions": []})

    def _alter_scram(self, request: dict[str, Any]) -> None:
        response = self._conn.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, request)
        for result in response.results:
            check(result.error_code, result.error_message, f"SCRAM user {result.user!r}")

    @contextmanager
    def _controller(self) -> Iterator[KafkaConnection]:
        """A connection to the controller, which alone creates and deletes topics in a
        cluster (NOT_CONTROLLER elsewhere); a single node is its own controller."""
        response = self._metadata_response([])
        addresses = _addresses(response)
        if len(addresses) <= 1 or response.controller_id not in addresses:
            yield self._conn
            return
        with self._connect_to(addresses[response.controller_id]) as controller:
            yield controller

    @contextmanager
    def _connection_to(self, broker_id: int | None) -> Iterator[KafkaConnection]:
        """A connection to broker ``broker_id`` (this one when None or when it is the only
        broker); AdminError when the cluster has no such live broker."""
        if broker_id is None:
            yield self._conn
            return
        addresses = _addresses(self._metadata_response([]))
        if broker_id not in addresses:
            raise AdminError(
                f"broker {broker_id} is not in the cluster (live brokers: {sorted(addresses)})"
            )
        if len(addresses) == 1:
            yield self._conn
            return
        with self._connect_to(addresses[broker_id]) as conn:
            yield conn

    def _connect_to(self, address: str) -> KafkaConnection:
        """Another broker of the cluster, reached with this client's id and security."""
        try:
            return KafkaConnection(
                address, client_id=self._conn.client_id, security=self._conn.security
            )
        except ProtocolClientError as error:
            raise BrokerUnreachable(str(error)) from error

    def _each_broker(self) -> Iterator[KafkaConnection]:
        """A connection to each live broker in turn (this one on a single node), for the
        requests each broker answers for its own share: ListTransactions, ListGroups."""
        addresses = _addresses(self._metadata_response([]))
        if len(addresses) <= 1:
            yield self._conn
            return
        for broker_id in sorted(addresses):
            with self._connect_to(addresses[broker_id]) as conn:
                yield conn

    def _each_leader(
        self, partitions: Mapping[str, Sequence[int]]
    ) -> Iterator[tuple[KafkaConnection, dict[str, list[int]]]]:
        """The partitions grouped by leader, each group with a connection to its leader.
        On a single node, and for partitions without a live leader (or of an unknown
        topic), this broker is asked: its answer names the error."""
        wanted = {t: sorted(set(ps)) for t, ps in sorted(partitions.items()) if ps}
        if not wanted:
            return
        response = self._metadata_response(list(wanted))
        addresses = _addresses(response)
        leaders = {
            (t.name, p.partition_index): p.leader_id for t in response.topics for p in t.partitions
        }
        by_leader: dict[int | None, dict[str, list[int]]] = {}
        for topic, indexes in wanted.items():
            for index in indexes:
                leader = leaders.get((topic, index))
                key = leader if len(addresses) > 1 and leader in addresses else None
                by_leader.setdefault(key, {}).setdefault(topic, []).append(index)
        for leader, led in by_leader.items():
            if leader is None:
                yield self._conn, led
                continue
            with self._connect_to(addresses[leader]) as conn:
                yield conn, led

    def _each_coordinator(
        self, key_type: CoordinatorType, keys: Sequence[str]
    ) -> Iterator[tuple[KafkaConnection, list[str]]]:
        """The keys (group or transactional ids) grouped by coordinator, each group with a
        connection to its coordinator (FindCoordinator; this broker on a single node)."""
        if not keys:
            return
        addresses = _addresses(self._metadata_response([]))
        if len(addresses) <= 1:
            yield self._conn, list(keys)
            return
        response = self._conn.request(
            ApiKey.FIND_COORDINATOR,
            {"key_type": int(key_type), "coordinator_keys": list(keys)},
            version=FIND_COORDINATOR_VERSION,
        )
        by_node: dict[int, list[str]] = {}
        for found in response.coordinators:
            what = f"coordinator of {key_type.name.lower()} {found.key!r}"
            check(found.error_code, found.error_message, what)
            by_node.setdefault(found.node_id, []).append(found.key)
        for node, coordinated in sorted(by_node.items()):
            if node not in addresses:
                raise BrokerUnreachable(
                    f"the coordinator of {coordinated} is broker {node}, which is not live"
                )
            with self._connect_to(addresses[node]) as conn:
                yield conn, coordinated

    @contextmanager
    def _group_coordinator(self, group_id: str) -> Iterator[KafkaConnection]:
        """A connection to the group's coordinator (this broker on a single node)."""
        for conn, _ in self._each_coordinator(CoordinatorType.GROUP, [group_id]):
            yield conn

    def _metadata(self, names: Sequence[str] | None) -> Any:
        response = self._metadata_response(names)
        for topic in response.topics:
            check(topic.error_code, None, f"topic {topic.name!r}")
        return response.topics

    def _metadata_response(self, names: Sequence[str] | None) -> Any:
        return self._conn.request(
            ApiKey.METADATA,
            {
                "topics": None if names is None else [{"name": n, "topic_id": None} for n in names],
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            },
        )

    def _sizes(
        self, name: str, indexes: list[int]
    ) -> tuple[str | None, dict[int, tuple[int, int]]]:
        """The log dir, and each partition's (size in bytes, log end past the HW)."""
        response = self._conn.request(
            ApiKey.DESCRIBE_LOG_DIRS, {"topics": [{"topic": name, "partitions": indexes}]}
        )
        check(getattr(response, "error_code", ErrorCode.none), None, "log dirs")
        for result in response.results:
            check(result.error_code, None, f"log dir {result.log_dir}")
            for topic in result.topics:
                if topic.name == name:
                    return result.log_dir, {
                        p.partition_index: (p.partition_size, p.offset_lag)
                        for p in topic.partitions
                    }
        return (response.results[0].log_dir if response.results else None), {}

    # -- configs ----------------------------------------------------------------------------

    def describe_configs(self, resource: ConfigResourceType, name: str) -> list[ConfigEntry]:
        """DescribeConfigs: every key of a topic or broker, with its value and source; a
        broker's own configuration is asked of that broker, as Kafka's Admin does."""
        with self._connection_to(_config_owner(resource, name)) as conn:
            response = conn.request(
                ApiKey.DESCRIBE_CONFIGS,
                {
                    "resources": [
                        {
                            "resource_type": int(resource),
                            "resource_name": name,
                            "configuration_keys": None,
                        }
                    ],
                    "include_synonyms": False,
                    "include_documentation": False,
                },
            )
        (result,) = response.results
        check(result.error_code, result.error_message, f"{resource.name.lower()} {name!r}")
        return [ConfigEntry(c.name, c.value, c.config_source, c.read_only) for c in result.configs]

    def alter_configs(
        self,
        resource: ConfigResourceType,
        name: str,
        set_keys: Mapping[str, str],
        delete_keys: Sequence[str],
        *,
        validate_only: bool = False,
    ) -> None:
        """IncrementalAlterConfigs: set and unset keys; other keys stay as they are. A
        broker's own layer is changed on that broker (Kafka refuses it elsewhere)."""
        changes = [
            {"name": k, "config_operation": OpType.SET, "value": v} for k, v in set_keys.items()
        ] + [{"name": k, "config_operation": OpType.DELETE, "value": None} for k in delete_keys]
        with self._connection_to(_config_owner(resource, name)) as conn:
            response = conn.request(
                ApiKey.INCREMENTAL_ALTER_CONFIGS,
                {
                    "resources": [
                        {"resource_type": int(resource), "resource_name": name, "configs": changes}
                    ],
                    "validate_only": validate_only,
                },
            )
        (answer,) = response.responses
        check(answer.error_code, answer.error_message, f"{resource.name.lower()} {name!r}")

    # -- producer state ---------------------------------------------------------------------

    @_retried_while_leaders_move
    def describe_producers(
        self, partitions: Mapping[str, Sequence[int]]
    ) -> dict[TopicPartition, list[ProducerState]]:
        """DescribeProducers: the producers each partition keeps, by producer id."""
        found: dict[TopicPartition, list[ProducerState]] = {}
        for conn, led in self._each_leader(partitions):  # only the leader keeps the state
            response = conn.request(
                ApiKey.DESCRIBE_PRODUCERS,
                {"topics": [{"name": t, "partition_indexes": ps} for t, ps in led.items()]},
            )
            for t in response.topics:
                for p in t.partitions:
                    where = f"producers of {t.name}-{p.partition_index}"
                    check(p.error_code, p.error_message, where)
                    found[(t.name, p.partition_index)] = [
                        _producer(t.name, p.partition_index, s)
                        for s in sorted(p.active_producers, key=lambda s: s.producer_id)
                    ]
        return dict(sorted(found.items()))

    # -- transactions -----------------------------------------------------------------------

    @_retried_while_moving
    def list_transactions(
        self,
        states: Sequence[str] = (),
        producer_ids: Sequence[int] = (),
        duration_filter_ms: int = -1,
    ) -> list[TransactionListing]:
        """ListTransactions, filtered by state names, producer ids and (v1+) the minimum
        time since the transaction started; by transactional id. Every broker is asked, as
        Kafka's Admin does: each lists the transactions it coordinates."""
        listed: list[TransactionListing] = []
        for conn in self._each_broker():
            if duration_filter_ms >= 0 and conn.version_for(ApiKey.LIST_TRANSACTIONS) < 1:
                raise AdminError(
                    "the broker does not support a duration filter (ListTransactions v1)"
                )
            response = conn.request(
                ApiKey.LIST_TRANSACTIONS,
                {
                    "state_filters": list(states),
                    "producer_id_filters": list(producer_ids),
                    "duration_filter": duration_filter_ms,
                },
            )
            check(response.error_code, None, "list transactions")
            if response.unknown_state_filters:
                raise AdminError(
                    f"unknown transaction states: {', '.join(response.unknown_state_filters)}"
                    f" (known: {', '.join(s.kafka_name for s in TxnState)})"
                )
            listed += (
                TransactionListing(t.transactional_id, t.producer_id, t.transaction_state)
                for t in response.transaction_states
            )
        return sorted(listed, key=lambda t: t.transactional_id)

    @_retried_while_moving
    def describe_transactions(self, ids: Sequence[str]) -> dict[str, Transaction | None]:
        """DescribeTransactions: each id's description, asked of its coordinator; None for an
        id the coordinator does not know (TRANSACTIONAL_ID_NOT_FOUND)."""
        found: dict[str, Transaction | None] = {}
        for conn, coordinated in self._each_coordinator(CoordinatorType.TRANSACTION, ids):
            found.update(_describe_transactions(conn, coordinated))
        return {i: found[i] for i in ids if i in found}

    @_retried_while_leaders_move
    def write_abort_marker(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
    ) -> None:
        """WriteTxnMarkers: an ABORT marker for one producer on one partition (Kafka's
        ``Admin.abortTransaction``), sent to the partition's leader."""
        marker = {
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
            "transaction_result": False,
            "coordinator_epoch": coordinator_epoch,
            "topics": [{"name": topic, "partition_indexes": [partition]}],
        }
        for conn, _ in self._each_leader({topic: [partition]}):
            response = conn.request(ApiKey.WRITE_TXN_MARKERS, {"markers": [marker]})
        results = [
            (m.producer_id, t.name, p.partition_index, p.error_code)
            for m in response.markers
            for t in m.topics
            for p in t.partitions
        ]
        if [r[:3] for r in results] != [(producer_id, topic, partition)]:
            raise ProtocolClientError(f"WriteTxnMarkers answered for other partitions: {results}")
        what = f"abort marker for producer {producer_id} on {topic}-{partition}"
        check(results[0][3], None, what)

    # -- groups -----------------------------------------------------------------------------

    @_retried_while_moving
    def list_groups(self) -> list[GroupListing]:
        """ListGroups: every group the coordinators know (each broker is asked: each lists
        the groups it coordinates), by group id."""
        listed: list[GroupListing] = []
        for conn in self._each_broker():
            response = conn.request(ApiKey.LIST_GROUPS, {"states_filter": [], "types_filter": []})
            check(response.error_code, None, "list groups")
            listed += (
                GroupListing(g.group_id, g.protocol_type, getattr(g, "group_state", "") or "")
                for g in response.groups
            )
        return sorted(listed, key=lambda g: g.group_id)

    @_retried_while_moving
    def describe_group(self, group_id: str) -> ConsumerGroup:
        """DescribeGroups for one group (asked of its coordinator): state, protocol and
        members."""
        with self._group_coordinator(group_id) as conn:
            response = conn.request(
                ApiKey.DESCRIBE_GROUPS,
                {"groups": [group_id], "include_authorized_operations": False},
            )
        (group,) = response.groups
        check(group.error_code, None, f"group {group_id!r}")
        return ConsumerGroup(
            group.group_id,
            group.group_state,
            group.protocol_type,
            group.protocol_data,
            [
                GroupMember(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    bytes(m.member_assignment),
                )
                for m in group.members
            ],
        )

    @_retried_while_moving
    def committed_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        """OffsetFetch (of the group's coordinator) for every partition the group committed
        (nothing: not listed)."""
        with self._group_coordinator(group_id) as conn:
            fetched = conn.request(
                ApiKey.OFFSET_FETCH,
                {"group_id": group_id, "topics": None, "require_stable": False},
                version=OFFSET_FETCH_VERSION,
            )
        check(fetched.error_code, None, f"committed offsets of {group_id!r}")
        committed: dict[TopicPartition, int] = {}
        for topic in fetched.topics:
            for p in topic.partitions:
                check(p.error_code, None, f"committed offset of {topic.name}-{p.partition_index}")
                if p.committed_offset >= 0:
                    committed[(topic.name, p.partition_index)] = p.committed_offset
        return committed

    def delete_groups(self, group_ids: Sequence[str]) -> dict[str, ErrorCode]:
        """DeleteGroups: each group's outcome (NONE: deleted with its committed offsets;
        e.g. NON_EMPTY_GROUP: it has members), in the order the broker answered. A group
        whose coordinator moved is asked of the new one, within the API timeout."""
        pending = list(dict.fromkeys(group_ids))  # Kafka's Admin asks for each group once
        outcomes: dict[str, ErrorCode] = {}
        for _ in _attempts(self.api_timeout_s):  # a group whose coordinator moved: ask again
            outcomes.update(self._delete_groups(pending))
            pending = [g for g in pending if outcomes[g] in MOVED]
            if not pending:
                break
        return outcomes

    @_retried_while_moving
    def _delete_groups(self, group_ids: Sequence[str]) -> dict[str, ErrorCode]:
        outcomes: dict[str, ErrorCode] = {}
        for conn, coordinated in self._each_coordinator(CoordinatorType.GROUP, group_ids):
            response = conn.request(ApiKey.DELETE_GROUPS, {"groups_names": coordinated})
            outcomes.update((r.group_id, ErrorCode(r.error_code)) for r in response.results)
        return outcomes

    @_retried_while_moving
    def delete_group_offsets(
        self, group_id: str, topic: str, partitions: Sequence[int]
    ) -> dict[TopicPartition, ErrorCode]:
        """OffsetDelete: each partition's outcome (NONE: its committed offset is gone;
        GROUP_SUBSCRIBED_TO_TOPIC: a member still consumes the topic)."""
        with self._group_coordinator(group_id) as conn:
            response = conn.request(
                ApiKey.OFFSET_DELETE,
                {
                    "group_id": group_id,
                    "topics": [
                        {"name": topic, "partitions": [{"partition_index": i} for i in partitions]}
                    ],
                },
            )
        check(response.error_code, None, f"group {group_id!r}")
        return {
            (t.name, p.partition_index): ErrorCode(p.error_code)
            for t in response.topics
            for p in t.partitions
        }

    @_retried_while_moving
    def alter_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        """OffsetCommit as an admin (generation -1, no member): set a group's committed
        offsets; the broker refuses unless the group is Empty (Kafka's
        ``alterConsumerGroupOffsets``)."""
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(
                {
                    "partition_index": partition,
                    "committed_offset": offset,
                    "committed_leader_epoch": -1,
                    "committed_metadata": "",
                }
            )
        with self._group_coordinator(group_id) as conn:
            response = conn.request(
                ApiKey.OFFSET_COMMIT,
                {
                    "group_id": group_id,
                    "generation_id_or_member_epoch": -1,
                    "member_id": "",
                    "group_instance_id": None,
                    "topics": [{"name": t, "partitions": parts} for t, parts in by_topic.items()],
                },
            )
        for topic in response.topics:
            for p in topic.partitions:
                check(p.error_code, None, f"commit of {topic.name}-{p.partition_index}")


def _list_offsets(
    conn: KafkaConnection,
    partitions: Mapping[str, Sequence[int]],
    spec: OffsetSpec,
    isolation: Isolation = Isolation.READ_UNCOMMITTED,
) -> dict[TopicPartition, int]:
    """ListOffsets on one broker (the partitions' leader)."""
    if not any(partitions.values()):
        return {}
    response = conn.request(
        ApiKey.LIST_OFFSETS,
        {
            "replica_id": -1,
            "isolation_level": int(isolation),
            "timeout": TIMEOUT_MS,
            "topics": [
                {
                    "name": name,
                    "partitions": [
                        {"partition_index": i, "current_leader_epoch": -1, "timestamp": int(spec)}
                        for i in indexes
                    ],
                }
                for name, indexes in sorted(partitions.items())
                if indexes
            ],
        },
    )
    found = {}
    for topic in response.topics:
        for p in topic.partitions:
            check(p.error_code, None, f"offsets of {topic.name}-{p.partition_index}")
            found[(topic.name, p.partition_index)] = p.offset
    return found


def _describe_transactions(
    conn: KafkaConnection, ids: Sequence[str]
) -> dict[str, Transaction | None]:
    """DescribeTransactions on one broker (the ids' coordinator)."""
    conn.version_for(ApiKey.DESCRIBE_TRANSACTIONS)  # the broker must have the API
    api = codec.api_codec(ApiKey.DESCRIBE_TRANSACTIONS, DESCRIBE_TRANSACTIONS_VERSION)
    frame = conn.exchange(api, {"transactional_ids": list(ids)})
    try:
        _, entries = decode_describe_transactions(frame)
    except DescribeTransactionsDecodeError as exc:
        raise ProtocolClientError(str(exc)) from exc
    found: dict[str, Transaction | None] = {}
    for t in entries:
        if t.error_code == ErrorCode.transactional_id_not_found:
            found[t.transactional_id] = None
            continue
        check(t.error_code, None, f"transactional id {t.transactional_id!r}")
        found[t.transactional_id] = Transaction(
            transactional_id=t.transactional_id,
            producer_id=t.producer_id,
            producer_epoch=t.producer_epoch,
            state=t.state,
            timeout_ms=t.timeout_ms,
            start_time_ms=None if t.start_time_ms < 0 else t.start_time_ms,
            partitions=[
                f"{topic}-{p}" for topic, ps in sorted(t.partitions.items()) for p in sorted(ps)
            ],
        )
    return found


def _config_owner(resource: ConfigResourceType, name: str) -> int | None:
    """The broker that must answer for a configuration: a broker's own (a broker id), or
    None (any broker: a topic's, or the cluster-wide default '')."""
    if resource == ConfigResourceType.BROKER and name.isdigit():
        return int(name)
    return None


def _filter_fields(acl_filter: AclBindingFilter) -> dict[str, Any]:
    """An ACL filter as DescribeAcls and DeleteAcls carry it."""
    return {
        "resource_type_filter": acl_filter.pattern.resource_type,
        "resource_name_filter": acl_filter.pattern.name,
        "pattern_type_filter": acl_filter.pattern.pattern_type,
        "principal_filter": acl_filter.entry.principal,
        "host_filter": acl_filter.entry.host,
        "operation": acl_filter.entry.operation,
        "permission_type": acl_filter.entry.permission,
    }


def _acl(resource: Any, entry: Any) -> AclBinding:
    """An ACL from DescribeAcls' resource and entry, or DeleteAcls' match (both at once)."""
    return AclBinding.from_codes(
        resource.resource_type,
        resource.resource_name,
        resource.pattern_type,
        entry.principal,
        entry.host,
        entry.operation,
        entry.permission_type,
    )


def _scram(name: str) -> ScramMechanism:
    mechanism = ScramMechanism.by_name(name.upper())
    if mechanism is None:
        raise AdminError(f"{name} is not SCRAM-SHA-256 or SCRAM-SHA-512")
    return mechanism


def _mechanism_name(code: int) -> str:
    mechanism = ScramMechanism.by_code(code)
    return mechanism.mechanism_name if mechanism else f"UNKNOWN({code})"


def _addresses(metadata: Any) -> dict[int, str]:
    """Each live broker's HOST:PORT, by broker id, from a Metadata response."""
    return {b.node_id: f"{b.host}:{b.port}" for b in metadata.brokers}


def _summary(topic: Any) -> TopicSummary:
    return TopicSummary(topic.name, str(topic.topic_id), len(topic.partitions), topic.is_internal)


def _producer(topic: str, partition: int, state: Any) -> ProducerState:
    return ProducerState(
        topic=topic,
        partition=partition,
        producer_id=state.producer_id,
        producer_epoch=state.producer_epoch,
        last_sequence=state.last_sequence,
        last_timestamp=state.last_timestamp,
        coordinator_epoch=None if state.coordinator_epoch < 0 else state.coordinator_epoch,
        current_txn_start_offset=(
            None if state.current_txn_start_offset < 0 else state.current_txn_start_offset
        ),
    )
