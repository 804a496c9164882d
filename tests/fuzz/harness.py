"""Run mutated requests against a real broker process and judge what happens.

One :class:`FuzzRun` drives a :class:`~oncelog.testing.BrokerProcess` over raw loopback
sockets. Before the cases it writes a control topic; then each case is a valid request of
an advertised API at an advertised version (:mod:`.frames`), mutated (:mod:`.mutations`),
sent on the current connection and followed by an ApiVersions probe. The case is over
when the probe is answered (the broker read past the case: it answered it, or it was an
acks=0 produce) or the connection is closed (the broker refused it, as Kafka does with a
request it cannot parse). A failure is any of:

- the broker process died;
- a traceback appeared in its log;
- neither an answer nor a close within 5 s (a Fetch whose decoded max_wait is longer is a
  long poll Kafka would keep too: counted apart, not a failure);
- a produced batch that :func:`.batches.defect` finds malformed was acknowledged, or is
  found stored when the fuzz topics are read back at the end;
- the control topic does not read back exactly as written.
"""

from __future__ import annotations

import random
import socket
import struct
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oncelog.client.connection import KafkaConnection, ProtocolClientError
from oncelog.protocol import codec
from oncelog.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey, is_supported
from oncelog.protocol.record_batch import Record, build_batch
from oncelog.testing import BrokerProcess

from .batches import defect, values
from .frames import Pools, build_frame
from .mutations import mutate

ANSWER_TIMEOUT_S = 5.0
PROBE_CORRELATION_ID = 0x7EADBEEF
CONTROL_TOPIC = "fuzz-control-topic"
CONTROL_PARTITIONS = 2
CONTROL_RECORDS = 50
FUZZ_TOPICS = ("fuzz-a", "fuzz-b", "fuzz-c")
# Settings that keep a run quick without hiding anything: a new group's first JoinGroup
# is answered at once instead of after Kafka's 3 s initial rebalance delay.
BROKER_CONFIG = {"group.initial.rebalance.delay.ms": "0", "num.partitions": "3"}
ADVERTISED = [
    (key, version)
    for key, (low, high) in sorted(SUPPORTED_VERSIONS.items())
    for version in range(low, high + 1)
]
_APIV_PROBE = codec.encode_request(codec.api_codec(ApiKey.API_VERSIONS, 0), 0, "probe", {})
_PROBE = _APIV_PROBE[:8] + struct.pack(">i", PROBE_CORRELATION_ID) + _APIV_PROBE[12:]


@dataclass(frozen=True, slots=True)
class Case:
    seed: int
    index: int
    api: tuple[int, int]
    mutation: str
    detail: str
    data: bytes  # the request without its size prefix

    @property
    def sent_api(self) -> tuple[int, int] | None:
        """The API and version the bytes announce (a mutation may have changed them), if
        the broker speaks it."""
        if len(self.data) < 4:
            return None
        key, version = struct.unpack_from(">hh", self.data)
        return (key, version) if is_supported(key, version) else None

    def describe(self) -> str:
        name = ApiKey(self.api[0]).name
        return (
            f"seed {self.seed} case {self.index}: {name} v{self.api[1]}, {self.mutation}"
            f" ({self.detail}), {len(self.data)} bytes: {self.data.hex()}"
        )


@dataclass(frozen=True, slots=True)
class Failure:
    kind: str
    detail: str
    case: Case | None = None


@dataclass
class Summary:
    cases: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    by_api: Counter[str] = field(default_factory=Counter)
    by_mutation: Counter[str] = field(default_factory=Counter)
    failures: list[Failure] = field(default_factory=list)
    batches_checked: int = 0
    elapsed_s: float = 0.0

    def add(self, other: Summary) -> None:
        self.cases += other.cases
        self.outcomes.update(other.outcomes)
        self.by_api.update(other.by_api)
        self.by_mutation.update(other.by_mutation)
        self.failures.extend(other.failures)
        self.batches_checked += other.batches_checked
        self.elapsed_s += other.elapsed_s

    def failure_counts(self) -> Counter[str]:
        return Counter(f.kind for f in self.failures)


# -- the run ----------------------------------------------------------------------------------


