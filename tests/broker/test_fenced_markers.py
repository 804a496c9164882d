"""A marker a partition refuses as stale (INVALID_PRODUCER_EPOCH: a newer producer epoch
wrote there; TRANSACTION_COORDINATOR_FENCED: a newer coordinator did).

Kafka's TransactionMarkerRequestCompletionHandler stops sending and leaves the transaction
prepared, for the newer coordinator to complete: so does a cluster's coordinator. On one
node no other coordinator exists and the transaction would stay prepared for good, so it
is completed; either way a WARNING names the transaction and the partition."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.broker.transaction_coordinator import MARKER_RETRY_S
from oncelog.client.connection import KafkaConnection
from oncelog.coordinator_partitions import partition_for
from oncelog.protocol.errors import ErrorCode
from oncelog.testing import EmbeddedBroker
from oncelog.transactions.state import TxnState

from ..cluster.coordination import (
    add_partitions,
    end_txn,
    init_producer_id,
    produce,
    txn_state,
    until,
    write_markers,
)
from .memory_log import MemoryLog
from .test_coordinator_leadership import TID, RecordingMarkers, transaction_coordinator

STALE = [ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced]


class RefusingMarkers(RecordingMarkers):
    """Partition leaders that write every marker but refuse it on ``refusing``."""

    def __init__(self, refusing: tuple[str, int], code: ErrorCode) -> None:
        super().__init__()
        self.refusing = refusing
        self.code = code

    async def write(
        self,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        coordinator_epoch: int,
        partitions: Iterable[tuple[str, int]],
    ) -> dict[tuple[str, int], ErrorCode]:
        outcomes = await super().write(
            producer_id, producer_epoch, committed, coordinator_epoch, partitions
        )
        return {tp: self.code if tp == self.refusing else code for tp, code in outcomes.items()}


def refused_warnings(
    caplog: pytest.LogCaptureFixture, partition: str, code: ErrorCode
) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING
        and all(name in r.getMessage() for name in (repr(TID), partition, code.name))
    ]


@pytest.mark.parametrize("code", STALE)
def test_a_cluster_coordinator_leaves_the_transaction_prepared_for_the_newer_one(
    caplog: pytest.LogCaptureFixture, code: ErrorCode
) -> None:
    caplog.set_level(logging.INFO, logger="oncelog.broker.transaction_coordinator")
    parts = (("orders", 0), ("orders", 1))

    async def scenario() -> tuple[TxnState, int, TxnState, list[Any], int]:
        log = MemoryLog(partitions=3)
        partition = partition_for(TID, 3)
        markers = RefusingMarkers(("orders", 1), code)
        stale = transaction_coordinator(log, markers)
        await stale.on_elected(partition, 4)  # a cluster's election
        init = await stale.init_producer_id(TID, 60_000, -1, -1)
        pid, epoch = init.producer_id, init.producer_epoch
        assert (await stale.add_partitions(TID, pid, epoch, list(parts))).error == ErrorCode.none
        assert (await stale.end_txn(TID, pid, epoch, True)).error == ErrorCode.none
        async with asyncio.timeout(5):
            while not markers.sent:
                await asyncio.sleep(0.01)
        await asyncio.sleep(MARKER_RETRY_S * 2)  # a retry, or the COMPLETE, would be done
        left = stale.shards[partition].get(TID)
        assert left is not None
        # the newer coordinator, elected on the same log, completes what it finds prepared
        stale.on_resigned(partition, 5)
        newer_markers = RecordingMarkers()
        newer = transaction_coordinator(log, newer_markers)
        await newer.on_elected(partition, 5)
        async with asyncio.timeout(5):
            while (completed := newer.shards[partition].get(TID)) is None or (
                completed.state is not TxnState.COMPLETE_COMMIT
            ):
                await asyncio.sleep(0.01)
        await stale.stop()
        await newer.stop()
        return left.state, len(markers.sent), completed.state, newer_markers.sent, pid

    left, sent, completed, newer_sent, pid = asyncio.run(scenario())
    assert (left, sent) == (TxnState.PREPARE_COMMIT, 1)  # not completed, not sent again
    assert refused_warnings(caplog, "orders-1", code)
    assert (completed, newer_sent) == (TxnState.COMPLETE_COMMIT, [(pid, 0, True, 5, parts)])


@pytest.fixture
def conn() -> Iterable[KafkaConnection]:
    settings = {"transaction.state.log.num.partitions": "1"}
    with EmbeddedBroker(settings) as embedded:
        admin = AdminClient({"bootstrap.servers": embedded.bootstrap_servers})
        admin.create_topics([NewTopic("t", 1)])["t"].result(20)
        with KafkaConnection(embedded.bootstrap_servers) as connection:
            yield connection


@pytest.mark.parametrize("code", STALE)
def test_one_node_completes_the_transaction_and_names_the_partition(
    conn: KafkaConnection, caplog: pytest.LogCaptureFixture, code: ErrorCode
) -> None:
    """An operator's WriteTxnMarkers at a newer producer epoch (or coordinator epoch: one
    node's is always 0) ends the producer's transaction on t-0 first; the coordinator's
    own marker is then refused. Left prepared, the id would answer
    CONCURRENT_TRANSACTIONS for good (a restart resends the marker to the same refusal)."""
    caplog.set_level(logging.INFO, logger="oncelog.broker.transaction_coordinator")
    error, pid, epoch = init_producer_id(conn, TID)
    assert error == ErrorCode.none
    assert add_partitions(conn, TID, pid, epoch, [("t", 0)]) == {("t", 0): ErrorCode.none}
    produced, _ = produce(
        conn, "t", 0, [b"v"], producer_id=pid, epoch=epoch, sequence=0, transactional_id=TID
    )
    assert produced == ErrorCode.none
    # a newer producer epoch, or a newer coordinator epoch, than the coordinator's marker
    marker_epoch, coordinator_epoch = (
        (epoch + 1, 0) if code == ErrorCode.invalid_producer_epoch else (epoch, 1)
    )
    written = write_markers(conn, pid, marker_epoch, False, coordinator_epoch, [("t", 0)])
    assert written == {("t", 0): ErrorCode.none}
    assert end_txn(conn, TID, pid, epoch, commit=True) == ErrorCode.none
    assert until(lambda: txn_state(conn, TID) == "CompleteCommit")
    assert refused_warnings(caplog, "t-0", code)
    assert init_producer_id(conn, TID)[0] == ErrorCode.none  # the id goes on
