"""The coordinator runtime: load and unload per partition with epochs, write then replay in
log order, one way to report failures. A small key/value shard stands in for the cores."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import pytest

from oncelog.broker.coordinator_runtime import (
    CoordinatorError,
    CoordinatorRuntime,
    write_error,
)
from oncelog.protocol.errors import ErrorCode as E

from .memory_log import MemoryLog


@dataclass(frozen=True)
class Put:
    """A handler's result: write ``key=value`` records, answer ``response``."""

    log_records: tuple[tuple[bytes, bytes | None], ...]
    response: str = "ok"
    replay_records: bool = True
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass
class KeyValueShard:
    partition: int
    epoch: int
    values: dict[bytes, bytes | None] = field(default_factory=dict)
    replayed: list[int] = field(default_factory=list)  # offsets, in replay order
    markers: list[tuple[int, bool]] = field(default_factory=list)
    failed: list[Put] = field(default_factory=list)
    loaded: bool = False

    def replay(self, offset: int, producer_id: int, key: bytes, value: bytes | None) -> None:
        self.values[key] = value
        self.replayed.append(offset)

    def replay_end_transaction_marker(self, producer_id: int, committed: bool) -> None:
        self.markers.append((producer_id, committed))

    def write_failed(self, result: Put) -> None:
        self.failed.append(result)


def put(key: bytes, value: bytes = b"v", response: str = "ok") -> Any:
    return lambda shard, now: Put(((key, value),), response)


class Node:
    """A runtime over a MemoryLog, with the hooks recorded."""

    def __init__(self, log: MemoryLog | None = None, *, pipelined: bool = True) -> None:
        self.log = log or MemoryLog()
        self.unloaded: list[int] = []
        self.runtime: CoordinatorRuntime[KeyValueShard] = CoordinatorRuntime(
            "__test_state",
            self.log,
            self.log,
            lambda: 1_000,
            KeyValueShard,
            pipelined=pipelined,
            on_loaded=lambda p, shard: setattr(shard, "loaded", True),
            on_unloaded=lambda p, shard: self.unloaded.append(p),
        )


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coroutine)


def code_of(excinfo: pytest.ExceptionInfo[CoordinatorError]) -> E:
    return excinfo.value.code


def test_write_then_replay_and_load_replays_the_same_records() -> None:
    async def scenario() -> None:
        node = Node()
        await node.runtime.load(0, 0)
        shard = node.runtime.shard(0)
        assert shard.loaded and shard.epoch == 0
        result = await node.runtime.write(0, put(b"a", b"1"))
        assert result.response == "ok" and shard.values == {b"a": b"1"}
        await node.runtime.write(0, lambda s, now: Put(((b"b", b"2"), (b"a", None))))
        assert shard.values == {b"a": None, b"b": b"2"} and shard.replayed == [0, 1, 2]
        # a second broker (a new runtime) loading the same log rebuilds the same state
        other = Node(node.log)
        await other.runtime.load(0, 1)
        assert other.runtime.shard(0).values == shard.values
        assert other.runtime.shard(0).epoch == 1

    run(scenario())


def test_a_result_with_nothing_to_write_is_answered_at_once() -> None:
    async def scenario() -> None:
        node = Node(MemoryLog(auto_durable=False))
        await node.runtime.load(0, 0)
        result = await node.runtime.write(0, lambda s, now: Put((), "nothing"))
        assert result.response == "nothing" and node.log.log(0) == []

    run(scenario())


def test_records_not_replayed_when_the_shard_already_holds_them() -> None:
    async def scenario() -> None:
        node = Node()
        await node.runtime.load(0, 0)
        await node.runtime.write(0, lambda s, now: Put(((b"a", b"1"),), replay_records=False))
        assert node.runtime.shard(0).values == {} and len(node.log.log(0)) == 1

    run(scenario())


def test_only_durable_writes_are_replayed_and_in_log_order() -> None:
    async def scenario() -> None:
        node = Node(MemoryLog(auto_durable=False))
        await node.runtime.load(0, 0)
        shard = node.runtime.shard(0)
        writes = [asyncio.ensure_future(node.runtime.write(0, put(b"k%d" % i))) for i in range(3)]
        await asyncio.sleep(0.01)
        assert len(node.log.log(0)) == 3, "pipelined: all appended before any is durable"
        assert shard.replayed == [] and not any(w.done() for w in writes)
        node.log.make_durable(0)  # wakes the last writer first
        await asyncio.gather(*writes)
        assert shard.replayed == [0, 1, 2]

    run(scenario())


