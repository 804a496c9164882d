"""Committed offsets of the groups of one ``__consumer_offsets`` partition, plain and
transactional. Pure: no I/O, no clock.

Following Kafka 4.x ``OffsetMetadataManager``: handlers validate and return the offset commit
records to write; the state changes only when those records are replayed
(:meth:`OffsetManager.replay`), on the live path after the append and at load time alike.

- OffsetCommit (``validateOffsetCommit`` + ``ClassicGroup.validateOffsetCommit``): a group
  that does not exist accepts commits with generation -1 (a "simple" group appears when the
  record is replayed); else v9+ answers GROUP_ID_NOT_FOUND and older versions
  ILLEGAL_GENERATION. An Empty group accepts generation -1. Otherwise a member id, instance
  id or generation >= 0 must name a current member (UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID) of
  the current generation (ILLEGAL_GENERATION); a commit without any of them is accepted only
  by an Empty group (UNKNOWN_MEMBER_ID). During CompletingRebalance: REBALANCE_IN_PROGRESS.
  Metadata longer than ``offset.metadata.max.bytes`` gives OFFSET_METADATA_TOO_LARGE for that
  partition. A commit keeps a Stable or PreparingRebalance member's session alive.
- TxnOffsetCommit: the same checks with KIP-447 fencing when the request carries member id,
  instance id or generation, except that a missing group with generation >= 0 is
  ILLEGAL_GENERATION, a commit without member information is accepted in any state, and there
  is no REBALANCE_IN_PROGRESS. Its records are written in a transactional batch of the producer
  (the broker checks the producer epoch on that append) and replayed as *pending* for that
  producer id.
- A transaction marker (:meth:`OffsetManager.replay_end_transaction_marker`): commit moves the
  producer's pending offsets into the committed ones unless a later record (higher log
  offset) already committed that partition; abort drops them.
- OffsetFetch: missing partitions answer offset -1; with ``require_stable`` a partition with
  pending transactional offsets answers UNSTABLE_OFFSET_COMMIT. A missing group answers -1
  for every partition (or no topics when all are asked for).
- An offset tombstone deletes the committed offset and the pending ones of that partition.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from oncelog.groups.classic import ClassicGroupManager, GroupConfig
from oncelog.groups.classic_group import ClassicGroup, GroupState
from oncelog.groups.consumer_protocol import CONSUMER_PROTOCOL_TYPE, subscribed_topics
from oncelog.groups.messages import Result
from oncelog.groups.records import CoordinatorRecord, OffsetCommitKey, OffsetCommitValue
from oncelog.protocol.errors import ErrorCode

__all__ = [
    "INVALID_OFFSET",
    "CommittedOffset",
    "OffsetCommitPartition",
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetDeleteResponse",
    "OffsetFetchPartition",
    "OffsetFetchResponse",
    "OffsetManager",
    "PartitionError",
    "TxnOffsetCommitRequest",
]

INVALID_OFFSET = -1
NO_PRODUCER_ID = -1
_E = ErrorCode
_S = GroupState

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """A partition's committed offset as the shard keeps it."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1
    record_offset: int = -1  # where its record sits in __consumer_offsets


@dataclass(frozen=True, slots=True)
class OffsetCommitPartition:
    """One partition's offset in an OffsetCommit or TxnOffsetCommit."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = None
    commit_timestamp: int = -1  # OffsetCommit v1 only; -1: the broker's time


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    """An OffsetCommit as the group core sees it."""

    group_id: str
    partitions: tuple[OffsetCommitPartition, ...]
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    api_version: int = 9


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitRequest:
    """A TxnOffsetCommit: offsets that become visible when the producer's transaction
    commits, and are dropped if it aborts."""

    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[OffsetCommitPartition, ...]
    generation_id: int = -1  # v3+ (KIP-447)
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionError:
    """One partition's error code in an offset commit's answer."""

    topic: str
    partition: int
    error_code: ErrorCode


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse:
    """Per-partition answers (OffsetCommit and TxnOffsetCommit alike)."""

    partitions: tuple[PartitionError, ...]


@dataclass(frozen=True, slots=True)
class OffsetDeleteResponse:
    """OffsetDelete's answer: a group-level error, or one error per partition."""

    error_code: ErrorCode
    partitions: tuple[PartitionError, ...]


