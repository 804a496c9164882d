"""Python's cyclic garbage collector paused around loops that build many objects.

A loop that makes thousands of containers (tuples, messages) sets off a collection every
700 allocations, and each collection traverses the young objects again; those that live
on are traversed again in the older generations. When none of them is in a reference
cycle, reference counting frees them anyway and the collections are pure cost: half of
the Spark range reader's CPU, a quarter of the producer-state replay at start-up.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["collector_paused"]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block, as it was after it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
