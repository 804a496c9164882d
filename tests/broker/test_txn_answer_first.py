"""EndTxn is answered before its markers are appended (issue 12): the markers do not decide
the answer, so the answer must not wait for their appends. Driven in memory, with a
responder built as the server's is: a task that awaits the handler's task, then writes."""

from __future__ import annotations

import asyncio

from oncelog.coordinator_partitions import partition_for
from oncelog.protocol.errors import ErrorCode as E
from oncelog.transactions.state import TxnState

from .memory_log import MemoryLog
from .test_coordinator_leadership import TID, RecordingMarkers, transaction_coordinator

PARTITIONS = 1
PARTITION = partition_for(TID, PARTITIONS)


def test_end_txn_is_answered_before_its_markers_are_written() -> None:
    """Before: the marker task, begun in the step that found the PREPARE record durable,
    ran its first step (the appends) before the responder woke up, which then found the
    markers already sent."""

    async def scenario() -> None:
        log = MemoryLog(partitions=PARTITIONS)
        markers = RecordingMarkers()
        coordinator = transaction_coordinator(log, markers)
        sent_when_answered: list[int] = []
        await coordinator.on_elected(PARTITION, 0)
        init = await coordinator.init_producer_id(TID, 60_000, -1, -1)
        pid, epoch = init.producer_id, init.producer_epoch
        assert (await coordinator.add_partitions(TID, pid, epoch, [("orders", 0)])).error == E.none

        log.auto_durable = False  # the PREPARE record waits for its "fsync"
        handling = asyncio.ensure_future(coordinator.end_txn(TID, pid, epoch, True))

        async def respond() -> None:
            answer = await handling
            assert answer.error == E.none
            sent_when_answered.append(len(markers.sent))

        responder = asyncio.ensure_future(respond())
        await asyncio.sleep(0)  # the handler waits for durability, the responder for it
        assert not handling.done()
        log.auto_durable = True
        log.make_durable(PARTITION)
        await responder
        for _ in range(100):  # the markers follow, and the completion after them
            metadata = coordinator.shards[PARTITION].get(TID)
            if metadata is not None and metadata.state is TxnState.COMPLETE_COMMIT:
                break
            await asyncio.sleep(0.01)
        assert sent_when_answered == [0]
        assert len(markers.sent) == 1
        metadata = coordinator.shards[PARTITION].get(TID)
        assert metadata is not None and metadata.state is TxnState.COMPLETE_COMMIT
        await coordinator.stop()

    asyncio.run(scenario())