@dataclass(frozen=True, slots=True)
class OffsetFetchPartition:
    """One partition's committed offset in an OffsetFetch answer (-1: none)."""

    topic: str
    partition: int
    offset: int = INVALID_OFFSET
    leader_epoch: int = -1
    metadata: str = ""
    error_code: ErrorCode = _E.none


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    """The answer to an OffsetFetch for one group."""

    group_id: str
    partitions: tuple[OffsetFetchPartition, ...]
    error_code: ErrorCode = _E.none


class OffsetManager:
    """Offsets of the groups of one shard; group checks go through the classic groups."""

    def __init__(self, groups: ClassicGroupManager, config: GroupConfig | None = None) -> None:
        self._groups = groups
        self.config = config or groups.config
        self._offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        self._pending: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]] = {}
        self._open_by_group: dict[str, set[int]] = {}

    # -- queries --

    def committed(self, group_id: str) -> Mapping[TopicPartition, CommittedOffset]:
        return dict(self._offsets.get(group_id, {}))

    def pending(self, producer_id: int) -> Mapping[str, Mapping[TopicPartition, CommittedOffset]]:
        return {g: dict(o) for g, o in self._pending.get(producer_id, {}).items()}

    def open_transactions(self, group_id: str) -> frozenset[int]:
        return frozenset(self._open_by_group.get(group_id, ()))

    def has_pending(self, group_id: str, topic: str, partition: int) -> bool:
        return any(
            (topic, partition) in self._pending[pid].get(group_id, {})
            for pid in self._open_by_group.get(group_id, ())
        )

    def group_ids(self) -> Iterator[str]:
        return iter(self._offsets)

    # -- OffsetCommit --

    def commit(self, request: OffsetCommitRequest, now_ms: int) -> Result[OffsetCommitResponse]:
        error = self._validate(
            request.group_id,
            request.member_id,
            request.group_instance_id,
            request.generation_id,
            transactional=False,
            api_version=request.api_version,
        )
        if error is not None:
            return Result(_all_failed(request.partitions, error))
        group = self._groups.group(request.group_id)
        if group is not None and group.is_in(_S.STABLE, _S.PREPARING_REBALANCE):
            self._groups.reschedule_heartbeat(group, request.member_id, now_ms)
        return self._records(request.group_id, request.partitions, now_ms)

    def commit_transactional(
        self, request: TxnOffsetCommitRequest, now_ms: int
    ) -> Result[OffsetCommitResponse]:
        error = self._validate(
            request.group_id,
            request.member_id,
            request.group_instance_id,
            request.generation_id,
            transactional=True,
        )
        if error is not None:
            return Result(_all_failed(request.partitions, error))
        result = self._records(request.group_id, request.partitions, now_ms, transactional=True)
        return Result(
            result.response,
            result.records,
            producer_id=request.producer_id,
            producer_epoch=request.producer_epoch,
        )

    def _validate(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation_id: int,
        *,
        transactional: bool,
        api_version: int = 9,
    ) -> ErrorCode | None:
        if not group_id:
            return _E.invalid_group_id
        group = self._groups.group(group_id)
        if group is None:
            if generation_id < 0:
                return None  # a simple group, created when the record is replayed
            if transactional or api_version < 9:
                return _E.illegal_generation
            return _E.group_id_not_found
        return _validate_against_group(group, member_id, instance_id, generation_id, transactional)

    def _records(
        self,
        group_id: str,
        partitions: Sequence[OffsetCommitPartition],
        now_ms: int,
        transactional: bool = False,
    ) -> Result[OffsetCommitResponse]:
        answers = []
        records = []
        for p in partitions:
            metadata = "" if p.metadata is None else p.metadata
            if len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                answers.append(PartitionError(p.topic, p.partition, _E.offset_metadata_too_large))
                continue
            answers.append(PartitionError(p.topic, p.partition, _E.none))
            ts = p.commit_timestamp if p.commit_timestamp != -1 and not transactional else now_ms
            value = OffsetCommitValue(p.offset, metadata, ts, p.leader_epoch)
            records.append(
                CoordinatorRecord(OffsetCommitKey(group_id, p.topic, p.partition), value)
            )
        return Result(OffsetCommitResponse(tuple(answers)), tuple(records))

    # -- OffsetFetch --

    def fetch(
        self,
        group_id: str,
        topics: Mapping[str, Sequence[int]] | None,
        require_stable: bool = False,
    ) -> OffsetFetchResponse:
        """``topics`` None asks for every committed partition of the group."""
        if not group_id:
            return OffsetFetchResponse(group_id, (), _E.invalid_group_id)
        group = self._groups.group(group_id)
        missing = group is None or group.is_in(_S.DEAD)
        offsets = {} if missing else self._offsets.get(group_id, {})
        if topics is None:
            wanted = sorted(offsets)
        else:
            wanted = [(t, p) for t, parts in topics.items() for p in parts]
        answers = []
        for topic, partition in wanted:
            if require_stable and not missing and self.has_pending(group_id, topic, partition):
                answers.append(
                    OffsetFetchPartition(topic, partition, error_code=_E.unstable_offset_commit)
                )
                continue
            c = offsets.get((topic, partition))
            if c is None:
                answers.append(OffsetFetchPartition(topic, partition))
            else:
                answers.append(
                    OffsetFetchPartition(topic, partition, c.offset, c.leader_epoch, c.metadata)
                )
        return OffsetFetchResponse(group_id, tuple(answers))

    # -- delete --

    def tombstones(self, group_id: str) -> tuple[CoordinatorRecord, ...]:
        """Tombstones for every offset of the group, committed or pending in a transaction
        (DeleteGroups; Kafka's ``deleteAllOffsets``)."""
        partitions = set(self._offsets.get(group_id, {}))
        for pid in self._open_by_group.get(group_id, ()):
            partitions |= set(self._pending[pid].get(group_id, {}))
        return tuple(_tombstone(group_id, t, p) for t, p in sorted(partitions))

    def delete_offsets(
        self, group_id: str, topics: Mapping[str, Sequence[int]]
    ) -> Result[OffsetDeleteResponse]:
        """OffsetDelete (Kafka's ``OffsetMetadataManager.deleteOffsets``): a group that does
        not exist answers GROUP_ID_NOT_FOUND; a non-empty group that is not a consumer
        group NON_EMPTY_GROUP; partitions of topics its members subscribe to
        GROUP_SUBSCRIBED_TO_TOPIC; every other partition gets a tombstone (if it has an
        offset) and no error."""
        if not group_id:
            return Result(OffsetDeleteResponse(_E.invalid_group_id, ()))
        group = self._groups.group(group_id)
        if group is None or group.is_in(_S.DEAD):
            return Result(OffsetDeleteResponse(_E.group_id_not_found, ()))
        active = group.is_in(_S.STABLE, _S.PREPARING_REBALANCE, _S.COMPLETING_REBALANCE)
        if active and group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return Result(OffsetDeleteResponse(_E.non_empty_group, ()))
        subscribed = _subscribed_topics(group)
        answers = []
        records = []
        for topic, partitions in topics.items():
            for partition in partitions:
                if topic in subscribed:
                    answers.append(PartitionError(topic, partition, _E.group_subscribed_to_topic))
                    continue
                answers.append(PartitionError(topic, partition, _E.none))
                if self._has_offset(group_id, topic, partition):
                    records.append(_tombstone(group_id, topic, partition))
        return Result(OffsetDeleteResponse(_E.none, tuple(answers)), tuple(records))

    def _has_offset(self, group_id: str, topic: str, partition: int) -> bool:
        return (topic, partition) in self._offsets.get(group_id, {}) or self.has_pending(
            group_id, topic, partition
        )

    # -- expiry --

    def expired(self, now_ms: int, retention_ms: int) -> dict[str, list[TopicPartition]]:
        """The offsets ``offsets.retention.minutes`` lets go, per group (Kafka's
        ``cleanupExpiredOffsets`` with ``ClassicGroup.offsetExpirationCondition``):

        - a group with a protocol, Empty: every offset, counted from when the group
          became Empty (from its commit, when that time is unknown);
        - a consumer group, Stable: offsets of topics no member subscribes to, counted
          from their commit;
        - a group that never had members (offsets committed without group management):
          every offset, counted from its commit;
        - no other group, and never a partition with a transaction's offset pending.
        An offset committed with an explicit expiry (OffsetCommit v1) expires then.
        """
        found: dict[str, list[TopicPartition]] = {}
        for group_id, offsets in self._offsets.items():
            group = self._groups.group(group_id)
            since = _expiry_base(group)
            if since is None:
                continue
            subscribed = _subscribed_topics(group) if group is not None else frozenset()
            for tp, committed in sorted(offsets.items()):
                if tp[0] in subscribed or self.has_pending(group_id, *tp):
                    continue
                if committed.expire_timestamp >= 0:
                    gone = now_ms >= committed.expire_timestamp
                else:
                    base = since if since >= 0 else committed.commit_timestamp
                    gone = now_ms - base >= retention_ms
                if gone:
                    found.setdefault(group_id, []).append(tp)
        return found

    def expiry_records(
        self, expired: Mapping[str, Sequence[TopicPartition]]
    ) -> tuple[CoordinatorRecord, ...]:
        return tuple(_tombstone(g, t, p) for g, tps in expired.items() for t, p in tps)

    # -- replay: the only way offsets change --

    def replay(
        self,
        record_offset: int,
        producer_id: int,
        key: OffsetCommitKey,
        value: OffsetCommitValue | None,
    ) -> None:
        tp = (key.topic, key.partition)
        if value is None:
            committed = self._offsets.get(key.group)
            if committed is not None:
                committed.pop(tp, None)
                if not committed:
                    del self._offsets[key.group]
            for pid in self._open_by_group.get(key.group, ()):
                self._pending[pid].get(key.group, {}).pop(tp, None)
            return
        # Offsets without membership still need a group: a "simple" Empty group.
        self._groups.get_or_create(key.group)
        entry = CommittedOffset(
            value.offset,
            value.leader_epoch,
            value.metadata,
            value.commit_timestamp,
            value.expire_timestamp,
            record_offset,
        )
        if producer_id == NO_PRODUCER_ID:
            self._offsets.setdefault(key.group, {})[tp] = entry
        else:
            self._pending.setdefault(producer_id, {}).setdefault(key.group, {})[tp] = entry
            self._open_by_group.setdefault(key.group, set()).add(producer_id)

    def replay_end_transaction_marker(self, producer_id: int, committed: bool) -> None:
        pending = self._pending.pop(producer_id, None)
        if pending is None:
            return  # nothing of this producer here
        for group_id in pending:
            open_pids = self._open_by_group.get(group_id)
            if open_pids is not None:
                open_pids.discard(producer_id)
                if not open_pids:
                    del self._open_by_group[group_id]
        if not committed:
            return
        for group_id, offsets in pending.items():
            current = self._offsets.setdefault(group_id, {})
            for tp, entry in offsets.items():
                existing = current.get(tp)
                # The most recent commit wins, transactional or not (compaction-safe).
                if existing is None or entry.record_offset > existing.record_offset:
                    current[tp] = entry
            if not current:
                del self._offsets[group_id]


