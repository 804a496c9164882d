"""KIP-890 part 1 on a cluster: a partition leader appends a transactional batch only once
the transaction's coordinator confirms the partition is in the producer's ongoing
transaction.

On one node the coordinator is in process and the check runs in the same step as the
append. In a cluster it usually lives on another broker, so the leader asks it with
AddPartitionsToTxn ``verify_only`` (Kafka's AddPartitionsToTxnManager: one channel per
coordinator broker, many transactions per request), unless

- the producer already has an open transaction on this partition at this epoch (its first
  batch was verified, and the transaction has not ended since), or
- this broker coordinates the transactional id itself (checked in process).

While a batch waits for its answer, three things must hold:

- **Order.** Up to five produce requests of one producer may be in flight; the ones
  behind a waiting batch must not overtake it. Batches of one producer on one partition
  take turns (``Admission``): each is appended only after every earlier one is done.
- **The verified transaction is still the one open.** If a marker ends the transaction
  meanwhile (the coordinator aborted it on a timeout), the batch must not open a new
  transaction nobody will ever end. The producer's entry is remembered when the batch
  arrives; if it changed and no transaction is open any more, the batch is refused with
  INVALID_TXN_STATE (Kafka's verification guard).
- **Errors a client can act on**, as Kafka maps them for the produce response: the
  coordinator moving or loading, or the transaction busy, or the coordinator unreachable,
  is NOT_ENOUGH_REPLICAS (retried by every client, and true: nothing was appended);
  PRODUCER_FENCED is INVALID_PRODUCER_EPOCH.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from oncelog.broker.internal_topics import TRANSACTION_STATE
from oncelog.broker.transactional_writes import TransactionalProducer, ensure_still_open
from oncelog.cluster.peer_channel import BatchingChannel, Channels
from oncelog.coordinator_partitions import partition_for
from oncelog.protocol.api_versions import ApiKey
from oncelog.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from oncelog.broker.partition import Partition
    from oncelog.broker.transaction_coordinator import TransactionCoordinator
    from oncelog.cluster.node import ClusterNode
    from oncelog.producers.state import ProducerStateEntry

log = logging.getLogger(__name__)

ADD_PARTITIONS_VERSION = 4  # the first with verify_only and many transactions per request
MAX_TRANSACTIONS_PER_REQUEST = 500

# Verification failures as a producer must see them (Kafka's ReplicaManager and
# AddPartitionsToTxnManager).
_PRODUCE_ERRORS = {
    ErrorCode.concurrent_transactions: ErrorCode.not_enough_replicas,
    ErrorCode.coordinator_load_in_progress: ErrorCode.not_enough_replicas,
    ErrorCode.coordinator_not_available: ErrorCode.not_enough_replicas,
    ErrorCode.not_coordinator: ErrorCode.not_enough_replicas,
    # The coordinator could not be asked (its broker died, or restarted under a connection
    # made before): the batch was not appended, so a retry is safe. NETWORK_EXCEPTION would
    # make librdkafka abort the transaction (it cannot know the batch was not written).
    ErrorCode.network_exception: ErrorCode.not_enough_replicas,
    ErrorCode.producer_fenced: ErrorCode.invalid_producer_epoch,
    # Another question in the same request (one entry per transactional id) named a
    # partition the coordinator refused: this one was not asked. Kafka never answers it
    # here (it asks one question per entry); every client fails on it.
    ErrorCode.operation_not_attempted: ErrorCode.not_enough_replicas,
    # The coordinator refused this broker's question (its principal lacks ClusterAction):
    # not the client's to see, as Kafka's manager says.
    ErrorCode.cluster_authorization_failed: ErrorCode.invalid_txn_state,
}

TurnKey = tuple[str, int, int]  # topic, partition, producer id


def produce_error(verification_error: ErrorCode) -> ErrorCode:
    """A verification's refusal as the producer of the batch must see it, whether the
    coordinator answered in process or from another broker."""
    return _PRODUCE_ERRORS.get(verification_error, verification_error)


@dataclass(eq=False, slots=True)
class _Verification:
    """One producer's question to its coordinator about one partition."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    topic: str
    index: int
    answer: asyncio.Future[ErrorCode] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    def fail(self, code: ErrorCode) -> None:
        if not self.answer.done():
            self.answer.set_result(code)


