"""A write task's input that ended, told apart from one that was cut off.

PySpark (4.3) gives a Python data source's writer its task's rows as an iterator of Arrow
batches read from the Python worker's socket: `ArrowStreamSerializer.load_stream` iterates
`pyarrow.ipc.open_stream(infile)` (pyspark/sql/pandas/serializers.py), `infile` being the
socket's buffered file (pyspark/daemon.py `worker`, pyspark/worker.py `main`).

The JVM ends a complete input with Arrow's end-of-stream marker and then the int
END_OF_STREAM (-4): `PythonArrowInput`'s `close()` calls `ArrowStreamWriter.end()`, and
`BasePythonRunner.Writer.close` writes END_OF_STREAM into the same buffer
(core/.../api/python/PythonRunner.scala, `writeAdditionalInputToPythonWorker`); the worker
reads that int only after the writer has returned (pyspark/worker.py, after `process()`).
A JVM that gives the task up instead (its input iterator failed: an upstream stage's
error, a fetch failure, the task killed, `TaskKilledException` from an
`InterruptibleIterator`) closes the socket from the task's completion listener
(`PythonWorker.stop()`), with the worker alive; Spark 3.5's writer thread shut the
socket's output down likewise. The bytes it had sent end at a record batch's end (a buffer
is filled only between two `writeNextInputToStream` calls, and an input that fails inside
one leaves its batch unwritten) or inside a message whose rest was never sent (pyarrow
raises there). And pyarrow's stream reader takes an end of file at a message boundary for
the end of the stream: the writer's iterator then ends as if the input were complete. An
exactly-once task that committed then would make part of its input visible as the whole:
its retry skips the batch and fails on the row count (`sink.check_replay`), and the rest is
never written.

So, once the iterator has ended, `checked` looks at the next bytes of the worker's input
without taking them (`peek`): after a complete input END_OF_STREAM is there or on its way
(the JVM waits for the task's answer with the socket open); after a cut the stream is at
its end of file, and the task fails instead of committing.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Protocol

import pyarrow as pa


class InputCut(RuntimeError):
    """The task's Arrow input ended at the worker input's end of file, with no
    END_OF_STREAM after it: the JVM closed the input instead of completing it."""


class Peekable(Protocol):
    """The worker's input as `checked` needs it: the daemon's worker reads a
    `BufferedReader` (pyspark/daemon.py), the simple worker a `BufferedRWPair`
    (pyspark/worker_util.py); both peek without taking."""

    def peek(self, size: int = ..., /) -> bytes: ...


def checked(batches: Iterator[pa.RecordBatch], stream: Peekable) -> Iterator[pa.RecordBatch]:
    """`batches`; after the last one, InputCut if `stream` (the worker's input, past the
    Arrow stream) is at its end of file."""
    yield from batches
    if not stream.peek(1):
        raise InputCut(
            "the task's input ended without its end-of-stream marker: Spark closed the "
            "Python worker's input (the task failed upstream, or was killed), so the rows "
            "read are not the task's whole input; nothing of them is committed"
        )


def worker_input() -> Peekable | None:
    """The Python worker's input stream: the `infile` of `pyspark.worker.main` on the
    calling thread's stack (the data source's `write` runs below it); None when there is
    no such frame (not in a PySpark worker, or a PySpark that runs its workers otherwise),
    or when that stream cannot be peeked at."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        path = Path(code.co_filename)
        if code.co_name == "main" and path.name == "worker.py" and path.parent.name == "pyspark":
            stream = frame.f_locals.get("infile")
            return stream if callable(getattr(stream, "peek", None)) else None
        frame = frame.f_back
    return None
