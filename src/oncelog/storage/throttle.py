"""A byte-rate limit for background I/O (Kafka's ``Throttler``, which the log cleaner uses
for ``log.cleaner.io.max.bytes.per.second``).

The cleaner reads and rewrites whole segments; on a disk shared with produce and fetch an
operator caps its rate so that compaction never takes the bandwidth the clients need. The
rate is measured over windows of ``check_interval_s`` (or of as many bytes as the limit
allows in that time, so that a short burst on a fast disk is held too): when a window went
faster than the limit, the caller sleeps until it would have taken as long as the limit
allows.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

CHECK_INTERVAL_S = 0.3  # Kafka's Throttler checks every 300 ms


class Throttler:
    """Counts bytes as they are done and waits when they go faster than ``max_bytes_per_s``
    (``sys.float_info.max``, Kafka's default, or infinity: never). ``wait(seconds)`` does
    the waiting and returns True to stop early (the cleaner passes its stop event's
    ``wait``, so an abort is never held up)."""

    def __init__(
        self,
        max_bytes_per_s: float,
        wait: Callable[[float], bool],
        clock: Callable[[], float] = time.monotonic,
        check_interval_s: float = CHECK_INTERVAL_S,
    ) -> None:
        if not max_bytes_per_s > 0:
            raise ValueError(f"a byte rate must be positive, not {max_bytes_per_s}")
        self._limit = max_bytes_per_s
        self._wait = wait
        self._clock = clock
        self._check_interval_s = check_interval_s
        self._window_start = clock()
        self._window_bytes = 0

    def done(self, nbytes: int) -> bool:
        """Account for ``nbytes`` just read or written; waits if the window ran too fast.
        True if the wait was cut short (the caller should stop)."""
        if self._limit >= sys.float_info.max:
            return False
        self._window_bytes += nbytes
        elapsed = self._clock() - self._window_start
        allowed_s = self._window_bytes / self._limit
        if max(elapsed, allowed_s) < self._check_interval_s:
            return False
        owed = allowed_s - elapsed
        stopped = False
        if owed > 0:
            stopped = self._wait(owed)
        self._window_start, self._window_bytes = self._clock(), 0
        return stopped
