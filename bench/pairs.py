"""Interleaved runs and the ratios of their pairs: how bench/spark.py judges its goals.

On a shared 2-core machine two runs of the same thing differ by more than some of the
gaps being measured (exactly_once / at_least_once: 0.93, 0.95 and 1.05 in three
`--write-only --rounds 5` runs within 12 minutes, 2026-11-24 17:25-17:37 UTC, load average
0.0-5.0). A ratio of the best of each side hides that spread, and it lets the one lucky
round of either side decide. So the runs to compare are interleaved: within a round they
run next to each other, and the order is reversed every round (A B, B A, A B, ...: neither
side always follows the other, nor always runs first on a machine its predecessor warmed or
loaded; an even number of rounds puts each first equally often). Each round gives one
ratio; the goal is judged on the median of those ratios, printed with their lowest and
highest and with the ratio of the best of each side (what the earlier sessions reported).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


def interleaved(runs: Sequence[T], round_: int) -> list[T]:
    """`runs` in their order in even rounds, reversed in odd ones: neighbours stay
    neighbours, and each of a pair goes first in half of an even number of rounds."""
    return list(runs) if round_ % 2 == 0 else list(runs)[::-1]


@dataclass(frozen=True)
class PairedRatio:
    """A ratio of two sides: `median`, the median of the ratios of the rounds
    (`per_round`), or of the medians of the sides when they were not measured in pairs
    (`per_round` empty); `best`: the best of one side over the best of the other."""

    median: float
    best: float
    per_round: tuple[float, ...] = ()

    @property
    def low(self) -> float | None:
        return min(self.per_round) if self.per_round else None

    @property
    def high(self) -> float | None:
        return max(self.per_round) if self.per_round else None


def ratio(a: Sequence[float], b: Sequence[float], paired: bool) -> PairedRatio:
    """`a` over `b` (seconds or ms): when `paired` (the caller ran a[i] and b[i] next to
    each other in round i), the median of a[i] / b[i]; otherwise the median of `a` over that
    of `b` (a side measured once, such as a floor). `best` is min(a) / min(b)."""
    if not a or not b:
        raise ValueError("a ratio needs at least one value on each side")
    best = min(a) / min(b)
    if not paired:
        return PairedRatio(statistics.median(a) / statistics.median(b), best)
    if len(a) != len(b):
        raise ValueError(f"paired sides of {len(a)} and {len(b)} rounds")
    per_round = tuple(x / y for x, y in zip(a, b, strict=True))
    return PairedRatio(statistics.median(per_round), best, per_round)


def describe(r: PairedRatio) -> str:
    """`median [low-high] best`, or `median (unpaired) best`."""
    spread = (
        f"[{r.low:.2f}-{r.high:.2f}]" if r.low is not None and r.high is not None else "(unpaired) "
    )
    return f"{r.median:6.2f} {spread:<11}  {r.best:6.2f}"
