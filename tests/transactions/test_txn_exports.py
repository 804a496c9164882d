"""Pin the public API of ``oncelog.transactions``: a change here is a deliberate one."""

from __future__ import annotations

import oncelog.transactions as txn


def test_exports() -> None:
    assert sorted(txn.__all__) == sorted(
        [
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
    )
    for name in txn.__all__:
        assert hasattr(txn, name), name
