"""What the transaction coordinator does in the loop step a write settles, driven in memory:

- the markers a PREPARE record asks for are asked of the marker writer in the step that
  finds it durable, so ``end_txn`` returns with them asked for (a local writer appends in
  that call: they are in the log before the EndTxn answer is written);
- a request parked behind its id's markers runs again one loop turn after ``_wake``.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from oncelog.coordinator_partitions import partition_for
from oncelog.protocol.errors import ErrorCode as E

from .memory_log import MemoryLog
from .test_abandoned_coordinator_requests import _parked_behind_markers
from .test_coordinator_leadership import TID, transaction_coordinator


class AppendingMarkers:
    """A marker writer that, like the local one, does its work in the call itself."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, bool, tuple[tuple[str, int], ...]]] = []

    def write(self, *marker: Any) -> Any:
        """``MarkerWriter.write``: (producer id, epoch, committed, coordinator epoch,
        partitions)."""
        producer_id, _, committed, _, partitions = marker
        parts = tuple(partitions)
        self.sent.append((producer_id, committed, parts))
        return _answered(parts)


async def _answered(parts: tuple[tuple[str, int], ...]) -> dict[tuple[str, int], E]:
    return dict.fromkeys(parts, E.none)


def test_end_txn_returns_with_its_markers_written() -> None:
    """On the code before, the marker task asked for them in its first step, one loop turn
    after ``end_txn`` returned (and after the server had written the EndTxn answer)."""

    async def scenario() -> list[Any]:
        log = MemoryLog(partitions=3)
        markers = AppendingMarkers()
        coordinator = transaction_coordinator(log, cast(Any, markers))
        await coordinator.on_elected(partition_for(TID, 3), 0)
        init = await coordinator.init_producer_id(TID, 60_000, -1, -1)
        pid, epoch = init.producer_id, init.producer_epoch
        assert (await coordinator.add_partitions(TID, pid, epoch, [("orders", 0)])).error == (
            E.none
        )
        assert (await coordinator.end_txn(TID, pid, epoch, True)).error == E.none
        sent = list(markers.sent)  # in the step end_txn returned in, before any other
        await coordinator.stop()
        return sent

    assert asyncio.run(scenario()) == [(5000, True, (("orders", 0),))]


def test_a_parked_request_runs_again_one_turn_after_its_id_settles() -> None:
    """``_wake`` begins the parked request's retry; in the next loop turn its task has run
    it (still refused: the markers are held) and parked again. With ``asyncio.wait``, as
    before, the task resumed one turn later still."""

    async def scenario() -> bool:
        _, coordinator, markers, _, parked = await _parked_behind_markers()
        coordinator._wake(TID)
        assert TID not in coordinator._parked
        await asyncio.sleep(0)  # one turn: the parked task's wake-up was scheduled first
        parked_again = TID in coordinator._parked
        markers.hold = False
        async with asyncio.timeout(5):
            assert (await parked).error == E.none
        await coordinator.stop()
        return parked_again

    assert asyncio.run(scenario())
