"""Replace a small file so that a crash leaves either its old or its new content."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from pathlib import Path


def write_atomically(path: Path, data: bytes) -> None:
    """Write to a temporary file, fsync it, rename it over `path`, fsync the directory."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


async def write_in_thread(
    write: Callable[[], None], stopping: threading.Event | None = None
) -> None:
    """Run ``write`` (checkpoint files) in a worker thread, off the event loop. A thread
    cannot be interrupted: when the awaiting task is cancelled (the broker stopping), the
    cancellation waits for the write to end, so that the stopping code neither closes what
    it reads nor writes the same temporary file beside it. A write of many files is told
    so through ``stopping``, set on cancellation, and should end after the file under way:
    on a loaded disk each fsync can take a second, and a broker stopping must not wait for
    one per partition (what has to be durable at a stop is written at close)."""
    writing = asyncio.ensure_future(asyncio.to_thread(write))
    try:
        await asyncio.shield(writing)
    except asyncio.CancelledError:
        if stopping is not None:
            stopping.set()
        await writing
        raise
