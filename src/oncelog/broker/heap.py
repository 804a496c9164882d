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
2026-11-25) found about 40 % of its samples in page faults under ``memmove``; with the
thresholds below a 1 MiB produce faults in 0-14 pages instead of 500-700
(tests/broker/test_heap_retention.py). What that does to throughput: README, "The Produce
path of 1 MiB batches" (issue 12).

So the broker process (``oncelog broker``, not a program that embeds a broker) keeps
buffers up to ``mmap_threshold`` on its heap and up to ``trim_threshold`` of free memory at
its top: reused, not leaked; README's memory bound counts it. Larger frames (up to
``socket.request.max.bytes``) are mapped and unmapped as before. Where the C library is not
glibc, or where the operator set glibc's own malloc variables, nothing changes. (Either
threshold alone did not help: the other one still gave the memory back. The page counts
assume transparent huge pages off or ``madvise``, the default of most distributions.)
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)

# glibc's malloc.h
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

MIB = 1024 * 1024

# glibc's own ways to set its malloc: an operator who used one keeps what they chose.
GLIBC_MALLOC_VARIABLES = (
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_MAX_",
)


@dataclass(frozen=True)
class HeapRetention:
    """How much freed memory the process keeps for reuse."""

    mmap_threshold: int  # allocations up to this come from the heap, not a new mapping
    trim_threshold: int  # free memory at the heap's top kept before giving it back


# A 1 MiB batch and its copies stay on the heap; a few requests' worth of freed memory is
# kept for the many producers' requests in flight at once.
BROKER_HEAP = HeapRetention(mmap_threshold=4 * MIB, trim_threshold=32 * MIB)


def retention_for(environ: Mapping[str, str]) -> HeapRetention | None:
    """The retention to apply in a process with this environment: None when the operator
    set glibc's malloc through its variables or its tunables (``GLIBC_TUNABLES`` naming
    ``glibc.malloc``), whose settings mallopt would otherwise overwrite."""
    if any(name in environ for name in GLIBC_MALLOC_VARIABLES):
        return None
    if "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""):
        return None
    return BROKER_HEAP


def retain_freed_heap(
    retention: HeapRetention | None,
    mallopt: Callable[[int, int], int] | None = None,
) -> bool:
    """Apply ``retention`` to this process's malloc (``mallopt``: glibc's, found here when
    not given); False where nothing was applied in full: no retention asked, no glibc, or a
    value glibc refused (logged with which one)."""
    if retention is None:
        log.info("the environment sets glibc's malloc: its settings are kept")
        return False
    mallopt = mallopt or _glibc_mallopt()
    if mallopt is None:
        log.debug("no glibc mallopt: the heap is left as the C library keeps it")
        return False
    for name, option, value in (
        ("mmap threshold", _M_MMAP_THRESHOLD, retention.mmap_threshold),
        ("trim threshold", _M_TRIM_THRESHOLD, retention.trim_threshold),
    ):
        if not mallopt(option, value):
            log.warning("glibc refused the heap's %s of %d bytes", name, value)
            return False
    return True


def _glibc_mallopt() -> Callable[[int, int], int] | None:
    """glibc's ``mallopt(int, int)``, or None (musl has none that works, macOS and Windows
    no glibc)."""
    try:
        libc = ctypes.CDLL(None)
    except (OSError, TypeError):  # TypeError: Windows takes no None
        return None
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None
    mallopt = libc.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt
