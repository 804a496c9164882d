"""What a transactional write (a batch, or the offsets of a TxnOffsetCommit) is checked
against before it is appended, on one node and in a cluster alike (KIP-890 part 1): the
producer it carries, and, once its turn to append comes, that the producer's transaction
on the partition has not ended since the write was verified.

The coordinator's check itself is ``TransactionCoordinator.check_write`` (in process) or
a question to another broker (cluster/txn_verification.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Protocol

from oncelog.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from oncelog.broker.partition import Partition
    from oncelog.producers.state import ProducerStateEntry


class TransactionalProducer(Protocol):
    """What verification reads of a write: a batch's header, or a TxnOffsetCommit's
    producer."""

    @property
    def producer_id(self) -> int: ...

    @property
    def producer_epoch(self) -> int: ...


class OffsetsProducer(NamedTuple):
    """The producer of a TxnOffsetCommit, whose offsets are a transactional write to the
    group's ``__consumer_offsets`` partition and are verified as a batch is."""

    producer_id: int
    producer_epoch: int


def ensure_still_open(
    partition: Partition, producer_id: int, producer_epoch: int, before: ProducerStateEntry | None
) -> None:
    """INVALID_TXN_STATE if the producer's transaction on ``partition`` ended since its
    write was verified (``before``: the producer's entry then), so the write would open a
    transaction nobody will end; unchanged, or still open at the epoch, it may go."""
    entry = partition.producers.held(producer_id)
    if entry is before:
        return
    if (
        entry is None
        or entry.current_txn_first_offset is None
        or entry.producer_epoch != producer_epoch
    ):
        raise KafkaError(
            ErrorCode.invalid_txn_state,
            f"the transaction of producer {producer_id} ended while its write to "
            f"{partition.topic}-{partition.index} was being verified",
        )