def test_serial_runtime_writes_one_at_a_time() -> None:
    async def scenario() -> None:
        node = Node(MemoryLog(auto_durable=False), pipelined=False)
        await node.runtime.load(0, 0)
        seen: list[int] = []

        def observe(shard: KeyValueShard, now: int) -> Put:
            seen.append(len(shard.values))
            return Put(((b"k%d" % len(seen), b"v"),))

        writes = [asyncio.ensure_future(node.runtime.write(0, observe)) for _ in range(2)]
        await asyncio.sleep(0.01)
        assert len(node.log.log(0)) == 1, "the second waits for the first to be replayed"
        node.log.make_durable(0)
        await asyncio.sleep(0.01)
        node.log.make_durable(0)
        await asyncio.gather(*writes)
        assert seen == [0, 1]

    run(scenario())


def test_requests_for_partitions_not_held_get_not_coordinator() -> None:
    async def scenario() -> None:
        node = Node()
        with pytest.raises(CoordinatorError) as missing:
            await node.runtime.write(1, put(b"a"))
        assert code_of(missing) == E.not_coordinator
        with pytest.raises(CoordinatorError) as read:
            node.runtime.shard(1)
        assert code_of(read) == E.not_coordinator

    run(scenario())


def test_load_in_progress_until_replayed() -> None:
    async def scenario() -> None:
        log = MemoryLog()
        release = log.loads_wait_for = asyncio.Event()
        node = Node(log)
        loading = asyncio.ensure_future(node.runtime.load(0, 0))
        await asyncio.sleep(0.01)
        with pytest.raises(CoordinatorError) as early:
            await node.runtime.write(0, put(b"a"))
        assert code_of(early) == E.coordinator_load_in_progress
        release.set()
        await loading
        assert (await node.runtime.write(0, put(b"a"))).response == "ok"

    run(scenario())


def test_unload_answers_not_coordinator_and_follows_epochs() -> None:
    async def scenario() -> None:
        node = Node()
        await node.runtime.load(0, 3)
        await node.runtime.load(1, 3)
        await node.runtime.write(0, put(b"a", b"1"))
        node.runtime.unload(0, 3)  # not newer than what is held: a stale notification
        assert node.runtime.shard(0).values == {b"a": b"1"} and node.unloaded == []
        node.runtime.unload(0, 4)  # another broker leads it now
        assert node.unloaded == [0] and list(node.runtime.shards) == [1]
        with pytest.raises(CoordinatorError) as moved:
            await node.runtime.write(0, put(b"b"))
        assert code_of(moved) == E.not_coordinator
        await node.runtime.load(0, 2)  # older than what we last saw? we hold nothing: load
        assert node.runtime.shard(0).epoch == 2 and node.runtime.shard(0).values == {b"a": b"1"}
        await node.runtime.load(0, 2)  # the same epoch again: ignored
        await node.runtime.load(0, 5)  # a newer epoch: reloaded, stamped with it
        assert node.runtime.epoch(0) == 5 and node.unloaded == [0, 0]
        node.runtime.unload(1, None)  # the topic is gone
        assert list(node.runtime.shards) == [0]

    run(scenario())


def test_unload_while_a_write_waits_never_touches_the_old_shard() -> None:
    async def scenario() -> None:
        node = Node(MemoryLog(auto_durable=False))
        await node.runtime.load(0, 0)
        shard = node.runtime.shard(0)
        write = asyncio.ensure_future(node.runtime.write(0, put(b"a")))
        await asyncio.sleep(0.01)
        node.runtime.unload(0, 1)
        node.log.make_durable(0)
        with pytest.raises(CoordinatorError) as moved:
            await write
        assert code_of(moved) == E.not_coordinator
        assert shard.replayed == [] and len(shard.failed) == 1

    run(scenario())


def test_a_refused_append_is_reported_once_mapped_and_the_shard_told() -> None:
    async def scenario() -> None:
        node = Node()
        await node.runtime.load(0, 0)
        shard = node.runtime.shard(0)
        node.log.refuse_appends = E.not_leader_or_follower
        with pytest.raises(CoordinatorError) as refused:
            await node.runtime.write(0, put(b"a"))
        assert code_of(refused) == E.not_coordinator
        assert [r.log_records for r in shard.failed] == [((b"a", b"v"),)]
        assert shard.values == {}

    run(scenario())