class VerifyChannel(BatchingChannel[_Verification]):
    """AddPartitionsToTxn verify_only to one coordinator broker."""

    api_key = ApiKey.ADD_PARTITIONS_TO_TXN
    version = ADD_PARTITIONS_VERSION

    def _batch(
        self, queued: Sequence[_Verification]
    ) -> tuple[list[_Verification], list[_Verification]]:
        """One transaction per transactional id and request: questions about an id with
        another producer id or epoch wait for the next request."""
        batch: list[_Verification] = []
        rest: list[_Verification] = []
        producers: dict[str, tuple[int, int]] = {}
        for question in queued:
            producer = (question.producer_id, question.producer_epoch)
            known = producers.get(question.transactional_id)
            fits = known == producer or (
                known is None and len(producers) < MAX_TRANSACTIONS_PER_REQUEST
            )
            if fits:
                producers[question.transactional_id] = producer
                batch.append(question)
            else:
                rest.append(question)
        return batch, rest

    def _request(self, batch: Sequence[_Verification]) -> dict[str, Any]:
        transactions: dict[str, dict[str, Any]] = {}
        for q in batch:
            txn = transactions.setdefault(
                q.transactional_id,
                {
                    "transactional_id": q.transactional_id,
                    "producer_id": q.producer_id,
                    "producer_epoch": q.producer_epoch,
                    "verify_only": True,
                    "topics": {},
                },
            )
            partitions = txn["topics"].setdefault(q.topic, [])
            if q.index not in partitions:
                partitions.append(q.index)
        return {
            "transactions": [
                {**txn, "topics": [{"name": t, "partitions": p} for t, p in txn["topics"].items()]}
                for txn in transactions.values()
            ]
        }

    def _answer(self, batch: Sequence[_Verification], response: Any) -> None:
        if response.error_code != ErrorCode.none:
            self._fail(batch, ErrorCode(response.error_code))
            return
        codes = {
            (result.transactional_id, topic.name, p.partition_index): ErrorCode(
                p.partition_error_code
            )
            for result in response.results_by_transaction
            for topic in result.topic_results
            for p in topic.results_by_partition
        }
        for q in batch:
            q.fail(
                codes.get((q.transactional_id, q.topic, q.index), ErrorCode.unknown_server_error)
            )


class Admission:
    """A transactional batch's turn to be appended (see the module docstring). ``wait()``
    returns when it is the batch's turn and its verification passed (KafkaError with the
    code for the producer otherwise, once its turn came); ``done()`` hands the turn on."""

    def __init__(
        self,
        verification: asyncio.Future[ErrorCode] | None,
        previous: asyncio.Future[None] | None,
        mine: asyncio.Future[None],
        before: ProducerStateEntry | None,
        producer_epoch: int,
    ) -> None:
        self._verification = verification
        self._previous = previous
        self._mine = mine
        self._before = before
        self._epoch = producer_epoch

    async def wait(self) -> None:
        code = ErrorCode.none
        if self._verification is not None:
            code = await asyncio.shield(self._verification)
        if self._previous is not None:
            await asyncio.shield(self._previous)
        if code != ErrorCode.none:
            raise KafkaError(
                produce_error(code),
                f"the transaction coordinator did not confirm the partition: {code.name}",
            )

    def check_still_open(self, partition: Partition, producer_id: int) -> None:
        """INVALID_TXN_STATE if the producer's transaction ended since the batch arrived."""
        ensure_still_open(partition, producer_id, self._epoch, self._before)

    def done(self) -> None:
        """The batch was appended, or refused: the next one may go (once this one's
        predecessor went, should this batch leave early)."""
        if self._mine.done():
            return
        if self._previous is None or self._previous.done():
            self._mine.set_result(None)
        else:
            self._previous.add_done_callback(lambda _: self._mine.set_result(None))


