"""Wall-clock milliseconds: the only place the broker reads the time of day.

Cores never call this; they take `now_ms` as an argument, so tests can drive them with
any clock.
"""

from __future__ import annotations

import time


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000
