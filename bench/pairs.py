"""Interleaved runs and the ratios of their pairs: how bench/spark.py judges its goals.

On a shared 2-core machine two runs of the same thing differ by more than some of the
gaps being measured (exactly_once / at_least_once: 0.93, 0.95 and 1.05 in three
`--write-only` runs within 12 minutes, 2026-11-24). A ratio of the best of each side hides
that spread, and it lets the one lucky round of either side decide. So the runs to compare
are interleaved: within a round they run next to each other, and the order is reversed
every round (A B, B A, A B, ...: neither side always follows the other, nor always runs
first on a machine its predecessor warmed or loaded). Each round gives one ratio; the goal
is judged on the median of those ratios, printed with their lowest and highest and with
the ratio of the best of each side (what the earlier sessions reported).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


def interleaved(runs: Sequence[T], round_: int) -> list[T]:
    """`runs` in their order in even rounds, reversed in odd ones: neighbours stay
    neighbours, and each of a pair goes first in half of the rounds."""
    return list(runs) if round_ % 2 == 0 else list(runs)[::-1]


@dataclass(frozen=True)
class PairedRatio:
    """The ratios a[i] / b[i] of the rounds (`per_round`, empty when the two sides were not
    measured in the same rounds) and `best`: min(a) / min(b)."""

    per_round: tuple[float, ...]
    best: float
    unpaired_median: float | None = None  # median(a) / median(b) when there are no pairs

    @property
    def median(self) -> float:
        if not self.per_round:
            assert self.unpaired_median is not None  # set by ratio() when there are no pairs
            return self.unpaired_median
        return statistics.median(self.per_round)

    @property
    def low(self) -> float | None:
        return min(self.per_round) if self.per_round else None

    @property
    def high(self) -> float | None:
        return max(self.per_round) if self.per_round else None


def ratio(a: Sequence[float], b: Sequence[float]) -> PairedRatio:
    """`a` and `b` (seconds or ms, one value per round, or a single value) as a ratio: per
    round when both were measured in the same rounds, else of their medians (a side
    measured once, such as a floor)."""
    if not a or not b:
        raise ValueError("a ratio needs at least one value on each side")
    best = min(a) / min(b)
    if len(a) == len(b) and len(a) > 1:
        return PairedRatio(tuple(x / y for x, y in zip(a, b, strict=True)), best)
    return PairedRatio((), best, statistics.median(a) / statistics.median(b))


def describe(r: PairedRatio) -> str:
    """`median [low-high] best`, or `median (unpaired) best`."""
    spread = (
        f"[{r.low:.2f}-{r.high:.2f}]" if r.low is not None and r.high is not None else "(unpaired) "
    )
    return f"{r.median:6.2f} {spread:<11}  {r.best:6.2f}"
