"""The fuzzer's judges can fail: each detector is shown catching what it is there for."""

from __future__ import annotations

import os
import random
import signal
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncelog.protocol.record_batch import Record, build_batch
from oncelog.testing import BrokerProcess

from .batches import DAMAGES, defect, values
from .harness import (
    BROKER_CONFIG,
    PROBE_CORRELATION_ID,
    Case,
    FuzzRun,
    _await_probe,
    _LogWatch,
)

BATCHES = [
    build_batch([Record(None, b"v")], timestamp_ms=1),
    build_batch([Record(b"k", b"v" * 300), Record(None, None)], timestamp_ms=1),
    build_batch(
        [Record(b"k%d" % i, b"x" * i) for i in range(20)],
        producer_id=7,
        producer_epoch=0,
        base_sequence=2**31 - 3,  # wraps inside the batch: allowed, as in Kafka
        timestamp_ms=1_700_000_000_000,
    ),
]
ALWAYS_MALFORMED = {
    "garbage-body",
    "bad-crc",
    "count",
    "last-offset-delta",
    "overlong-varint",
    "truncated",
    "magic",
    "control",
    "two-batches",
    "length-field",
    "empty",
}


@pytest.mark.parametrize("batch", BATCHES, ids=["one", "null-value", "twenty"])
def test_the_judge_accepts_what_a_producer_writes(batch: bytes) -> None:
    assert defect(batch) is None
    assert len(values(batch)) == struct.unpack_from(">i", batch, 57)[0]


@pytest.mark.parametrize("kind", sorted(ALWAYS_MALFORMED))
def test_the_judge_refuses_every_damage_that_is_always_malformed(kind: str) -> None:
    rng = random.Random(kind)
    for batch in BATCHES:
        for _ in range(20):
            damaged = DAMAGES[kind](batch, rng)
            assert defect(damaged) is not None, (kind, damaged.hex())


def test_stored_control_batches_are_allowed_but_not_from_clients() -> None:
    control = DAMAGES["control"](BATCHES[2], random.Random(0))
    assert defect(control) == "a control batch from a client"
    assert defect(control, from_client=False) is None


def test_the_log_watch_reports_whole_tracebacks_once(tmp_path: Path) -> None:
    log = tmp_path / "broker.log"
    log.write_text("INFO fine\n")
    watch = _LogWatch(log)
    watch.skip_to_end()
    with open(log, "a") as f:
        f.write("ERROR failed\nTraceback (most recent call last):\n  File")
    assert watch.new_tracebacks() == []  # the line is not complete yet
    with open(log, "a") as f:
        f.write(' "x.py", line 1\n')
    assert watch.new_tracebacks() == []  # nor the traceback: its exception line is missing
    with open(log, "a") as f:
        f.write("ValueError: boom\nINFO next\n")
    (found,) = watch.new_tracebacks()
    assert found.startswith("Traceback") and "ValueError: boom" in found
    assert watch.new_tracebacks() == []


def _probe_answer() -> bytes:
    return struct.pack(">ii", 4, PROBE_CORRELATION_ID)


@pytest.mark.parametrize(
    ("peer_sends", "close", "expected"),
    [
        (struct.pack(">ii", 4, 5) + _probe_answer(), False, ("answered", 1)),
        (_probe_answer(), False, ("answered", 0)),
        (b"", True, ("closed", 0)),
        (struct.pack(">ii", 4, 5), False, ("timeout", 1)),
    ],
    ids=["answered", "acks-0", "closed", "silent"],
)
def test_each_case_ends_answered_closed_or_timed_out(
    peer_sends: bytes, close: bool, expected: tuple[str, int]
) -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(peer_sends)
        if close:
            theirs.close()
        outcome, answers = _await_probe(ours, 0.3)
    assert (outcome, len(answers)) == expected


def test_a_dead_broker_is_a_failure(tmp_path: Path) -> None:
    def cases_then_a_crash(broker: BrokerProcess) -> Iterator[Case]:
        for index in range(4):
            if index == 3:
                os.kill(broker.pid, signal.SIGKILL)  # as kio's abort did
            yield Case(0, index, (18, 0), "valid", "", struct.pack(">hhih", 18, 0, index, -1))

    broker = BrokerProcess(tmp_path / "broker", BROKER_CONFIG).start()
    try:
        summary = FuzzRun(broker).run(cases_then_a_crash(broker))
    finally:
        broker.kill()
    assert [f.kind for f in summary.failures] == ["broker died"]
    assert summary.outcomes["answered"] == 3
