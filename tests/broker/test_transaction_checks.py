"""What the transaction coordinator refuses, as Kafka refuses it, where accepting left a
transaction no marker would ever end (found by an audit against Kafka's coordinator):

- a transactional batch at an epoch the coordinator never handed out (above its own): the
  commit marker, at the coordinator's epoch, was refused by the partition, the
  transaction completed anyway, and the partition's LSO stayed behind the batch for good;
- a TxnOffsetCommit outside the producer's transaction (after its abort, or without
  AddOffsetsToTxn): it opened a transaction on the group's offsets partition, and every
  ``require_stable`` OffsetFetch answered UNSTABLE_OFFSET_COMMIT for good;
- an internal topic added to a transaction by a client;

and what it answers a write that meets a transaction whose markers are being written: the
retriable CONCURRENT_TRANSACTIONS (a produce: NOT_ENOUGH_REPLICAS), not INVALID_TXN_STATE,
which made the producer abort.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.broker.broker import Broker
from oncelog.broker.internal_topics import CONSUMER_OFFSETS
from oncelog.broker.transactional_writes import ensure_still_open
from oncelog.client.connection import KafkaConnection
from oncelog.cluster.txn_verification import Admission
from oncelog.producers.snapshot import decode_state, encode_snapshot
from oncelog.producers.state import ProducerStateEntry, ProducerStateManager
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.testing import EmbeddedBroker

from ..cluster.coordination import (
    add_offsets,
    add_partitions,
    end_txn,
    init_producer_id,
    list_offset,
    produce,
    stable_offset,
    txn_offset_commit,
    txn_state,
    until,
)

SETTINGS = {"transaction.state.log.num.partitions": "1", "offsets.topic.num.partitions": "1"}
TID, GROUP = "x", "g"


@pytest.fixture
def served() -> Iterator[tuple[Broker, KafkaConnection]]:
    """A broker with topic t, and a connection to it."""
    with EmbeddedBroker(SETTINGS) as embedded:
        admin = AdminClient({"bootstrap.servers": embedded.bootstrap_servers})
        admin.create_topics([NewTopic("t", 1)])["t"].result(20)
        with KafkaConnection(embedded.bootstrap_servers) as connection:
            assert embedded.broker is not None
            yield embedded.broker, connection


@pytest.fixture
def conn(served: tuple[Broker, KafkaConnection]) -> KafkaConnection:
    return served[1]


def init(conn: KafkaConnection) -> tuple[int, int]:
    code, pid, epoch = init_producer_id(conn, TID)
    assert code == ErrorCode.none
    return pid, epoch


def test_a_batch_at_an_epoch_above_the_coordinators_is_fenced(conn: KafkaConnection) -> None:
    pid, epoch = init(conn)
    assert add_partitions(conn, TID, pid, epoch, [("t", 0)]) == {("t", 0): ErrorCode.none}
    batch = {"producer_id": pid, "sequence": 0, "transactional_id": TID}
    assert produce(conn, "t", 0, [b"v"], epoch=epoch, **batch)[0] == ErrorCode.none
    assert produce(conn, "t", 0, [b"v"], epoch=epoch + 3, **batch)[0] == (
        ErrorCode.invalid_producer_epoch
    )
    assert end_txn(conn, TID, pid, epoch, commit=True) == ErrorCode.none
    # the record and its commit marker: the transaction is stable, read_committed sees it
    assert until(lambda: list_offset(conn, "t", 0, read_committed=True) == (ErrorCode.none, 2))


@pytest.mark.parametrize("transactional_id", [None, TID])
@pytest.mark.parametrize(
    ("expected_id", "expected_epoch", "answered"),
    [
        (-1, -1, ErrorCode.none),
        (7, -1, ErrorCode.invalid_request),  # an id without its epoch
        (-1, 3, ErrorCode.invalid_request),  # an epoch without its id
    ],
)
def test_init_producer_id_needs_both_or_neither_of_the_expected_id_and_epoch(
    conn: KafkaConnection,
    transactional_id: str | None,
    expected_id: int,
    expected_epoch: int,
    answered: ErrorCode,
) -> None:
    """KafkaApis.handleInitProducerIdRequest checks the pair before the coordinator, with
    or without a transactional id."""
    answer = conn.request(
        ApiKey.INIT_PRODUCER_ID,
        {
            "transactional_id": transactional_id,
            "transaction_timeout": 60_000,
            "producer_id": expected_id,
            "producer_epoch": expected_epoch,
        },
    )
    assert answer.error_code == answered
    assert (answer.producer_id >= 0) == (answered == ErrorCode.none)


class HeldMarkers:
    """The broker's marker writer, holding every marker until ``release``: the transaction
    stays PREPARE_COMMIT/PREPARE_ABORT meanwhile."""

    def __init__(self, broker: Broker) -> None:
        self._released = threading.Event()  # set from the test's thread
        self._write = broker.local_markers.write
        broker.local_markers.write = self._held_write  # type: ignore[method-assign]

    async def _held_write(self, *marker: Any) -> Any:
        while not self._released.is_set():
            await asyncio.sleep(0.01)
        return await self._write(*marker)

    def release(self) -> None:
        self._released.set()


def verify(conn: KafkaConnection, pid: int, epoch: int, topic: str, index: int) -> ErrorCode:
    """A partition leader's question to the coordinator (AddPartitionsToTxn v4
    verify_only): is the partition in the producer's ongoing transaction?"""
    answer = conn.request(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        {
            "transactions": [
                {
                    "transactional_id": TID,
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "verify_only": True,
                    "topics": [{"name": topic, "partitions": [index]}],
                }
            ]
        },
        version=4,
    )
    (result,) = answer.results_by_transaction
    (partition,) = result.topic_results[0].results_by_partition
    return ErrorCode(partition.partition_error_code)


