"""The topic catalogue on disk: one small file per topic in `<data_dir>/topic-metadata/`.

Each file holds one topic's id, partition count and configuration overrides, written as
Kafka writes its checkpoints (temporary file, fsync, rename, directory fsync), so a crash
leaves a topic's old entry or its new one, never half of one. Creating or deleting a topic
writes or removes its own file only: creating N topics costs N small writes, where the
single `topics.json` of earlier versions was rewritten whole for every topic (quadratic:
the last 500 of 5,000 topics took 29 s). A data directory with a `topics.json` is
converted at start; the old file is removed once every entry has its own file.

The blocking calls (`write`, `remove`) belong off the event loop.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from oncelog.storage.atomic_file import write_atomically
from oncelog.storage.checkpoint import fsync_directory

log = logging.getLogger(__name__)

CATALOGUE_DIR = "topic-metadata"
LEGACY_CATALOGUE_FILE = "topics.json"
_SUFFIX = ".json"


class CatalogueError(Exception):
    """An entry of the catalogue cannot be read: the broker does not start (it would
    otherwise forget a topic, and with it the topic's data)."""


@dataclass(frozen=True)
class TopicEntry:
    """What the catalogue keeps of one topic: enough to reopen its partitions at start."""

    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str]

    def encode(self) -> bytes:
        return json.dumps(
            {
                "name": self.name,
                "id": str(self.topic_id),
                "partitions": self.partitions,
                "configs": self.configs,
            },
            indent=1,
        ).encode()

    @classmethod
    def decode(cls, data: bytes | str) -> TopicEntry:
        raw = json.loads(data)
        return cls(raw["name"], uuid.UUID(raw["id"]), int(raw["partitions"]), dict(raw["configs"]))


class TopicCatalogue:
    """The entries of one data directory: read all at start, written one topic at a time."""

    def __init__(self, data_dir: Path) -> None:
        self._data_dir = data_dir
        self._dir = data_dir / CATALOGUE_DIR

    def exists(self) -> bool:
        """Whether any topic was ever recorded here (a data directory in use)."""
        return (self._data_dir / LEGACY_CATALOGUE_FILE).exists() or self._dir.is_dir()

    def load(self) -> list[TopicEntry]:
        """Every topic's entry (converting a legacy `topics.json` first)."""
        self._convert_legacy()
        if not self._dir.is_dir():
            return []
        entries = []
        for path in sorted(self._dir.iterdir()):
            if path.name.endswith(".tmp"):
                path.unlink()  # a write that a crash interrupted: never acknowledged
                continue
            try:
                entry = TopicEntry.decode(path.read_bytes())
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise CatalogueError(
                    f"topic catalogue entry {path} cannot be read ({exc}); move it away to "
                    "start without that topic"
                ) from exc
            if path.name != _file_name(entry.name):
                raise CatalogueError(f"topic catalogue entry {path} names topic {entry.name!r}")
            entries.append(entry)
        return entries

    def write(self, entry: TopicEntry) -> None:
        """Record `entry` durably (blocking)."""
        created = not self._dir.is_dir()
        self._dir.mkdir(exist_ok=True)
        if created:
            fsync_directory(self._data_dir)
        write_atomically(self._dir / _file_name(entry.name), entry.encode())

    def remove(self, name: str) -> None:
        """Forget the topic `name` durably (blocking)."""
        (self._dir / _file_name(name)).unlink(missing_ok=True)
        fsync_directory(self._dir)

    def _convert_legacy(self) -> None:
        legacy = self._data_dir / LEGACY_CATALOGUE_FILE
        if not legacy.exists():
            return
        try:
            entries = [TopicEntry.decode(json.dumps(raw)) for raw in json.loads(legacy.read_text())]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CatalogueError(f"the topic catalogue {legacy} cannot be read ({exc})") from exc
        for entry in entries:
            self.write(entry)
        os.unlink(legacy)
        fsync_directory(self._data_dir)
        log.info("converted %s into %d entries in %s", legacy, len(entries), self._dir)


def _file_name(topic: str) -> str:
    return topic + _SUFFIX