def generate_cases(seed: int, count: int) -> Iterator[Case]:
    """`count` mutated requests drawn from `seed`: an advertised API version each, picked
    uniformly, built valid and then mutated."""
    rng = random.Random(seed)
    pools = Pools(topics=FUZZ_TOPICS)
    for index in range(count):
        api = rng.choice(ADVERTISED)
        frame = build_frame(*api, rng, pools, correlation_id=index)
        mutated = mutate(frame, rng)
        yield Case(seed, index, api, mutated.kind, mutated.detail, mutated.data)


class FuzzRun:
    """Sends cases to `broker` (already started) and judges each; see the module doc."""

    def __init__(
        self,
        broker: BrokerProcess,
        progress: Callable[[str], None] | None = None,
        progress_every: int = 1000,
    ) -> None:
        self.broker = broker
        self.progress = progress
        self.progress_every = progress_every
        self.summary = Summary()
        self._log = _LogWatch(broker.log_path)
        self._socket: socket.socket | None = None

    def run(self, cases: Iterable[Case], total: int | None = None) -> Summary:
        started = time.monotonic()
        control = write_control_topic(self.broker)
        self._log.skip_to_end()
        for done, case in enumerate(cases, 1):
            self._one(case)
            if not self.broker.running:
                self._died(case)
                break
            if self.progress and done % self.progress_every == 0:
                self.progress(self._progress_line(done, total, started))
        self._close()
        try:
            self._check_stored_batches()
            self._check_control_topic(control)
        except (ProtocolClientError, OSError) as exc:
            if self._alive():
                self._fail("broker unreachable", f"reading the topics back: {exc}", None)
        if not self._alive() and not self.summary.failure_counts()["broker died"]:
            self._died(None)
        self._check_log(None)
        self.summary.elapsed_s = time.monotonic() - started
        return self.summary

    def _one(self, case: Case) -> None:
        self.summary.cases += 1
        self.summary.by_api[f"{ApiKey(case.api[0]).name} v{case.api[1]}"] += 1
        self.summary.by_mutation[case.mutation] += 1
        try:
            sock = self._connection()
        except OSError as exc:  # refused: the broker is gone (the run stops on it)
            self.summary.outcomes["no connection"] += 1
            self._fail("no connection", str(exc), case)
            return
        try:
            sock.sendall(struct.pack(">i", len(case.data)) + case.data + _PROBE)
            outcome, answers = _await_probe(sock, ANSWER_TIMEOUT_S)
        except OSError:
            outcome, answers = "closed", []
        if outcome == "timeout" and _is_long_poll(case):
            outcome = "long poll"
        self.summary.outcomes[outcome] += 1
        if outcome != "answered":
            self._close()
        if outcome == "timeout":
            self._fail("unanswered within 5 s", "neither an answer nor a close", case)
        if answers:
            self._check_acknowledged(case, answers[0])
        self._check_log(case)

    def _connection(self) -> socket.socket:
        if self._socket is None:
            self._socket = socket.create_connection(
                (self.broker.host, self.broker.port), timeout=ANSWER_TIMEOUT_S
            )
        return self._socket

    def _close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def _alive(self) -> bool:
        """Whether the broker process still runs. One just killed takes a moment to be
        reported as ended: when it refuses a connection, it gets up to 5 s to be."""
        try:
            socket.create_connection((self.broker.host, self.broker.port), timeout=2).close()
        except OSError:
            deadline = time.monotonic() + 5
            while self.broker.running and time.monotonic() < deadline:
                time.sleep(0.05)
        return self.broker.running

    def _died(self, case: Case | None) -> None:
        status = self.broker.terminate(check=False)
        self._fail("broker died", f"exit status {status}", case)

    def _fail(self, kind: str, detail: str, case: Case | None) -> None:
        self.summary.failures.append(Failure(kind, detail, case))

    def _check_log(self, case: Case | None) -> None:
        for traceback in self._log.new_tracebacks():
            self._fail("traceback in the broker log", traceback, case)

    def _check_acknowledged(self, case: Case, response_frame: bytes) -> None:
        """Every partition the broker acknowledged holds a batch the judge accepts."""
        sent = _produced_batches(case)
        if not sent or case.sent_api is None:
            return
        try:
            _, response = codec.decode_response(codec.api_codec(*case.sent_api), response_frame)
        except Exception as exc:  # the broker's answer must be readable
            self._fail("unreadable answer", f"{type(exc).__name__}: {exc}", case)
            return
        for topic in response.responses:
            for partition in topic.partition_responses:
                records = sent.get((topic.name, partition.index))
                if partition.error_code != 0 or records is None:
                    continue
                self.summary.batches_checked += 1
                problem = defect(records)
                if problem is not None:
                    where = f"{topic.name}-{partition.index}"
                    self._fail("malformed batch acknowledged", f"{where}: {problem}", case)

    def _check_stored_batches(self) -> None:
        """Read every fuzz partition back: nothing stored may be malformed (acks=0 too)."""
        with KafkaConnection(self.broker.bootstrap_servers, client_id="fuzz-check") as conn:
            for topic, partition, data in _read_all(conn, FUZZ_TOPICS):
                for batch in split_batches_loosely(data):
                    # base offset and leader epoch are the broker's, outside the CRC
                    problem = defect(batch, from_client=False)
                    if problem is not None:
                        self._fail(
                            "malformed batch stored", f"{topic}-{partition}: {problem}", None
                        )

    def _check_control_topic(self, written: dict[int, list[bytes]]) -> None:
        with KafkaConnection(self.broker.bootstrap_servers, client_id="fuzz-check") as conn:
            read: dict[int, list[bytes | None]] = {p: [] for p in written}
            for _, partition, data in _read_all(conn, (CONTROL_TOPIC,)):
                for batch in split_batches_loosely(data):
                    read[partition] += values(batch)
        if read != written:
            counts = {p: len(values) for p, values in read.items()}
            self._fail("control topic damaged", f"read back {counts} records", None)

    def _progress_line(self, done: int, total: int | None, started: float) -> str:
        elapsed = time.monotonic() - started
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(self.summary.outcomes.items()))
        return (
            f"{done}/{total or '?'} cases in {elapsed:.0f} s"
            f" ({1000 * elapsed / done:.1f} ms/case): {outcomes};"
            f" failures {len(self.summary.failures)}"
        )


