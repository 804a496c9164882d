"""LocalMarkerWriter: each partition's outcome once its marker is durable (or why not), and
cancelled as a whole."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, cast

import pytest

from oncelog.broker.txn_markers import LocalMarkerWriter
from oncelog.protocol.errors import ErrorCode, KafkaError


class FakePartition:
    def __init__(self, name: str) -> None:
        self.name = name
        self.markers = 0

    def append_marker(self, *marker: Any) -> int:
        self.markers += 1
        return self.markers - 1


class FakePartitions:
    """Every partition writable; durability when the test resolves its future."""

    def __init__(self) -> None:
        self.partitions: dict[tuple[str, int], FakePartition] = {}
        self.durable: dict[str, asyncio.Future[None]] = {}

    def writable(self, topic: str, index: int) -> Any:
        return self.partitions.setdefault((topic, index), FakePartition(f"{topic}-{index}"))

    def appended(self, partition: Any) -> None:
        pass

    def wait_durable(self, partition: Any, end_offset: int) -> Awaitable[None]:
        future = asyncio.get_running_loop().create_future()
        self.durable[partition.name] = future
        return future


async def no_offsets(*args: Any) -> None:
    raise AssertionError("no __consumer_offsets marker in these tests")


def writer(partitions: FakePartitions) -> LocalMarkerWriter:
    return LocalMarkerWriter(cast(Any, partitions), no_offsets, lambda: 0)


def start(partitions: FakePartitions, *names: tuple[str, int]) -> asyncio.Task[Any]:
    return asyncio.ensure_future(writer(partitions).write(5, 0, True, 0, names))


def test_each_partition_gets_its_own_outcome() -> None:
    async def scenario() -> dict[Any, ErrorCode]:
        partitions = FakePartitions()
        writing = start(partitions, ("t", 0), ("t", 1), ("t", 2))
        await asyncio.sleep(0)
        partitions.durable["t-2"].set_result(None)
        partitions.durable["t-1"].set_exception(
            KafkaError(ErrorCode.not_leader_or_follower, "moved")
        )
        partitions.durable["t-0"].cancel()  # not the writer's own cancellation
        async with asyncio.timeout(5):
            return await writing

    assert asyncio.run(scenario()) == {
        ("t", 0): ErrorCode.kafka_storage_error,
        ("t", 1): ErrorCode.not_leader_or_follower,
        ("t", 2): ErrorCode.none,
    }


@pytest.mark.parametrize("count", [2, 1])  # one partition is awaited without gather
def test_cancelling_the_write_cancels_every_wait(count: int) -> None:
    async def scenario() -> list[bool]:
        partitions = FakePartitions()
        writing = start(partitions, *[("t", i) for i in range(count)])
        await asyncio.sleep(0)
        if count > 1:
            partitions.durable["t-1"].set_result(None)
        writing.cancel()
        try:
            await writing
        except asyncio.CancelledError:
            pass
        return [writing.cancelled(), partitions.durable["t-0"].cancelled()]

    assert asyncio.run(scenario()) == [True, True]


def test_one_partition_gets_the_outcomes_several_do() -> None:
    """One partition (awaited without gather) answers as gather's path does: durable,
    refused, or its wait cancelled by someone else (then retried as a storage error)."""

    async def scenario(finish: str) -> dict[Any, ErrorCode]:
        partitions = FakePartitions()
        writing = start(partitions, ("t", 0))
        await asyncio.sleep(0)
        durable = partitions.durable["t-0"]
        if finish == "durable":
            durable.set_result(None)
        elif finish == "refused":
            durable.set_exception(KafkaError(ErrorCode.not_leader_or_follower, "moved"))
        else:
            durable.cancel()  # not the writer's own cancellation
        async with asyncio.timeout(5):
            return await writing

    assert asyncio.run(scenario("durable")) == {("t", 0): ErrorCode.none}
    assert asyncio.run(scenario("refused")) == {("t", 0): ErrorCode.not_leader_or_follower}
    assert asyncio.run(scenario("cancelled")) == {("t", 0): ErrorCode.kafka_storage_error}
