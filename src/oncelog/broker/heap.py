"""Keep freed heap memory in the broker process for the next request (glibc's malloc).

A produce request carries up to a batch of about 1 MiB per partition (librdkafka's
``batch.size``; Kafka's default ``max.message.bytes``), and its bytes are copied a few
times between the socket and the segment file: the stream's read buffer, the frame, the
decoded records, the batch with its offsets assigned. Each copy is a fresh allocation of
that size. glibc serves an allocation above its mmap threshold (128 KiB until a freed
mapping raises it) from a new mapping, and gives the top of its heap back to the kernel
once more than its trim threshold is free there; either way the next request's buffer is
memory the kernel must fault in and zero page by page (256 pages per MiB) and take away
again after. ``perf`` on a broker answering one 1 MiB produce at a time (issue 12,
2026-11-25 10:46 UTC, load 1.4): page faults under ``memmove`` were about 40 % of its
samples, ``brk`` another 7 %; a produce with ``acks=1`` took 3.0 ms from send to answer,
1.5-1.7 ms with the thresholds below (as glibc's ``MALLOC_*_`` variables; either
threshold alone did not help: the other one still gave the memory back).

So a broker process keeps buffers up to ``mmap_threshold`` on its heap and keeps up to
``trim_threshold`` of free memory at its top. That memory stays in the process (it is
reused, not leaked); larger frames (up to ``socket.request.max.bytes``) are mapped and
unmapped as before. Where the C library is not glibc, nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

# glibc's malloc.h
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

MIB = 1024 * 1024


@dataclass(frozen=True)
class HeapRetention:
    """How much freed memory the process keeps for reuse."""

    mmap_threshold: int  # allocations up to this come from the heap, not a new mapping
    trim_threshold: int  # free memory at the heap's top kept before giving it back


# A 1 MiB batch and its copies stay on the heap; a few requests' worth of freed memory is
# kept. (4/2 MiB gave the same single-request figures as 64/16 MiB; the load of many
# producers holds more requests at once.)
BROKER_HEAP = HeapRetention(mmap_threshold=4 * MIB, trim_threshold=32 * MIB)


def retain_freed_heap(retention: HeapRetention = BROKER_HEAP) -> bool:
    """Apply ``retention`` to this process's malloc; False where it cannot be (no glibc,
    or a value glibc refuses: its mmap threshold is at most 32 MiB on 64-bit)."""
    mallopt = _glibc_mallopt()
    if mallopt is None:
        log.debug("no glibc mallopt: the heap is left as the C library keeps it")
        return False
    applied = bool(mallopt(_M_MMAP_THRESHOLD, retention.mmap_threshold)) and bool(
        mallopt(_M_TRIM_THRESHOLD, retention.trim_threshold)
    )
    if not applied:
        log.warning("glibc refused the heap retention %s", retention)
    return applied


def _glibc_mallopt() -> Callable[[int, int], int] | None:
    """glibc's ``mallopt(int, int)``, or None (musl has none that works, macOS no glibc)."""
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None
    mallopt = libc.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt
