"""A write task's input, read in a helper thread ahead of the task, up to a bound in bytes.

PySpark feeds a write task's Python worker through a socket, and the JVM's side of the task
(computing the rows, making Arrow batches) stops whenever the socket's buffer is full: a
few megabytes, a few milliseconds of rows. The exactly-once writer talks to the cluster
before it takes its first row (the progress read, the claim, the claims read: tens of
milliseconds for a new sink), and meanwhile the JVM stood still. Reading the input into
the worker's memory while the writer does so lets the JVM go on; afterwards the thread keeps
reading (pyarrow reads the socket without the GIL) while the task produces.

The bound keeps a task whose protocol waits long (a stable progress read held by another
writer's transaction waits up to seconds) from holding its whole input in memory: the
thread stops reading while the batches it holds reach the bound, and the JVM waits, as it
did before.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator

import pyarrow as pa

# What a task may hold read ahead: 32 MB, about 150,000 rows of 200 bytes, more than the
# JVM makes while a new sink's protocol runs. A batch larger than the bound is read alone.
READ_AHEAD_BYTES = 32 << 20


class _End:
    """The input ended, cleanly or with `error` (raised to the task when it gets there)."""

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


class ReadAhead(Iterator[pa.RecordBatch]):
    """The batches of `source` in order, read by a helper thread at most `limit_bytes`
    ahead of the caller. The caller must iterate to the end (the thread then has left
    `source`), or `close` it when it gives up (the thread stops at its next batch)."""

    def __init__(self, source: Iterator[pa.RecordBatch], limit_bytes: int) -> None:
        self._source = source
        self._limit = limit_bytes
        self._held: collections.deque[pa.RecordBatch | _End] = collections.deque()
        self._held_bytes = 0
        self._changed = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._read, name="oncelog-sink-input", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        end = _End(None)
        try:
            for batch in self._source:
                size = batch.nbytes
                with self._changed:
                    while self._held_bytes and self._held_bytes + size > self._limit:
                        if self._closed:
                            return
                        self._changed.wait()
                    if self._closed:
                        return
                    self._held.append(batch)
                    self._held_bytes += size
                    self._changed.notify_all()
        except BaseException as exc:  # handed to the task's thread, raised there
            end = _End(exc)
        with self._changed:
            self._held.append(end)
            self._changed.notify_all()

    def __next__(self) -> pa.RecordBatch:
        with self._changed:
            while not self._held:
                self._changed.wait()
            item = self._held[0]
            if isinstance(item, _End):
                self._thread.join()  # it appended the end last: it has left the source
                if item.error is not None:
                    raise item.error
                raise StopIteration
            self._held.popleft()
            self._held_bytes -= item.nbytes
            self._changed.notify_all()
            return item

    def close(self) -> None:
        """Stop reading ahead (the task failed): the thread stops before its next batch."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
