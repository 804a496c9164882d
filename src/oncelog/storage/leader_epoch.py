"""A partition's leader epochs: at which offset each leader epoch started (KIP-101).

Every batch a leader appends carries its leader epoch; this cache keeps, for each epoch,
the first offset written in it, so that a follower can ask the leader "where did my latest
epoch end?" (OffsetsForLeaderEpoch) and cut a tail that was never replicated. Rules of
Kafka's ``LeaderEpochFileCache``:

- ``assign(epoch, start)`` records a new epoch; entries with an epoch or start offset at or
  above the new one are dropped first (they belonged to a tail that a truncation removed,
  or to epochs this replica never saw through).
- ``end_offset_for(epoch)`` answers OffsetsForLeaderEpoch: for the latest epoch, the log end
  offset; for an older one, the start offset of the first larger epoch, with the largest
  known epoch at or below the one asked for. An epoch older than every entry gets the first
  entry's start offset; one newer than every entry gets (-1, -1).
- Truncating the log at its end drops entries starting at or after the new end; moving the
  log start drops entries wholly below it.

Persisted in ``leader-epoch-checkpoint`` in Kafka's format (a version line ``0``, the count,
then ``epoch start-offset`` lines), rewritten atomically whenever it changes: rarely, once
per leader epoch. Cluster mode only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from oncelog.storage.atomic_file import write_atomically

__all__ = [
    "CHECKPOINT_FILE",
    "UNDEFINED_EPOCH",
    "UNDEFINED_OFFSET",
    "EpochEntry",
    "LeaderEpochCache",
]

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1
_VERSION = "0"


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """A leader epoch and the first offset written in it."""

    epoch: int
    start_offset: int


class LeaderEpochCache:
    """Kafka's LeaderEpochFileCache: each leader epoch's start offset, kept in
    ``leader-epoch-checkpoint`` (see the module docstring)."""

    def __init__(self, path: Path | None, entries: tuple[EpochEntry, ...] = ()) -> None:
        self._path = path
        self._entries = list(entries)

    @classmethod
    def load(cls, directory: Path, log_start_offset: int, log_end_offset: int) -> LeaderEpochCache:
        """Read the checkpoint of a partition directory and fit it to the log as recovered
        (a crash may have cut batches whose epoch had already been recorded)."""
        path = directory / CHECKPOINT_FILE
        cache = cls(path, _read(path))
        cache.truncate_from_end(log_end_offset)
        cache.truncate_from_start(log_start_offset)
        return cache

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        if epoch < 0:
            return
        latest = self._entries[-1] if self._entries else None
        if latest is not None and latest.epoch == epoch and latest.start_offset <= start_offset:
            return
        if latest is not None and epoch < latest.epoch:
            log.warning(
                "%s: epoch %d at %d is older than the latest epoch %d; dropping newer entries",
                self._path,
                epoch,
                start_offset,
                latest.epoch,
            )
        self._entries = [
            e for e in self._entries if e.epoch < epoch and e.start_offset < start_offset
        ]
        self._entries.append(EpochEntry(epoch, start_offset))
        self._save()

    def end_offset_for(self, requested: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetsForLeaderEpoch answers for ``requested``."""
        if requested == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if requested == self.latest_epoch:
            return requested, log_end_offset
        higher = next((e for e in self._entries if e.epoch > requested), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        floor = [e for e in self._entries if e.epoch <= requested]
        if not floor:
            return requested, higher.start_offset
        return floor[-1].epoch, higher.start_offset

    def truncate_from_end(self, end_offset: int) -> None:
        kept = [e for e in self._entries if e.start_offset < end_offset]
        if len(kept) != len(self._entries):
            self._entries = kept
            self._save()

    def truncate_from_start(self, start_offset: int) -> None:
        """Entries wholly below the new log start go; the one spanning it starts there."""
        below = [e for e in self._entries if e.start_offset < start_offset]
        if not below:
            return
        above = [e for e in self._entries if e.start_offset >= start_offset]
        if above and above[0].start_offset == start_offset:
            self._entries = above
        else:
            self._entries = [EpochEntry(below[-1].epoch, start_offset), *above]
        self._save()

    def clear(self) -> None:
        self._entries = []
        self._save()

    def _save(self) -> None:
        if self._path is None:
            return
        lines = [_VERSION, str(len(self._entries))]
        lines += [f"{e.epoch} {e.start_offset}" for e in self._entries]
        write_atomically(self._path, ("\n".join(lines) + "\n").encode())


def _read(path: Path) -> tuple[EpochEntry, ...]:
    try:
        lines = path.read_text().split("\n")
    except FileNotFoundError:
        return ()
    try:
        if lines[0] != _VERSION:
            raise ValueError(f"version {lines[0]!r}")
        count = int(lines[1])
        entries = []
        for line in lines[2 : 2 + count]:
            epoch, start = line.split()
            entries.append(EpochEntry(int(epoch), int(start)))
        if len(entries) != count:
            raise ValueError(f"{len(entries)} entries, {count} announced")
    except (ValueError, IndexError) as exc:
        # Losing the cache only costs precision: a follower then falls back to a larger
        # truncation (to the high watermark) on its next start.
        log.warning("ignoring malformed %s: %s", path, exc)
        return ()
    return tuple(entries)
