"""Claims: how the exactly-once sink fences a zombie attempt without a transactional.id per
task slot, so that a Python worker keeps one transactional producer for every task it runs.

A transactional.id per task slot fenced zombies by construction (a new attempt's
`init_transactions()` bumps the slot's epoch), but PySpark hands tasks to its idle Python
workers first in, first out, so a slot moved to another worker in about two tasks of three,
and each move cost a new producer and an `init_transactions()` (18-60 ms, at times 507 ms;
docs/spark.md). Here a worker's producer has a transactional.id of its own (a *writer*,
`oncelog-sink-<uuid>`), used for tasks of any slot and any sink with the same client
configuration, and the fence is a *claim*.

The protocol, for task slot `k` of sink `S` writing batch `B` with writer `W` (`attempt`
below, a generator of the I/O steps: `writer.py` runs it against the cluster, the model
test against a simulated slot):

1. Read the slot's progress under read_committed (stable), waiting at most a few seconds:
   `N` and the claim `c` of the transaction that committed it (an offset in partition `k`
   of the progress topic). Skip or refuse as `sink.decide` says. If the read is held
   (another writer's open transaction added the progress: a dead attempt's, typically),
   take `c` from the last materialised progress instead and decide later.
2. Begin a transaction and produce the claim `(S, k, B, W)`, without a key, to partition `k`,
   inside the transaction; wait for its offset `o`.
3. Read partition `k` from `s = c + 1` (0 when no claim is recorded) up to `o`,
   read_uncommitted (claims of open and aborted transactions count). When that is more
   than `CLAIMS_READ_LIMIT` records or no claim is recorded, or `s` was deleted, look up
   the partition's last stable offset `L` (after step 2) and start at `max(s, L)` instead:
   every record below `L` belongs to a transaction whose markers are written, committed
   or aborted, so no claim there can still be fenced or still commit.
4. If another writer claimed slot `k` of `S` in the range read, or claims were skipped in
   step 3, or step 1 was held: read the progress again (stable: `latest`). A commit shows
   every claim below its own as settled (the invariant below); fence each other writer
   that claimed above `latest`'s claim (above `c` when `latest` is held):
   `init_transactions()` with its transactional.id bumps its epoch, which aborts its open
   transaction (or completes it, if its commit had begun: the call returns once the
   markers are written) and refuses anything it sends after. If anyone was fenced or
   `latest` was held, read the stable progress once more. Decide again on the last read.
5. Produce the batch, add the progress `B + 1` with the claim `o` and writer `W` to the
   transaction (a TxnOffsetCommit), commit.

A writer whose claim did not end in its own commit (failed, fenced, decided to skip after
claiming) is retired and closed: the worker makes a new writer with a new transactional.id.

A fence can reach a live writer. Step 4 fences the claims above `latest`'s claim (or `c`):
a writer whose claim committed after that read is fenced too, idle in its worker or busy
with a task of another slot or sink. That is safe (a transaction the fence aborts writes
nothing; its task fails and Spark runs it again), and rare (a commit must land between two
reads of another attempt of the same slot). A kept writer fenced while idle finds out at
its next claim, before anything is written: the worker then retires it and claims once more
with a new writer.

Why it writes each batch of a slot at most once. Call a claim *finished* when its
transaction committed or can never commit. Invariant: when a progress with claim `c` is
visible, every claim of the slot below `c` is finished. It holds for the first commit and
is kept by each commit `C` with claim `c'` that read claim `c`: claims below `c` are
finished, `c`'s own transaction committed, those in `(c, c')` below step 3's start were
finished when `L` was looked up, and step 4 settled or fenced every other writer in the
range read (`W`'s own earlier claims of this slot all ended in commits, which the stable
read already shows, so none is there). Lemma: commits of a slot happen in claim order, so
the progress only grows: if `X` claimed below `Y` and `Y` committed first, `X`'s claim was
below `Y`'s read progress (finished: `X` never commits after) or in `Y`'s range, where `Y`
fenced `X` (which then never commits) or saw it settled by a commit before its own.

Now take two attempts `A` (claim `a`) and `Z` (claim `z > a`) of the same slot that both
commit the progress `B + 1`. By the lemma `A` commits first. `Z`'s step 1 read a progress
with claim `c`. If `c > a`, `A` was finished before `Z` read, so it had committed: `Z` read
`N > B` and skipped (or refused), a contradiction. If `c < a`, `a` is in `Z`'s range: either
it was below `L` (finished at the lookup, committed, and step 4's read after the lookup
shows `N > B`), or a later read of `Z` (step 4) showed a claim `c2 >= a`, so `A` had
committed before it and `Z` decided on `N > B`, or `Z` fenced `A`'s writer before deciding:
`A` had committed by the time the fence returned (`Z`'s read after it shows `N > B`) or `A`
never commits. Either way only one of them writes batch `B`. A claim that is lost or never
acknowledged stops its attempt before it writes anything.

The decision rests on a stable read taken before the claim when nothing had to be settled:
any other commit of the slot after that read belongs to a claim that was unfinished at the
time, so in `(c, o)` (read, or finished below `L`: step 4 then runs) or above `o` (its
writer fenced `W`, whose commit then fails).

What the argument assumes of the progress topic (`ProgressTopicError` when it does not hold;
the sink creates the topic so that it does):

- Records are deleted by age only: `cleanup.policy=delete` (compaction keeps one record a
  key and could remove a claim before a later attempt reads it; claims have no key, which a
  compacted topic refuses) and no `retention.bytes` (a busy topic would delete recent claims).
- `retention.ms` longer than any transaction (`transaction.max.timeout.ms`, 15 minutes by
  default; the sink asks for `MIN_RETENTION_MS`), measured on the broker's clock:
  `message.timestamp.type=LogAppendTime`. Retention deletes whole segments up to the high
  watermark, not the last stable offset, and then raises the last stable offset to the new
  log start (Kafka's `UnifiedLog`), so a claim deleted while its transaction is still open
  is skipped as finished by step 3 and its transaction can still commit: the batch would be
  written twice. Under CreateTime a claim's age is the Spark worker's clock, and a claim
  stamped a day in the past (a skewed or resumed machine) is deletable at once. For the
  same reason nothing else may delete the topic's records: DeleteRecords on it, or a
  retention lowered below a day after the sink checked it, breaks the fence.
- An acknowledged claim survives a leader change: transactional producers use acks=all;
  on a cluster give the topic a replication factor of 3 and `min.insync.replicas=2`, as for
  any exactly-once data.

KIP-447 makes the same move for Kafka Streams: one producer per thread, the zombie fence
moved from the transactional.id to the consumer group's generation checked by the offset
commit inside the transaction; PySpark tasks join no group, so the slot's claims play the
generation.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass

from oncelog.spark import sink

CLAIM_FORMAT = 1
# read at most this many records of a slot's partition from the last commit's claim; a
# longer range (a slot idle while other sinks wrote there) starts at the last stable offset
CLAIMS_READ_LIMIT = 1000
MIN_RETENTION_MS = 7 * 24 * 3600 * 1000  # the progress topic's, as the sink creates it
# an existing progress topic keeping records for less than this is refused: it must keep a
# claim longer than any transaction lasts (transaction.max.timeout.ms, 15 min by default)
MIN_ACCEPTED_RETENTION_MS = 24 * 3600 * 1000
# the configuration the sink gives the progress topic it creates (strings, as CreateTopics)
PROGRESS_TOPIC_CONFIG = {
    "cleanup.policy": "delete",
    "retention.ms": str(MIN_RETENTION_MS),
    "retention.bytes": "-1",
    "message.timestamp.type": "LogAppendTime",
}


class ProgressTopicError(RuntimeError):
    """The progress topic's configuration breaks an assumption of the claims' argument."""


def check_progress_topic(topic: str, config: Mapping[str, str]) -> None:
    """Refuse a progress topic whose records may be deleted other than by age on the
    broker's clock, or sooner than a transaction may last (the module's assumptions)."""
    policy = {p.strip() for p in config.get("cleanup.policy", "delete").split(",")}
    retention_ms = int(config.get("retention.ms", str(MIN_RETENTION_MS)))
    retention_bytes = int(config.get("retention.bytes", "-1"))
    problems = []
    if "compact" in policy:
        problems.append(f"cleanup.policy={config['cleanup.policy']} (compaction can remove claims)")
    if retention_bytes >= 0:
        problems.append(f"retention.bytes={retention_bytes} (size-based deletion)")
    if 0 <= retention_ms < MIN_ACCEPTED_RETENTION_MS:
        problems.append(f"retention.ms={retention_ms} (below {MIN_ACCEPTED_RETENTION_MS})")
    timestamps = config.get("message.timestamp.type", "CreateTime")
    if timestamps != "LogAppendTime":
        problems.append(
            f"message.timestamp.type={timestamps} (a claim's age would be a client's clock)"
        )
    if problems:
        raise ProgressTopicError(
            f"the sink's progress topic {topic} has {', '.join(problems)}: the exactly-once "
            "sink needs claims kept by age on the broker's clock only, longer than any "
            "transaction. Set cleanup.policy=delete, retention.bytes=-1, retention.ms of a "
            "day or more and message.timestamp.type=LogAppendTime on it, or name a new topic "
            "in sink.progress.topic (the sink creates it so)."
        )


@dataclass(frozen=True)
class Claim:
    """An attempt's announcement that `writer` is about to write `batch` of a sink's slot."""

    sink_id: str
    slot: int
    batch: int
    writer: str  # the transactional.id of the producer that writes it

    def encode(self) -> bytes:
        return json.dumps(
            {
                "v": CLAIM_FORMAT,
                "sink": self.sink_id,
                "slot": self.slot,
                "batch": self.batch,
                "writer": self.writer,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> Claim | None:
        """A claim, or None for a record that is not one (another use of the topic)."""
        try:
            fields = json.loads(raw or b"")
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
        if not isinstance(fields, dict):
            return None
        sink_id, slot, batch, writer = (fields.get(k) for k in ("sink", "slot", "batch", "writer"))
        if not (
            isinstance(sink_id, str)
            and isinstance(slot, int)
            and isinstance(batch, int)
            and isinstance(writer, str)
        ):
            return None
        return cls(sink_id, slot, batch, writer)


def foreign_claims(
    records: Iterable[tuple[int, bytes | None]], sink_id: str, slot: int, writer: str
) -> list[tuple[int, str]]:
    """(offset, writer) of the claims of this slot of this sink by writers other than
    `writer` among `records` (offsets and values of the slot's progress partition)."""
    found = []
    for offset, raw in records:
        claim = Claim.decode(raw)
        if (
            claim is not None
            and claim.sink_id == sink_id
            and claim.slot == slot
            and claim.writer != writer
        ):
            found.append((offset, claim.writer))
    return found


def writers_to_fence(found: Iterable[tuple[int, str]], settled_below: int | None) -> list[str]:
    """The writers of `found` claims that may still commit: those above `settled_below`,
    the claim of a committed progress (every claim below it is finished), each once."""
    fence: dict[str, None] = {}
    for offset, writer in found:
        if settled_below is None or offset > settled_below:
            fence[writer] = None
    return list(fence)


# -- the protocol's steps, as values: the writer runs them, the model test simulates them --


class Wait(enum.Enum):
    """How long a stable progress read may wait for a transaction that holds it."""

    SHORT = "short"  # a few seconds, then the read is *held*: the step gets None
    LONG = "long"  # as long as a transaction may last


@dataclass(frozen=True)
class ReadProgress:
    """Read the slot's progress, stable (read_committed). Answer: `sink.Progress`, or None
    when a SHORT read was held."""

    wait: Wait


@dataclass(frozen=True)
class ReadMaterialised:
    """Read the slot's progress as last materialised (no wait). Answer: `sink.Progress`."""


@dataclass(frozen=True)
class ProduceClaim:
    """Begin the transaction and produce the claim in it. Answer: `Claimed`."""


@dataclass(frozen=True)
class Claimed:
    """ProduceClaim's answer: the claim's offset and the writer that made it (a kept writer
    found fenced is replaced by a new one before anything is written)."""

    offset: int
    writer: str


@dataclass(frozen=True)
class LookUpStableOffset:
    """Look up the last stable offset of the slot's progress partition. Answer: an int."""


@dataclass(frozen=True)
class ReadClaims:
    """Read the records of the slot's partition in [start, end), read_uncommitted. Answer:
    their (offset, value) pairs, or GONE when `start` is below the log start."""

    start: int
    end: int


class Gone(enum.Enum):
    """ReadClaims' answer when its start was deleted: a value of its own, which no other
    answer (a list of records, a progress, an offset, a fence's None) can be mistaken for."""

    GONE = "gone"


GONE = Gone.GONE


@dataclass(frozen=True)
class Fence:
    """Fence the writer with this transactional.id. Answer: None."""

    writer: str


Step = ReadProgress | ReadMaterialised | ProduceClaim | LookUpStableOffset | ReadClaims | Fence


@dataclass(frozen=True)
class Proceed:
    """The attempt writes: produce the batch, then add `decision`'s progress with the claim."""

    decision: sink.Write
    progress: sink.Progress
    claim: int


@dataclass(frozen=True)
class Stop:
    """The attempt writes nothing: skip (the batch is written) or refuse. `claimed`: its
    transaction holds a claim, to be aborted and its writer retired."""

    decision: sink.Skip | sink.Refuse
    progress: sink.Progress
    claimed: bool


Outcome = Proceed | Stop

Answer = sink.Progress | Claimed | int | list[tuple[int, bytes | None]] | Gone | None


def attempt(sink_id: str, slot: int, batch: int) -> Generator[Step, Answer, Outcome]:
    """The protocol of this module for one attempt, as the steps it takes: each `Step` is
    sent the answer of the cluster; the return value is what the attempt does."""
    first_read = yield ReadProgress(Wait.SHORT)
    held = first_read is None
    decision: sink.Decision | None = None  # on step 1's read, when it was not held
    if isinstance(first_read, sink.Progress):
        decision = sink.decide(first_read, batch, slot)
        if not isinstance(decision, sink.Write):
            return Stop(decision, first_read, claimed=False)
        progress = first_read
    else:
        progress = _progress((yield ReadMaterialised()))
    since = progress.claim
    claimed = yield ProduceClaim()
    if not isinstance(claimed, Claimed):
        raise TypeError(f"a claim answered {claimed!r}")
    claim = claimed.offset
    if since is not None and since >= claim:
        return Stop(
            sink.Refuse(
                f"task {slot}: its progress records claim {since}, at or beyond the end of "
                "its progress partition: was the progress topic deleted and made again? "
                "Use a new sink.id"
            ),
            progress,
            claimed=True,
        )
    start = 0 if since is None else since + 1
    read_from = start
    if since is None or claim - start > CLAIMS_READ_LIMIT:
        read_from = max(start, _offset((yield LookUpStableOffset())))
    records = yield ReadClaims(read_from, claim)
    if records is GONE and read_from == start:  # deleted by age: finished, see above
        read_from = max(start, _offset((yield LookUpStableOffset())))
        records = yield ReadClaims(read_from, claim)
    if not isinstance(records, list):
        return Stop(
            sink.Refuse(
                f"task {slot}: the claims of its slot from offset {read_from} of the progress "
                "topic were deleted while they could still be needed: the topic's retention "
                "is shorter than a transaction may last"
            ),
            progress,
            claimed=True,
        )
    found = foreign_claims(records, sink_id, slot, claimed.writer)
    if isinstance(decision, sink.Write) and not must_settle(found, skipped=read_from > start):
        return Proceed(decision, progress, claim)  # step 1's read stands
    latest = None if held else (yield ReadProgress(Wait.SHORT))
    settled_below = latest.claim if isinstance(latest, sink.Progress) else since
    fence = writers_to_fence(found, settled_below)
    for other in fence:
        yield Fence(other)
    if isinstance(latest, sink.Progress) and not must_reread(latest, fence):
        progress = latest
    else:
        progress = _progress((yield ReadProgress(Wait.LONG)))
    if progress.claim is not None and progress.claim > claim:
        return Stop(
            sink.Refuse(
                f"task {slot}: a later attempt of this task (a speculative copy or a retry) "
                "committed the slot after this one claimed it; this attempt writes nothing"
            ),
            progress,
            claimed=True,
        )
    decision = sink.decide(progress, batch, slot)
    if not isinstance(decision, sink.Write):
        return Stop(decision, progress, claimed=True)
    return Proceed(decision, progress, claim)


def must_settle(found: list[tuple[int, str]], skipped: bool) -> bool:
    """Whether step 4 runs on a read that was not held: another writer's claims were read,
    or finished claims were skipped (some may have committed since step 1's read)."""
    return bool(found) or skipped


def must_reread(latest: sink.Progress | None, fenced: list[str]) -> bool:
    """Whether step 4 decides on a stable read taken after the fences rather than on
    `latest`: when `latest` was held, or anyone was fenced (a fence completes a commit that
    had begun, which `latest` may not show)."""
    return latest is None or bool(fenced)


def _progress(answer: Answer) -> sink.Progress:
    if not isinstance(answer, sink.Progress):
        raise TypeError(f"a progress read answered {answer!r}")
    return answer


def _offset(answer: Answer) -> int:
    if not isinstance(answer, int):
        raise TypeError(f"an offset step answered {answer!r}")
    return answer