@pytest.mark.parametrize("commit", [True, False])
def test_a_write_meeting_a_completing_transaction_is_retried_not_aborted(
    served: tuple[Broker, KafkaConnection], commit: bool
) -> None:
    """Kafka's coordinator answers a verification of a PREPARE_* transaction
    CONCURRENT_TRANSACTIONS (handleVerifyPartitionsInTransaction), which the produce path
    answers NOT_ENOUGH_REPLICAS (ReplicaManager): every client retries the batch. Nothing
    is appended meanwhile, so the transaction completes as it was prepared."""
    broker, conn = served
    pid, epoch = init(conn)
    assert add_partitions(conn, TID, pid, epoch, [("t", 0)]) == {("t", 0): ErrorCode.none}
    assert add_offsets(conn, TID, pid, epoch, GROUP) == ErrorCode.none
    markers = HeldMarkers(broker)
    assert end_txn(conn, TID, pid, epoch, commit=commit) == ErrorCode.none
    batch = {"producer_id": pid, "epoch": epoch, "sequence": 0, "transactional_id": TID}
    assert produce(conn, "t", 0, [b"late"], **batch)[0] == ErrorCode.not_enough_replicas
    assert verify(conn, pid, epoch, "t", 0) == ErrorCode.concurrent_transactions
    # the group coordinator passes it on (handleOperationException)
    assert commit_offset(conn, pid, epoch) == ErrorCode.concurrent_transactions
    markers.release()
    # the marker alone: the late batch was not appended
    assert until(lambda: list_offset(conn, "t", 0, read_committed=True) == (ErrorCode.none, 1))
    assert stable_offset(conn, GROUP, "t", 0) == (ErrorCode.none, -1)


def commit_offset(conn: KafkaConnection, pid: int, epoch: int) -> ErrorCode:
    (code,) = txn_offset_commit(conn, TID, pid, epoch, GROUP, {("t", 0): 5}).values()
    return code


@pytest.mark.parametrize("added_then_aborted", [True, False])
def test_offsets_outside_the_transaction_are_refused(
    conn: KafkaConnection, added_then_aborted: bool
) -> None:
    pid, epoch = init(conn)
    if added_then_aborted:  # a commit sent before the abort, arriving after it
        assert add_offsets(conn, TID, pid, epoch, GROUP) == ErrorCode.none
        assert end_txn(conn, TID, pid, epoch, commit=False) == ErrorCode.none
        assert until(lambda: txn_state(conn, TID) == "CompleteAbort")  # its markers written
    assert commit_offset(conn, pid, epoch) == ErrorCode.invalid_txn_state
    # nothing was left open on the offsets partition: the group's offsets are stable
    assert stable_offset(conn, GROUP, "t", 0) == (ErrorCode.none, -1)


def test_offsets_inside_the_transaction_commit(conn: KafkaConnection) -> None:
    pid, epoch = init(conn)
    assert add_offsets(conn, TID, pid, epoch, GROUP) == ErrorCode.none
    assert commit_offset(conn, pid, epoch) == ErrorCode.none
    assert stable_offset(conn, GROUP, "t", 0)[0] == ErrorCode.unstable_offset_commit
    assert end_txn(conn, TID, pid, epoch, commit=True) == ErrorCode.none
    assert until(lambda: stable_offset(conn, GROUP, "t", 0) == (ErrorCode.none, 5))