class TxnVerifier:
    """Decides, per transactional batch, whether it may be appended at once or must wait
    for its ``Admission``."""

    def __init__(self, node: ClusterNode, coordinator: TransactionCoordinator) -> None:
        self._node = node
        self._coordinator = coordinator
        self._channels = Channels(node, VerifyChannel)
        self._turns: dict[TurnKey, asyncio.Future[None]] = {}
        # The question in flight per (topic, partition, producer id, epoch): later batches
        # of the same producer wait for the same answer.
        self._asking: dict[tuple[str, int, int, int], asyncio.Future[ErrorCode]] = {}

    async def stop(self) -> None:
        await self._channels.stop()

    def admit(
        self, transactional_id: str, producer: TransactionalProducer, partition: Partition
    ) -> Admission | None:
        """None: append now (KafkaError if the coordinator, here in process, refuses).
        Otherwise the batch waits for its Admission."""
        pid, epoch = producer.producer_id, producer.producer_epoch
        key = (partition.topic, partition.index, pid)
        before = partition.producers.held(pid)
        open_here = (
            before is not None
            and before.current_txn_first_offset is not None
            and before.producer_epoch == epoch
        )
        verification: asyncio.Future[ErrorCode] | None = None
        if not open_here:
            if self._coordinates(transactional_id):
                if key not in self._turns:
                    self._coordinator.check_write(
                        transactional_id, pid, epoch, partition.topic, partition.index
                    )
                    return None
                verification = self._checked_here(transactional_id, producer, partition)
            else:
                verification = self._ask(transactional_id, producer, partition)
        elif key not in self._turns:
            return None
        previous = self._turns.get(key)
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._turns[key] = mine
        mine.add_done_callback(lambda _: self._release(key, mine))
        return Admission(verification, previous, mine, before, epoch)

    def _release(self, key: TurnKey, turn: asyncio.Future[None]) -> None:
        if self._turns.get(key) is turn:
            del self._turns[key]

    def _coordinates(self, transactional_id: str) -> bool:
        return self._coordinator.partition_of(transactional_id) in self._coordinator.shards

    def _checked_here(
        self, transactional_id: str, producer: TransactionalProducer, partition: Partition
    ) -> asyncio.Future[ErrorCode]:
        answer: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        try:
            self._coordinator.check_write(
                transactional_id,
                producer.producer_id,
                producer.producer_epoch,
                partition.topic,
                partition.index,
            )
        except KafkaError as exc:
            answer.set_result(exc.code)
        else:
            answer.set_result(ErrorCode.none)
        return answer

    def _ask(
        self, transactional_id: str, producer: TransactionalProducer, partition: Partition
    ) -> asyncio.Future[ErrorCode]:
        pid, epoch = producer.producer_id, producer.producer_epoch
        asking_key = (partition.topic, partition.index, pid, epoch)
        pending = self._asking.get(asking_key)
        if pending is not None and not pending.done():
            return pending
        question = _Verification(transactional_id, pid, epoch, partition.topic, partition.index)
        self._asking[asking_key] = question.answer
        question.answer.add_done_callback(lambda _: self._asked(asking_key, question.answer))
        coordinator = self._coordinator_broker(transactional_id)
        if coordinator is None:
            question.fail(ErrorCode.coordinator_not_available)
        else:
            self._channels.to(coordinator).send(question)
        return question.answer

    def _asked(self, key: tuple[str, int, int, int], answer: asyncio.Future[ErrorCode]) -> None:
        if self._asking.get(key) is answer:
            del self._asking[key]

    def _coordinator_broker(self, transactional_id: str) -> int | None:
        cache = self._node.cache
        partitions = cache.partitions_of(TRANSACTION_STATE)
        if not partitions:
            return None
        leader = cache.live_leader(
            TRANSACTION_STATE, partition_for(transactional_id, len(partitions))
        )
        return None if leader is None else leader.broker_id
