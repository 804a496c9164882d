"""bench/pairs.py, the pure core that decides how bench/spark.py's goals are judged: the
order of interleaved runs and the ratios of their pairs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))  # the scripts import as top level

from pairs import describe, interleaved, ratio


def test_interleaved_reverses_every_other_round() -> None:
    runs = ["a", "b", "c"]
    orders = [interleaved(runs, r) for r in range(4)]
    assert orders == [runs, runs[::-1], runs, runs[::-1]]
    # over an even number of rounds each of a neighbouring pair goes first equally often
    firsts = [order.index("a") < order.index("b") for order in orders]
    assert firsts.count(True) == firsts.count(False)


def test_a_paired_ratio_is_the_median_of_the_rounds_ratios() -> None:
    baseline = [2.0, 2.2, 2.1, 2.4]  # seconds of the baseline, round by round
    connector = [2.1, 2.0, 2.3, 2.2]
    r = ratio(baseline, connector, paired=True)
    assert r.per_round == pytest.approx((2.0 / 2.1, 2.2 / 2.0, 2.1 / 2.3, 2.4 / 2.2))
    assert r.median == pytest.approx((2.0 / 2.1 + 2.4 / 2.2) / 2)  # the middle two of four
    assert (r.low, r.high) == (pytest.approx(2.1 / 2.3), pytest.approx(2.2 / 2.0))
    assert r.best == pytest.approx(2.0 / 2.0)  # what earlier sessions reported
    assert describe(r) == "  1.02 [0.91-1.10]    1.00"


def test_one_round_is_still_a_pair() -> None:
    r = ratio([2.0], [2.5], paired=True)
    assert r.per_round == (0.8,) and r.median == 0.8 and (r.low, r.high) == (0.8, 0.8)


def test_an_unpaired_ratio_is_of_the_medians_and_says_so() -> None:
    r = ratio([260.0, 250.0, 300.0], [134.0], paired=False)
    assert r.per_round == () and r.median == pytest.approx(260.0 / 134.0)
    assert r.low is None and "(unpaired)" in describe(r)


def test_paired_sides_of_different_rounds_are_refused() -> None:
    with pytest.raises(ValueError, match="paired sides of 2 and 1 rounds"):
        ratio([1.0, 2.0], [1.0], paired=True)
    with pytest.raises(ValueError):
        ratio([], [1.0], paired=False)
