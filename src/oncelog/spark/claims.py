"""Claims: how the exactly-once sink fences a zombie attempt without a transactional.id per
task slot, so that a Python worker keeps one transactional producer for every task it runs.

A transactional.id per task slot fenced zombies by construction (a new attempt's
`init_transactions()` bumps the slot's epoch), but PySpark hands tasks to its idle Python
workers first in, first out, so a slot moved to another worker in about two tasks of three,
and each move cost a new producer and an `init_transactions()` (18-60 ms, at times 507 ms;
docs/spark.md). Here a worker's producer has a transactional.id of its own (a *writer*,
`oncelog-sink-<uuid>`), used for tasks of any slot and any sink with the same client
configuration, and the fence is a *claim*.

The protocol, for task slot `k` of sink `S` writing batch `B` with writer `W`:

1. Read the slot's progress under read_committed (stable): `N` and the claim `c` of the
   transaction that committed it (an offset in partition `k` of the progress topic). Skip
   or refuse as `sink.decide` says; nothing below happens then.
2. Begin a transaction and produce the claim `(S, k, B, W)` to partition `k` of the progress
   topic, inside the transaction; wait for its offset `o`.
3. Read partition `k` from `c + 1` (from its start when the progress records no claim) up to
   `o`, read_uncommitted (claims of open and aborted transactions count). If another writer
   claimed slot `k` of `S` there, read the progress again (stable): its claim `c2` settles
   every claim below it (see the invariant); fence each other writer that claimed above
   `c2`: `init_transactions()` with its transactional.id bumps its epoch, which aborts its
   open transaction (or completes it, if its commit had begun) and refuses anything it
   sends after.
4. If any writer was fenced, read the progress again (stable); decide again on the last
   read.
5. Produce the batch, add the progress `B + 1` with the claim `o` and writer `W` to the
   transaction (a TxnOffsetCommit), commit.

A writer whose claim did not end in its own commit (failed, fenced, decided to skip after
claiming) is retired: the worker makes a new writer with a new transactional.id. So every
claim of a live writer in a slot's range is the one it is working on, and fencing a claim
never disturbs a writer on another task.

Why it writes each batch of a slot at most once. Invariant: when a progress with claim `c`
is visible, every claim of the slot below `c` is *finished*: its transaction committed, or
it can never commit. It holds for the first commit (its step 3 read the partition from the
start) and is kept by each commit `C` with claim `c'`: claims below `c` are finished, `c`'s
own transaction committed, and step 3 settled or fenced every other writer in `(c, c')`
(`W`'s own
earlier claims of this slot all ended in commits, which the stable read already shows, so
none is in that range). Now take two attempts `A` (claim `a`) and `Z` (claim `z > a`) of
the same slot that both commit the progress `B + 1`. `Z`'s step 1 read a progress with claim
`c`. If `c > a`, `A` was finished before `Z` read, so `A` had committed: `Z` read `N > B` and
skipped (or refused), a contradiction. If `c < a`, `a` is in `Z`'s range: either a later
read of `Z` (step 3) showed a claim `c2 >= a`, so `A` had committed before it and `Z`
decides on a progress `N > B`, or `Z` fenced `A`'s writer before deciding: `A` had
committed by then (`Z`'s read in step 4 shows `N > B`) or `A` never commits. Either way only
one of them writes batch `B`. A
claim that is lost or never acknowledged stops its attempt before it writes anything.

The decision rests on a stable read taken before the claim when no one was fenced: any
other commit of the slot after that read belongs to a claim that was unfinished at the time,
so in `(c, o)` (fenced, and read again) or above `o` (its writer fenced `W`, whose commit
then fails). KIP-447 makes the same move for Kafka Streams: one producer per thread, the
zombie fence moved from the transactional.id to the consumer group's generation checked by
the offset commit inside the transaction; PySpark tasks join no group, so the slot's claims
play the generation.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

CLAIM_FORMAT = 1


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
        sink, slot, batch, writer = (fields.get(k) for k in ("sink", "slot", "batch", "writer"))
        if not (
            isinstance(sink, str)
            and isinstance(slot, int)
            and isinstance(batch, int)
            and isinstance(writer, str)
        ):
            return None
        return cls(sink, slot, batch, writer)


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


def writers_to_fence(found: Iterable[tuple[int, str]], committed_claim: int | None) -> list[str]:
    """The writers of `found` claims that may still commit: those above the claim of the
    slot's committed progress (every claim below it is finished), each once, in order."""
    fence: dict[str, None] = {}
    for offset, writer in found:
        if committed_claim is None or offset > committed_claim:
            fence[writer] = None
    return list(fence)
