"""Kafka errors cross a process boundary intact (pickle, as multiprocessing sends them).

Exception's default pickling calls the class with ``args``, the formatted text: each class
here but MalformedRecords raised on load (KafkaError wants an ErrorCode, CorruptPayload a
codec), and MalformedRecords came back with its message prefixed twice.
"""

from __future__ import annotations

import pickle

import pytest

from oncelog.broker.coordinator_runtime import CoordinatorError
from oncelog.protocol.compression import ZSTD, CorruptPayload, PayloadTooLarge
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.record_batch import InvalidRecordBatch, MalformedRecords

ERRORS = [
    KafkaError(ErrorCode.not_leader_or_follower),
    KafkaError(ErrorCode.invalid_config, "segment.bytes must be at least 14"),
    CoordinatorError(ErrorCode.concurrent_transactions, "a marker is being written"),
    CorruptPayload(ZSTD, "unknown frame descriptor"),
    PayloadTooLarge(ZSTD, 1 << 20),
    InvalidRecordBatch(ErrorCode.invalid_record, "bad record", [(3, "null key")]),
    MalformedRecords("record 2 runs past the batch"),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_a_kafka_error_survives_pickling(error: KafkaError) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert (copy.code, copy.message, copy.args) == (error.code, error.message, error.args)
    assert vars(copy) == vars(error)  # record_errors too
    assert str(copy) == str(error)
    assert isinstance(copy, ValueError) == isinstance(error, ValueError)