@pytest.mark.parametrize("internal", ["__transaction_state", "__consumer_offsets"])
def test_a_client_cannot_add_an_internal_topic(conn: KafkaConnection, internal: str) -> None:
    pid, epoch = init(conn)
    assert add_partitions(conn, TID, pid, epoch, [(internal, 0), ("t", 0)]) == {
        (internal, 0): ErrorCode.topic_authorization_failed,
        ("t", 0): ErrorCode.operation_not_attempted,
    }


@pytest.mark.parametrize(
    ("refusal", "answered"),
    [
        # the coordinator loading or moving: retried by every client, as Kafka answers it
        (ErrorCode.not_enough_replicas, ErrorCode.coordinator_not_available),
        (ErrorCode.not_leader_or_follower, ErrorCode.not_coordinator),
        (ErrorCode.invalid_producer_epoch, ErrorCode.invalid_producer_epoch),
    ],
)
def test_a_refused_verification_is_answered_as_a_failed_offsets_write(
    served: tuple[Broker, KafkaConnection], refusal: ErrorCode, answered: ErrorCode
) -> None:
    """The produce path's verification codes become the group coordinator's
    (handleOperationException): NOT_ENOUGH_REPLICAS would make librdkafka abort."""
    broker, conn = served
    pid, epoch = init(conn)
    assert add_offsets(conn, TID, pid, epoch, GROUP) == ErrorCode.none

    def refuse(*_: object) -> None:
        raise KafkaError(refusal, "refused by the test's coordinator")

    broker.transactions.check_write = refuse  # type: ignore[method-assign]
    assert commit_offset(conn, pid, epoch) == answered
    assert stable_offset(conn, GROUP, "t", 0) == (ErrorCode.none, -1)


def test_a_question_not_asked_is_retried_not_failed() -> None:
    """One AddPartitionsToTxn entry per transactional id carries every question of the
    producer: when the coordinator refuses another partition of the entry, this one is
    OPERATION_NOT_ATTEMPTED, which every client would fail on; the write retries."""

    async def scenario() -> KafkaError:
        loop = asyncio.get_running_loop()
        verification: asyncio.Future[ErrorCode] = loop.create_future()
        verification.set_result(ErrorCode.operation_not_attempted)
        admission = Admission(verification, None, loop.create_future(), None, 0)
        with pytest.raises(KafkaError) as refused:
            await admission.wait()
        admission.done()
        return refused.value

    assert asyncio.run(scenario()).code == ErrorCode.not_enough_replicas


def test_the_transaction_is_checked_again_where_the_offsets_are_written(
    served: tuple[Broker, KafkaConnection],
) -> None:
    """Between the verification and the write the group's partition may be busy (its lock,
    its fsync): a marker ending the transaction can come in between. The check is made
    again in the step that appends: a transaction that ended meanwhile refuses the write."""
    broker, conn = served
    pid, epoch = init(conn)
    assert add_offsets(conn, TID, pid, epoch, GROUP) == ErrorCode.none
    checked = broker.transactions.check_write
    answers = iter([None, KafkaError(ErrorCode.invalid_txn_state, "ended meanwhile")])

    def ended_after_the_first_check(*args: Any) -> None:
        checked(*args)
        refusal = next(answers)
        if refusal is not None:
            raise refusal

    broker.transactions.check_write = ended_after_the_first_check  # type: ignore[method-assign]
    assert commit_offset(conn, pid, epoch) == ErrorCode.invalid_txn_state
    assert stable_offset(conn, GROUP, "t", 0) == (ErrorCode.none, -1)


def test_an_admission_compares_the_entry_it_held_after_a_restart() -> None:
    """After a restart a producer's entry is read from the snapshot, decoded anew on each
    look: an admission that only looked (``entries``) finds another object later and
    refuses the write INVALID_TXN_STATE, fatal to every client; one that holds the entry
    (what ``admit`` and TxnOffsetCommit take) finds the same and lets it go."""

    def restarted() -> tuple[Any, ProducerStateManager]:
        state = decode_state(encode_snapshot([ProducerStateEntry(7, producer_epoch=2)]))
        return SimpleNamespace(producers=state, topic=CONSUMER_OFFSETS, index=0), state

    partition, state = restarted()
    with pytest.raises(KafkaError) as refused:
        ensure_still_open(partition, 7, 2, state.entries.get(7))
    assert refused.value.code == ErrorCode.invalid_txn_state
    partition, state = restarted()
    ensure_still_open(partition, 7, 2, state.held(7))