def _tombstone(group_id: str, topic: str, partition: int) -> CoordinatorRecord:
    return CoordinatorRecord(OffsetCommitKey(group_id, topic, partition), None)


def _subscribed_topics(group: ClassicGroup) -> frozenset[str]:
    """What a consumer group's members subscribe to (nothing for other groups)."""
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE or group.is_in(_S.EMPTY, _S.DEAD):
        return frozenset()
    metadatas = []
    for member in group.members.values():
        try:
            metadatas.append(member.metadata(group.protocol_name))
        except ValueError:
            continue
    return subscribed_topics(metadatas)


def _expiry_base(group: ClassicGroup | None) -> int | None:
    """When a group's offsets start to age: the time it became Empty (-1: each offset's
    commit time), or None when its offsets do not expire now."""
    if group is None or group.protocol_type is None:
        return -1  # offsets committed without group management
    if group.is_in(_S.EMPTY):
        return group.current_state_timestamp
    if group.protocol_type == CONSUMER_PROTOCOL_TYPE and group.is_in(_S.STABLE):
        return -1
    return None


def _validate_against_group(
    group: ClassicGroup,
    member_id: str,
    instance_id: str | None,
    generation_id: int,
    transactional: bool,
) -> ErrorCode | None:
    """Kafka's ``ClassicGroup.validateOffsetCommit``."""
    if group.is_in(_S.DEAD):
        return _E.coordinator_not_available
    if generation_id < 0 and group.is_in(_S.EMPTY):
        return None  # admin client or a consumer without group management
    if generation_id >= 0 or member_id or instance_id is not None:
        error = group.validate_member(member_id, instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return _E.illegal_generation
    elif not transactional and not group.is_in(_S.EMPTY):
        return _E.unknown_member_id
    if not transactional and group.is_in(_S.COMPLETING_REBALANCE):
        return _E.rebalance_in_progress
    return None


def _all_failed(
    partitions: Sequence[OffsetCommitPartition], error: ErrorCode
) -> OffsetCommitResponse:
    return OffsetCommitResponse(
        tuple(PartitionError(p.topic, p.partition, error) for p in partitions)
    )
