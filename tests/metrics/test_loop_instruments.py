"""The event loop's own counters and histograms render exactly as prometheus_client's
instruments do for the same updates (only the ``_created`` times differ: each instrument
stamps its own creation)."""

from __future__ import annotations

import random
import re

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from oncelog.broker.loop_instruments import CounterFamily, HistogramFamily

BUCKETS = (0.0001, 0.0005, 0.001, 0.01, 0.5, 1.0, 30.0)


def _without_created_times(text: bytes) -> str:
    return re.sub(r"(_created(\{[^}]*\})?) \S+", r"\1 T", text.decode())


def test_the_exposition_is_prometheus_clients() -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    counter = Counter("c_requests", "Requests.", ["request"], registry=theirs)
    labelled = Histogram("h_seconds", "Times.", ["request"], buckets=BUCKETS, registry=theirs)
    plain = Histogram("f_seconds", "Fsyncs.", buckets=BUCKETS, registry=theirs)
    my_counter = CounterFamily("c_requests", "Requests.", ["request"])
    my_labelled = HistogramFamily("h_seconds", "Times.", ["request"], buckets=BUCKETS)
    my_plain_family = HistogramFamily("f_seconds", "Fsyncs.", buckets=BUCKETS)
    my_plain = my_plain_family.labels()
    for family in (my_counter, my_labelled, my_plain_family):
        ours.register(family)
    assert _without_created_times(generate_latest(theirs)) == _without_created_times(
        generate_latest(ours)
    ), "before any update"

    rng = random.Random(12)
    # Every bound itself (it falls in its own bucket), between bounds, above the last.
    amounts = [*BUCKETS, 0.0, 0.00049, 0.7, 31.0, *(rng.random() * 2 for _ in range(500))]
    for i, amount in enumerate(amounts):
        request = rng.choice(["Produce", "EndTxn", "AddPartitionsToTxn"])
        counter.labels(request).inc(i)
        my_counter.labels(request).inc(i)
        labelled.labels(request).observe(amount)
        my_labelled.labels(request).observe(amount)
        plain.observe(amount)
        my_plain.observe(amount)

    assert _without_created_times(generate_latest(theirs)) == _without_created_times(
        generate_latest(ours)
    )


def test_a_counter_refuses_to_go_down() -> None:
    """As prometheus_client's: a negative increment is a bug, said at once."""
    counter = CounterFamily("c_requests", "Requests.", ["request"]).labels("Produce")
    counter.inc(2)
    with pytest.raises(ValueError):
        counter.inc(-1)
    assert counter.value == 2