def test_a_write_the_isr_did_not_confirm_is_not_replayed() -> None:
    """A durability wait that fails without a storage failure (a cluster's ISR, a
    timeout): the shard is told, the partition stays active."""

    async def scenario() -> None:
        node = Node(MemoryLog(auto_durable=False))
        await node.runtime.load(0, 0)
        shard = node.runtime.shard(0)
        write = asyncio.ensure_future(node.runtime.write(0, put(b"a")))
        await asyncio.sleep(0.01)
        node.log.fail_durability(0, E.not_enough_replicas)
        with pytest.raises(CoordinatorError) as failed:
            await write
        assert code_of(failed) == E.coordinator_not_available
        assert shard.values == {} and len(shard.failed) == 1
        node.log.make_durable(0)  # a later write still works and is replayed alone
        node.log.auto_durable = True
        await node.runtime.write(0, put(b"b"))
        assert shard.values == {b"b": b"v"}

    run(scenario())


async def restarted(log: MemoryLog) -> KeyValueShard:
    """The shard a restarted broker loads from ``log``."""
    node = Node(log)
    await node.runtime.load(0, 0)
    return node.runtime.shard(0)


async def assert_out_until_restart(node: Node, shard: KeyValueShard) -> None:
    """The partition answers NOT_COORDINATOR, its shard was dropped and never told."""
    with pytest.raises(CoordinatorError) as out:
        node.runtime.shard(0)
    assert code_of(out) == E.not_coordinator
    with pytest.raises(CoordinatorError) as refused:
        await node.runtime.write(0, put(b"later"))
    assert code_of(refused) == E.not_coordinator
    assert node.unloaded == [0] and shard.failed == []
    await node.runtime.load(0, 0)  # only a newer epoch, or a restart, loads it again
    with pytest.raises(CoordinatorError):
        node.runtime.shard(0)


def test_a_failed_fsync_takes_the_partition_out_until_a_restart() -> None:
    """The records are in the log but maybe not on disk (and after a failed fsync the page
    cache is not to be trusted): neither "written" nor "not written" may be claimed."""

    async def scenario() -> None:
        node = Node(MemoryLog(auto_durable=False))
        await node.runtime.load(0, 0)
        shard = node.runtime.shard(0)
        write = asyncio.ensure_future(node.runtime.write(0, put(b"a")))
        await asyncio.sleep(0.01)
        node.log.fail_durability(0, E.kafka_storage_error)
        with pytest.raises(CoordinatorError) as failed:
            await write
        assert code_of(failed) == E.not_coordinator
        assert shard.values == {}
        await assert_out_until_restart(node, shard)
        node.log.make_durable(0)
        assert (await restarted(node.log)).values == {b"a": b"v"}

    run(scenario())


@pytest.mark.parametrize("after_write", [False, True], ids=["before", "after"])
@pytest.mark.parametrize("pipelined", [True, False], ids=["pipelined", "serial"])
def test_an_io_error_from_append_takes_the_partition_out(
    pipelined: bool, after_write: bool
) -> None:
    """An OSError (ENOSPC, EIO, EMFILE on a roll) is not a refusal: the records may be in
    the log. Before, it escaped the runtime and the shard kept its in-flight note."""

    async def scenario() -> None:
        node = Node(pipelined=pipelined)
        await node.runtime.load(0, 0)
        await node.runtime.write(0, put(b"a", b"1"))
        shard = node.runtime.shard(0)
        node.log.io_error = OSError(28, "No space left on device")
        node.log.io_error_after_write = after_write
        with pytest.raises(CoordinatorError) as failed:
            await node.runtime.write(0, put(b"b", b"2"))
        assert code_of(failed) == E.not_coordinator
        await assert_out_until_restart(node, shard)
        expected = {b"a": b"1", b"b": b"2"} if after_write else {b"a": b"1"}
        assert (await restarted(node.log)).values == expected

    run(scenario())


def test_an_offline_log_takes_the_partition_out() -> None:
    """KAFKA_STORAGE_ERROR from the append: the log went offline after a failed fsync."""

    async def scenario() -> None:
        node = Node()
        await node.runtime.load(0, 0)
        shard = node.runtime.shard(0)
        node.log.refuse_appends = E.kafka_storage_error
        with pytest.raises(CoordinatorError) as failed:
            await node.runtime.write(0, put(b"a"))
        assert code_of(failed) == E.not_coordinator
        await assert_out_until_restart(node, shard)

    run(scenario())


def test_an_io_error_in_write_each_takes_the_partition_out() -> None:
    async def scenario() -> None:
        node = Node()
        await node.runtime.load(0, 0)
        shard = node.runtime.shard(0)
        original = node.log.append
        calls = 0

        def second_fails(*args: Any, **kwargs: Any) -> int:
            nonlocal calls
            calls += 1
            if calls == 2:
                raise OSError(5, "Input/output error")
            return original(*args, **kwargs)

        node.log.append = second_fails  # type: ignore[method-assign]
        with pytest.raises(CoordinatorError) as failed:
            await node.runtime.write_each(
                0, lambda s, now: [Put(((b"a", b"1"),)), Put(((b"b", b"2"),))]
            )
        assert code_of(failed) == E.not_coordinator
        node.log.append = original  # type: ignore[method-assign]
        await assert_out_until_restart(node, shard)
        assert (await restarted(node.log)).values == {b"a": b"1"}

    run(scenario())


