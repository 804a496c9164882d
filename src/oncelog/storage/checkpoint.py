"""Durable single-value checkpoint files (the partition's recovery point).

Written as Kafka writes its checkpoints (temporary file, fsync, rename, directory fsync;
see ``atomic_file``), so a crash leaves either the old or the new value.
Format: a version line (``0``) and the offset line.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from oncelog.storage.atomic_file import write_atomically

__all__ = ["fsync_directory", "read_checkpoint", "write_checkpoint"]

_VERSION = "0"
log = logging.getLogger(__name__)


def write_checkpoint(path: Path, offset: int) -> None:
    write_atomically(path, f"{_VERSION}\n{offset}\n".encode())


def read_checkpoint(path: Path) -> int | None:
    """The stored offset, or None when the file is missing or unreadable (then the
    caller recovers from the start, which is slow but safe)."""
    try:
        lines = path.read_text().split()
    except FileNotFoundError:
        return None
    if len(lines) == 2 and lines[0] == _VERSION and lines[1].lstrip("-").isdigit():
        return int(lines[1])
    log.warning("ignoring malformed checkpoint %s", path)
    return None


def fsync_directory(directory: Path) -> None:
    """Make created, renamed or deleted directory entries durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
