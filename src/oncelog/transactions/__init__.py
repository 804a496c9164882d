"""Transactions: the coordinator's metadata state machine, its ``__transaction_state``
records and the pure coordinator shard (no I/O: the broker wires it to the log and the
markers)."""

from oncelog.transactions.coordinator import (
    CoordinatorResult,
    MarkerRequest,
    TransactionCoordinatorShard,
    TxnDescription,
    TxnListing,
    TxnResponse,
    client_error,
)
from oncelog.transactions.log_records import (
    TxnLogFormatError,
    TxnRecord,
    decode_key,
    decode_record,
    decode_value,
    encode_key,
    encode_value,
)
from oncelog.transactions.state import (
    VALID_PREVIOUS_STATES,
    TransactionMetadata,
    TxnState,
    TxnTransition,
    is_epoch_exhausted,
)

__all__ = [
    "VALID_PREVIOUS_STATES",
    "CoordinatorResult",
    "MarkerRequest",
    "TransactionCoordinatorShard",
    "TransactionMetadata",
    "TxnDescription",
    "TxnListing",
    "TxnLogFormatError",
    "TxnRecord",
    "TxnResponse",
    "TxnState",
    "TxnTransition",
    "client_error",
    "decode_key",
    "decode_record",
    "decode_value",
    "encode_key",
    "encode_value",
    "is_epoch_exhausted",
]