# -- helpers ----------------------------------------------------------------------------------


def _await_probe(sock: socket.socket, timeout_s: float) -> tuple[str, list[bytes]]:
    """Read answers until the probe's; ("answered" | "closed" | "timeout", case answers)."""
    deadline = time.monotonic() + timeout_s
    answers: list[bytes] = []
    buffer = b""
    while True:
        while len(buffer) >= 4:
            (size,) = struct.unpack_from(">i", buffer)
            if len(buffer) < 4 + size:
                break
            frame, buffer = buffer[4 : 4 + size], buffer[4 + size :]
            if frame[:4] == struct.pack(">i", PROBE_CORRELATION_ID):
                return "answered", answers
            answers.append(frame)
        left = deadline - time.monotonic()
        if left <= 0:
            return "timeout", answers
        sock.settimeout(left)
        try:
            chunk = sock.recv(1 << 16)
        except TimeoutError:
            return "timeout", answers
        except OSError:
            return "closed", answers
        if not chunk:
            return "closed", answers
        buffer += chunk


def _decoded(case: Case) -> Any | None:
    """The request as the broker decodes it (None if it cannot be decoded)."""
    if case.sent_api is None:
        return None
    try:
        _, request = codec.decode_request(case.data, codec.api_codec(*case.sent_api))
    except (codec.MalformedRequest, KeyError):
        return None
    return request


def _is_long_poll(case: Case) -> bool:
    """A Fetch that asked to wait longer than the answer timeout: Kafka waits too."""
    request = _decoded(case) if case.api[0] == ApiKey.FETCH else None
    max_wait = getattr(request, "max_wait", None)
    return max_wait is not None and max_wait.total_seconds() >= ANSWER_TIMEOUT_S - 1


def _produced_batches(case: Case) -> dict[tuple[str, int], bytes]:
    """The records a Produce case sent, by partition. A partition named twice in one
    request is left out: its answers cannot be told apart (the read-back judges it)."""
    if case.sent_api is None or case.sent_api[0] != ApiKey.PRODUCE:
        return {}
    request = _decoded(case)
    if request is None or request.acks == 0:
        return {}
    sent: dict[tuple[str, int], bytes | None] = {}
    for topic in request.topic_data:
        for partition in topic.partition_data:
            key = (topic.name, partition.index)
            sent[key] = None if key in sent else bytes(partition.records or b"")
    return {key: records for key, records in sent.items() if records is not None}


