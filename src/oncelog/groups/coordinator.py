"""The group coordinator shard of one ``__consumer_offsets`` partition (pure, no I/O).

Modelled on Kafka 4.x's ``GroupCoordinatorShard`` and ``CoordinatorResult``: each handler
returns a :class:`~oncelog.groups.classic.Result` (records to write + response). The broker:

1. writes ``result.records`` to the shard's ``__consumer_offsets`` partition as one batch
   (transactional, with ``producer_id``/``producer_epoch``, for TxnOffsetCommit), encoded with
   :meth:`CoordinatorRecord.encode`;
2. if ``result.replay_records``, calls :meth:`GroupCoordinatorShard.replay_result` with the
   batch's base offset (this is where offsets change);
3. sends ``result.response`` and answers each parked request in ``result.completions``.

Handle, write and replay one result before the next request of the same shard (one writer
per partition). Loading replays the stored records with :meth:`replay` and the transaction
markers with :meth:`replay_transaction_marker`, the same code the live path runs, then calls
:meth:`loaded`. Timers: schedule :meth:`next_deadline`, call :meth:`tick` when it is due.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from oncelog.groups.classic import ClassicGroupManager, GroupConfig
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
    OffsetFetchResponse,
    OffsetManager,
    TxnOffsetCommitRequest,
)
from oncelog.groups.records import (
    CoordinatorRecord,
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

    # --- replay: live path after the append, and load ---

    def replay_result(self, result: Result[object], base_offset: int) -> None:
        """Apply a result's records written at ``base_offset`` onwards (live path)."""
        if not result.replay_records:
            return
        for i, record in enumerate(result.records):
            self.replay_record(base_offset + i, result.producer_id, record)

    def replay(self, offset: int, producer_id: int, key: bytes, value: bytes | None) -> None:
        """Apply one stored record (load path). Raises ``UnknownRecordType`` for record types
        we do not model (KIP-848 consumer groups, share groups): the loader skips those."""
        self.replay_record(offset, producer_id, decode_record(key, value))

    def replay_record(self, offset: int, producer_id: int, record: CoordinatorRecord) -> None:
        key, value = record.key, record.value
        if isinstance(key, OffsetCommitKey):
            assert value is None or isinstance(value, OffsetCommitValue)
            self.offsets.replay(offset, producer_id, key, value)
        else:
            assert isinstance(key, GroupMetadataKey)
            assert value is None or isinstance(value, GroupMetadataValue)
            self.groups.replay_group_metadata(key.group, value)

    def replay_transaction_marker(self, producer_id: int, committed: bool) -> None:
        """A commit or abort marker of ``producer_id`` in this partition: its pending
        transactional offsets become committed, or are dropped."""
        self.offsets.replay_end_transaction_marker(producer_id, committed)

    # The live path completes a transaction by writing the marker and replaying it: the same
    # step as the load path.
    complete_transaction = replay_transaction_marker

    def loaded(self, now_ms: int) -> None:
        """After the load: loaded members' sessions start now (Kafka's ``onLoaded``)."""
        self.groups.start_sessions(now_ms)
