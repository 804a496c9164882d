"""The group coordinator shard of one ``__consumer_offsets`` partition (pure, no I/O).

Modelled on Kafka 4.x's ``GroupCoordinatorShard`` and ``CoordinatorResult``: each handler
returns a :class:`~oncelog.groups.classic.Result` (records to write + response). The coordinator
runtime (``oncelog.broker.coordinator_runtime``):

1. writes ``result.log_records`` to the shard's ``__consumer_offsets`` partition as one batch
   (transactional, with ``producer_id``/``producer_epoch``, for TxnOffsetCommit);
2. once they are durable, if ``result.replay_records``, replays each with :meth:`replay`, the
   method that loads the partition (this is where offsets change);
3. returns the result: the broker sends ``result.response`` and answers each parked request
   in ``result.completions``.

Handle, write and replay one result before the next operation of the same shard (the runtime
runs groups serially). Transaction markers are replayed with
:meth:`replay_end_transaction_marker`, at load and live. After the load the runtime calls
:meth:`loaded`. Timers: schedule :meth:`next_deadline`, call :meth:`tick` when it is due.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from oncelog.groups.classic import ClassicGroupManager, GroupConfig
from oncelog.groups.classic_group import GroupState
from oncelog.groups.messages import (
    DescribedGroup,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListedGroup,
    Result,
    SyncGroupRequest,
    SyncGroupResponse,
)
from oncelog.groups.offsets import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    OffsetManager,
    TxnOffsetCommitRequest,
)
from oncelog.groups.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_record,
)
from oncelog.protocol.errors import ErrorCode

__all__ = ["GroupCoordinatorShard"]


class GroupCoordinatorShard:
    """Classic groups and committed offsets of one ``__consumer_offsets`` partition."""

    def __init__(
        self,
        partition: int = 0,
        config: GroupConfig | None = None,
        new_uuid: Callable[[], str] | None = None,
    ) -> None:
        self.partition = partition
        self.config = config or GroupConfig()
        self.groups = ClassicGroupManager(self.config, new_uuid)
        self.offsets = OffsetManager(self.groups, self.config)

    # --- classic group protocol ---

    def join_group(
        self, request: JoinGroupRequest, request_id: object, now_ms: int
    ) -> Result[JoinGroupResponse]:
        return self.groups.join(request, request_id, now_ms)

    def sync_group(
        self, request: SyncGroupRequest, request_id: object, now_ms: int
    ) -> Result[SyncGroupResponse]:
        return self.groups.sync(request, request_id, now_ms)

    def heartbeat(self, request: HeartbeatRequest, now_ms: int) -> Result[ErrorCode]:
        return self.groups.heartbeat(request, now_ms)

    def leave_group(self, request: LeaveGroupRequest, now_ms: int) -> Result[LeaveGroupResponse]:
        return self.groups.leave(request, now_ms)

    def list_groups(self, states: Iterable[str] = ()) -> tuple[ListedGroup, ...]:
        return self.groups.list(states)

    def describe_groups(self, group_ids: Sequence[str]) -> tuple[DescribedGroup, ...]:
        return self.groups.describe(group_ids)

    def delete_group(self, group_id: str) -> Result[ErrorCode]:
        """DeleteGroups: tombstones for the offsets and the group (Empty groups only)."""
        result = self.groups.delete(group_id)
        if result.response is not ErrorCode.none:
            return result
        return Result(ErrorCode.none, self.offsets.tombstones(group_id) + result.records)

    def delete_offsets(
        self, group_id: str, topics: Mapping[str, Sequence[int]]
    ) -> Result[OffsetDeleteResponse]:
        """OffsetDelete: tombstones for the named partitions the group no longer uses."""
        return self.offsets.delete_offsets(group_id, topics)

    def expire_offsets(self, now_ms: int, retention_ms: int) -> Result[int]:
        """Offset expiry (``offsets.retention.minutes``): tombstones for the offsets that
        aged out, and for each Empty group left without any offset, the group's tombstone
        (Kafka's ``cleanupGroupMetadata``). The response counts the offsets expired."""
        expired = self.offsets.expired(now_ms, retention_ms)
        records = list(self.offsets.expiry_records(expired))
        for group_id, partitions in expired.items():
            group = self.groups.group(group_id)
            left = set(self.offsets.committed(group_id)) - set(partitions)
            pending = self.offsets.open_transactions(group_id)
            if group is not None and group.is_in(GroupState.EMPTY) and not left and not pending:
                records += self.groups.delete(group_id).records
        return Result(sum(len(p) for p in expired.values()), tuple(records))

    # --- offsets ---

    def commit_offsets(
        self, request: OffsetCommitRequest, now_ms: int
    ) -> Result[OffsetCommitResponse]:
        return self.offsets.commit(request, now_ms)

    def commit_transactional_offsets(
        self, request: TxnOffsetCommitRequest, now_ms: int
    ) -> Result[OffsetCommitResponse]:
        return self.offsets.commit_transactional(request, now_ms)

    def fetch_offsets(
        self,
        group_id: str,
        topics: Mapping[str, Sequence[int]] | None = None,
        require_stable: bool = False,
    ) -> OffsetFetchResponse:
        return self.offsets.fetch(group_id, topics, require_stable)

    # --- timers ---

    def next_deadline(self) -> int | None:
        return self.groups.next_deadline()

    def tick(self, now_ms: int) -> Result[None]:
        return self.groups.tick(now_ms)

    # --- replay: the one path for load and live ---

    def replay(self, offset: int, producer_id: int, key: bytes, value: bytes | None) -> None:
        """Apply one stored record. Raises ``UnknownRecordType`` for record types we do not
        model (KIP-848 consumer groups, share groups): the loader skips those."""
        record = decode_record(key, value)
        if isinstance(record.key, OffsetCommitKey):
            assert record.value is None or isinstance(record.value, OffsetCommitValue)
            self.offsets.replay(offset, producer_id, record.key, record.value)
        else:
            assert isinstance(record.key, GroupMetadataKey)
            assert record.value is None or isinstance(record.value, GroupMetadataValue)
            self.groups.replay_group_metadata(record.key.group, record.value)

    def replay_end_transaction_marker(self, producer_id: int, committed: bool) -> None:
        """A commit or abort marker of ``producer_id`` in this partition: its pending
        transactional offsets become committed, or are dropped."""
        self.offsets.replay_end_transaction_marker(producer_id, committed)

    def write_failed(self, result: Result[object]) -> None:
        """Nothing to undo: offsets change only by replay, and the classic membership is
        soft state changed in place whether or not its checkpoint record is written (see
        the deviation noted in ``oncelog.groups.classic``)."""

    def loaded(self, now_ms: int) -> None:
        """After the load: loaded members' sessions start now (Kafka's ``onLoaded``)."""
        self.groups.start_sessions(now_ms)