def write_control_topic(broker: BrokerProcess) -> dict[int, list[bytes]]:
    """Create the control topic and write numbered records to it; what was written."""
    written: dict[int, list[bytes]] = {}
    with KafkaConnection(broker.bootstrap_servers, client_id="fuzz-control") as conn:
        conn.request(
            ApiKey.CREATE_TOPICS,
            {
                "topics": [
                    {
                        "name": CONTROL_TOPIC,
                        "num_partitions": CONTROL_PARTITIONS,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [],
                    }
                ],
                "timeout": 10_000,
                "validate_only": False,
            },
        )
        for partition in range(CONTROL_PARTITIONS):
            values = [b"control-%d-%d" % (partition, i) for i in range(CONTROL_RECORDS)]
            for start in range(0, CONTROL_RECORDS, 10):
                chunk = values[start : start + 10]
                batch = build_batch([Record(None, v) for v in chunk], timestamp_ms=1_700_000_000)
                response = conn.request(
                    ApiKey.PRODUCE,
                    {
                        "transactional_id": None,
                        "acks": -1,
                        "timeout": 10_000,
                        "topic_data": [
                            {
                                "name": CONTROL_TOPIC,
                                "partition_data": [{"index": partition, "records": batch}],
                            }
                        ],
                    },
                )
                error = response.responses[0].partition_responses[0].error_code
                if error != 0:
                    raise RuntimeError(f"control produce failed: {error}")
            written[partition] = values
    return written


def _read_all(conn: KafkaConnection, topics: tuple[str, ...]) -> Iterator[tuple[str, int, bytes]]:
    """(topic, partition, stored batches) for every partition of `topics`, from offset 0."""
    metadata = conn.request(
        ApiKey.METADATA,
        {"topics": [{"name": t} for t in topics], "allow_auto_topic_creation": False},
        version=4,
    )
    for topic in metadata.topics:
        if topic.error_code != 0:
            continue
        for partition in topic.partitions:
            offset = 0
            while True:
                data, high_watermark = _fetch(conn, topic.name, partition.partition_index, offset)
                if not data:
                    break
                yield topic.name, partition.partition_index, data
                # a stored batch with a bad last offset delta must not stop the read-back
                offset = max(_next_offset(data, offset), offset + 1)
                if offset >= high_watermark:
                    break


def _fetch(conn: KafkaConnection, topic: str, partition: int, offset: int) -> tuple[bytes, int]:
    response = conn.request(
        ApiKey.FETCH,
        {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 0,
            "max_bytes": 4 << 20,
            "isolation_level": 0,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": partition,
                            "fetch_offset": offset,
                            "partition_max_bytes": 4 << 20,
                        }
                    ],
                }
            ],
        },
        version=4,
    )
    answer = response.responses[0].partitions[0]
    return bytes(answer.records or b""), answer.high_watermark


def split_batches_loosely(data: bytes) -> list[bytes]:
    """The stored batches of a fetch answer (a cut last batch dropped, as clients do)."""
    batches, pos = [], 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        end = pos + 12 + length
        if length < 0 or end > len(data):
            break
        batches.append(data[pos:end])
        pos = end
    return batches


def _next_offset(data: bytes, offset: int) -> int:
    batches = split_batches_loosely(data)
    if not batches:
        return offset + 1
    last = batches[-1]
    base_offset, last_delta = (
        struct.unpack_from(">q", last)[0],
        struct.unpack_from(">i", last, 23)[0],
    )
    return base_offset + last_delta + 1


class _LogWatch:
    """New tracebacks in the broker's log since the last look."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def skip_to_end(self) -> None:
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def new_tracebacks(self) -> list[str]:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        # Whole lines only, and a traceback only once its exception line is written: an
        # unfinished one is read again next time.
        complete = data[: data.rfind(b"\n") + 1]
        last = complete.rfind(b"Traceback")
        if last >= 0 and not _ends_traceback(complete[last:]):
            complete = complete[:last]
        self.offset += len(complete)
        if b"Traceback" not in complete:
            return []
        text = complete.decode(errors="replace")
        return [("Traceback" + chunk)[:3000] for chunk in text.split("Traceback")[1:]]


def _ends_traceback(text: bytes) -> bool:
    """Whether a traceback's text holds its last line: the first unindented line after
    the heading (``ValueError: boom``)."""
    return any(line and not line[:1].isspace() for line in text.split(b"\n")[1:])
