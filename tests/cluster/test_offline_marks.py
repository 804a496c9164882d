"""A broker's offline marks reach ZooKeeper in the order it decided them.

A replica whose topic is deleted loses its mark; if the topic is created again and its new
replica's log fails at once, the new mark must stand. Written by independent tasks, the
new mark's create could land while the old mark still existed (NodeExists: taken as done)
and the slower removal after it: the replica offline on the broker, unmarked in
ZooKeeper, and the controller free to elect it for the rest of the session.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from oncelog.broker.config import BrokerConfig
from oncelog.cluster.replica_manager import ReplicaManager

KEY = ("orders", 0)


class SlowMarks:
    """The mark znodes, each call answered after the delay the test sets for its kind."""

    def __init__(self, mark_s: float, unmark_s: float) -> None:
        self.marked: set[tuple[int, str, int]] = set()
        self.calls: list[str] = []
        self._mark_s = mark_s
        self._unmark_s = unmark_s

    async def mark_replica_offline(self, broker_id: int, topic: str, partition: int) -> None:
        self.calls.append("mark")
        await asyncio.sleep(self._mark_s)
        self.marked.add((broker_id, topic, partition))  # NodeExists is success, too

    async def unmark_replica_offline(self, broker_id: int, topic: str, partition: int) -> None:
        self.calls.append("unmark")
        await asyncio.sleep(self._unmark_s)
        self.marked.discard((broker_id, topic, partition))


def _manager(tmp_path: Path, zk: SlowMarks) -> ReplicaManager:
    node = SimpleNamespace(
        config=BrokerConfig.load(None, {}),
        broker_id=3,
        zk=zk,
        lease=SimpleNamespace(session_id=7),
    )
    return ReplicaManager(node, tmp_path, flusher=None, clean_start=True)  # type: ignore[arg-type]


def test_a_mark_decided_after_a_removal_is_written_after_it(tmp_path: Path) -> None:
    async def scenario() -> set[tuple[int, str, int]]:
        zk = SlowMarks(mark_s=0.0, unmark_s=0.05)  # the removal is the slow one
        manager = _manager(tmp_path, zk)
        manager.offline.add(KEY)  # the first replica's log failed: marked
        manager._mark_offline(KEY)
        await _settled(manager)
        manager.offline.discard(KEY)  # its topic deleted (ReplicaManager._drop)
        manager._in_turn(KEY, manager._remove_offline_mark)
        await asyncio.sleep(0.01)  # the removal is on its way to ZooKeeper
        manager.offline.add(KEY)  # the re-created topic's replica fails at once
        manager._mark_offline(KEY)
        await _settled(manager)
        assert zk.calls == ["mark", "unmark", "mark"]
        return zk.marked

    assert asyncio.run(scenario()) == {(3, *KEY)}


async def _settled(manager: ReplicaManager) -> None:
    """Until the mark work is done, and anything else on its way to ZooKeeper landed."""
    while manager._mark_work:
        await asyncio.gather(*manager._mark_work.values())
    await asyncio.sleep(0.1)


def test_a_deleted_topic_loses_its_mark(tmp_path: Path) -> None:
    async def scenario() -> set[tuple[int, str, int]]:
        zk = SlowMarks(mark_s=0.05, unmark_s=0.0)  # the mark is the slow one
        manager = _manager(tmp_path, zk)
        manager.offline.add(KEY)
        manager._mark_offline(KEY)
        manager.offline.discard(KEY)  # its topic deleted while the mark is being written
        manager._in_turn(KEY, manager._remove_offline_mark)
        await _settled(manager)
        assert zk.calls[-1] == "unmark"
        return zk.marked

    assert asyncio.run(scenario()) == set()


def test_a_new_session_writes_every_mark(tmp_path: Path) -> None:
    """ClusterNode._register calls this before registering the broker again."""

    async def scenario() -> set[tuple[int, str, int]]:
        zk = SlowMarks(mark_s=0.0, unmark_s=0.0)
        manager = _manager(tmp_path, zk)
        manager.offline |= {KEY, ("orders", 1)}
        await manager.write_offline_marks()
        return zk.marked

    assert asyncio.run(scenario()) == {(3, "orders", 0), (3, "orders", 1)}
