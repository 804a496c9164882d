"""The sink's claims read (`writer._read_claims`) against a scripted consumer: transient
fetch errors are waited out, any other fails the task at once naming it, and a read that
cannot finish names the range and the last error. (Against a broker:
test_spark_producer_reuse.py.)"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from confluent_kafka import KafkaError, TopicPartition

import oncelog.spark.writer as writer_module
from oncelog.spark import claims
from oncelog.spark.options import parse_write_options
from oncelog.spark.writer import _read_claims

OPTIONS = parse_write_options(
    {"kafka.bootstrap.servers": "127.0.0.1:9", "topic": "out", "sink.id": "s"}
)


@dataclass
class _Message:
    offset_: int | None
    value_: bytes | None = None
    error_: KafkaError | None = None

    def error(self) -> KafkaError | None:
        return self.error_

    def offset(self) -> int | None:
        return self.offset_

    def value(self) -> bytes | None:
        return self.value_


@dataclass
class _ScriptedConsumer:
    """Hands out `script`'s batches, one per consume(); nothing once it is spent."""

    script: list[list[_Message]]
    assigned: list[list[TopicPartition]] = field(default_factory=list)

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned.append(partitions)

    def unassign(self) -> None:
        pass

    def consume(self, num_messages: int, timeout: float) -> list[_Message]:
        return self.script.pop(0) if self.script else []


def _read(script: list[list[_Message]]) -> list[tuple[int, bytes | None]] | None:
    return _read_claims(OPTIONS, _ScriptedConsumer(script), 0, 5, 8)  # type: ignore[arg-type]


@pytest.mark.parametrize("waited_out", [True, False])
def test_a_transient_fetch_error_is_waited_out(
    monkeypatch: pytest.MonkeyPatch, waited_out: bool
) -> None:
    """The control: with no error taken for transient, the same read fails."""
    if not waited_out:
        monkeypatch.setattr(writer_module, "TRANSIENT_READ_ERRORS", frozenset())
    script = [
        [_Message(None, error_=KafkaError(KafkaError._TRANSPORT))],
        [_Message(5, b"a"), _Message(6, b"b")],
        [_Message(8, b"mine")],
    ]
    if waited_out:
        assert _read(script) == [(5, b"a"), (6, b"b")]
    else:
        with pytest.raises(RuntimeError, match=r"Transport|TRANSPORT"):
            _read(script)


def test_an_authorization_failure_fails_at_once_naming_it() -> None:
    error = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(RuntimeError, match=r"TOPIC_AUTHORIZATION_FAILED|[Aa]uthoriz"):
        _read([[_Message(None, error_=error)], [_Message(8, b"mine")]])


def test_a_read_that_cannot_finish_names_its_range_and_last_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(writer_module, "TRANSACTION_TIMEOUT_S", 0.3)
    stuck = [[_Message(None, error_=KafkaError(KafkaError._TRANSPORT))]] * 50
    with pytest.raises(RuntimeError, match=r"offsets 5 to 8 .*last error") as failed:
        _read(stuck)
    assert "Transport" in str(failed.value) or "TRANSPORT" in str(failed.value)


def test_a_deleted_start_is_gone() -> None:
    error = KafkaError(KafkaError._AUTO_OFFSET_RESET)
    assert _read([[_Message(None, error_=error)]]) is claims.GONE
