"""Counters and histograms updated on the event loop only, collected at scrape time.

prometheus_client's instruments are thread-safe: every ``inc`` takes a lock, checks that
the instrument is observable and goes through a value object, and ``observe`` walks its
buckets in Python. The broker's request path updates a few of them per request and the
flusher one per fsync: about 75 Python calls per transaction on the event-loop thread
(bench/txn_calls.py, issue 12). Everything that updates these runs on the loop, and so
does the scrape (metrics.py), so plain numbers suffice: an update is an addition, a
histogram's bucket is found by ``bisect`` (C). The samples are prometheus_client's own
(``_total`` and ``_created`` for a counter; cumulative ``_bucket``, ``_count``, ``_sum``
and ``_created`` for a histogram), so the exposition does not change. (``_created`` is
always written: prometheus_client's switch to leave it out, the environment variable
PROMETHEUS_DISABLE_CREATED_SERIES, does not apply to these.)
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from itertools import accumulate
from typing import Generic, TypeVar

from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

S = TypeVar("S")


class LoopCounter:
    """One counter series (one set of label values)."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:  # as prometheus_client: a counter only goes up
            raise ValueError(f"a counter cannot go down by {amount}")
        self.value += amount


class LoopHistogram:
    """One histogram series: ``counts[i]`` observations fell in bucket i alone (not
    cumulative); the last bucket is +Inf."""

    __slots__ = ("bounds", "counts", "created", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        # prometheus_client's rule: the first bucket whose upper bound is >= amount.
        self.counts[bisect_left(self.bounds, amount)] += 1
        self.sum += amount


class _Family(Generic[S]):
    """A metric with labels; ``labels(*values)`` is the series, made on first use."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._series: dict[tuple[str, ...], S] = {}

    def labels(self, *values: str) -> S:
        key = tuple(str(v) for v in values)
        if len(key) != len(self.labelnames):
            raise ValueError(f"{self.name}: labels {self.labelnames}, got {key}")
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = self._new_series()
        return series

    def _new_series(self) -> S:
        raise NotImplementedError


class CounterFamily(_Family[LoopCounter]):
    """A counter with labels."""

    def _new_series(self) -> LoopCounter:
        return LoopCounter()

    def collect(self) -> Iterator[Metric]:
        metric = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for key, series in self._series.items():
            metric.add_metric(key, series.value, created=series.created)
        yield metric


class HistogramFamily(_Family[LoopHistogram]):
    """A histogram with labels (none: ``labels()`` is its one series)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float],
    ) -> None:
        super().__init__(name, documentation, labelnames)
        bounds = [float(b) for b in buckets]
        if bounds != sorted(bounds):
            raise ValueError("buckets not in sorted order")
        if not bounds or bounds[-1] != math.inf:
            bounds.append(math.inf)
        self.bounds = tuple(bounds)

    def _new_series(self) -> LoopHistogram:
        return LoopHistogram(self.bounds)

    def collect(self) -> Iterator[Metric]:
        metric = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        bounds = [floatToGoString(bound) for bound in self.bounds]
        for key, series in self._series.items():
            cumulative = [float(total) for total in accumulate(series.counts)]
            metric.add_metric(key, list(zip(bounds, cumulative, strict=True)), series.sum)
            labels = dict(zip(self.labelnames, key, strict=True))
            metric.add_sample(self.name + "_created", labels, series.created)
        yield metric