def test_an_io_error_writing_a_transaction_marker_takes_the_partition_out() -> None:
    async def scenario() -> None:
        node = Node(pipelined=False)
        await node.runtime.load(0, 0)
        shard = node.runtime.shard(0)
        node.log.io_error = OSError(5, "Input/output error")
        node.log.io_error_after_write = True
        with pytest.raises(CoordinatorError) as failed:
            await node.runtime.complete_transaction(0, 42, 1, True, 0)
        assert code_of(failed) == E.not_coordinator
        await assert_out_until_restart(node, shard)
        assert (await restarted(node.log)).markers == [(42, True)]

    run(scenario())


def test_a_serial_write_queued_behind_a_storage_failure_is_not_run() -> None:
    """A group request waiting for the partition's lock when the write ahead of it fails
    must not run on the dropped shard."""

    async def scenario() -> None:
        node = Node(MemoryLog(auto_durable=False), pipelined=False)
        await node.runtime.load(0, 0)
        ran: list[bytes] = []

        def recorded(key: bytes) -> Any:
            def operation(shard: KeyValueShard, now: int) -> Put:
                ran.append(key)
                return Put(((key, b"v"),))

            return operation

        first = asyncio.ensure_future(node.runtime.write(0, recorded(b"a")))
        second = asyncio.ensure_future(node.runtime.write(0, recorded(b"b")))
        await asyncio.sleep(0.01)
        node.log.fail_durability(0, E.kafka_storage_error)
        for write in (first, second):
            with pytest.raises(CoordinatorError) as failed:
                await write
            assert code_of(failed) == E.not_coordinator
        assert ran == [b"a"]

    run(scenario())


def test_write_each_writes_what_it_can_and_shares_one_wait() -> None:
    async def scenario() -> None:
        node = Node(MemoryLog(auto_durable=False))
        await node.runtime.load(0, 0)
        shard = node.runtime.shard(0)
        several = asyncio.ensure_future(
            node.runtime.write_each(
                0, lambda s, now: [Put(((b"a", b"1"),), "a"), Put(((b"b", b"2"),), "b")]
            )
        )
        await asyncio.sleep(0.01)
        assert len(node.log.log(0)) == 2 and shard.values == {}
        node.log.make_durable(0)
        assert [r.response for r in await several] == ["a", "b"]
        assert shard.values == {b"a": b"1", b"b": b"2"}

    run(scenario())


def test_transaction_markers_are_replayed_after_they_are_durable() -> None:
    async def scenario() -> None:
        node = Node(MemoryLog(auto_durable=False), pipelined=False)
        await node.runtime.load(0, 0)
        shard = node.runtime.shard(0)
        marker = asyncio.ensure_future(node.runtime.complete_transaction(0, 42, 1, True, 0))
        await asyncio.sleep(0.01)
        assert node.log.log(0)[0].key is None and shard.markers == []
        node.log.make_durable(0)
        await marker
        assert shard.markers == [(42, True)]
        reloaded = Node(node.log)
        await reloaded.runtime.load(0, 1)
        assert reloaded.runtime.shard(0).markers == [(42, True)]

    run(scenario())


def test_a_failed_load_leaves_the_partition_uncoordinated_until_loaded_again() -> None:
    async def scenario() -> None:
        log = MemoryLog()
        real_load = log.load

        async def broken(partition: int, shard: Any) -> Any:
            raise OSError("disk gone")

        log.load = broken  # type: ignore[method-assign]
        node = Node(log)
        await node.runtime.load(0, 0)
        with pytest.raises(CoordinatorError) as failed:
            node.runtime.shard(0)
        assert code_of(failed) == E.not_coordinator
        log.load = real_load  # type: ignore[method-assign]
        await node.runtime.load(0, 1)
        assert node.runtime.shard(0).loaded

    run(scenario())


def test_storage_errors_as_a_coordinator_client_sees_them() -> None:
    assert write_error(E.not_enough_replicas) == E.coordinator_not_available
    assert write_error(E.request_timed_out) == E.coordinator_not_available
    assert write_error(E.unknown_topic_or_partition) == E.coordinator_not_available
    assert write_error(E.not_leader_or_follower) == E.not_coordinator
    assert write_error(E.kafka_storage_error) == E.not_coordinator
    assert write_error(E.message_too_large) == E.unknown_server_error
    assert write_error(E.invalid_producer_epoch) == E.invalid_producer_epoch
