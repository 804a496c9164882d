"""The fuzzer against a real broker process, as CI runs it: a fixed seed, a few thousand
cases over every advertised API version, every saved regression case, and a null in every
array of every request. Each fails on a broker death, a traceback in the broker's log, a
request with neither an answer nor a close within 5 s, a malformed batch acknowledged or
stored, or a control topic that does not read back intact (see :mod:`.harness`).

Longer runs: ``python -m tests.fuzz --cases 50000 --seed 1 --seed 2 --seed 3``.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from oncelog.testing import BrokerProcess

from .frames import build_frame, with_null
from .harness import ADVERTISED, BROKER_CONFIG, Case, FuzzRun, Summary, generate_cases
from .regressions import load_cases

CI_SEED = 20261122
CI_CASES = 3000


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path / "broker", BROKER_CONFIG) as running:
        yield running


def assert_clean(summary: Summary) -> None:
    report = "\n".join(
        f"{f.kind}: {f.detail[:800]}\n  {f.case.describe()[:800] if f.case else ''}"
        for f in summary.failures[:20]
    )
    assert not summary.failures, f"{len(summary.failures)} failures:\n{report}"


def run(broker: BrokerProcess, cases: Iterable[Case]) -> Summary:
    summary = FuzzRun(broker).run(cases)
    assert_clean(summary)
    return summary


@pytest.mark.slow
def test_fixed_seed_fuzz_run(broker: BrokerProcess) -> None:
    summary = run(broker, generate_cases(CI_SEED, CI_CASES))
    assert summary.cases == CI_CASES
    # every advertised API version was tried, valid requests were answered
    assert len(summary.by_api) == len(ADVERTISED)
    assert summary.outcomes["answered"] > summary.by_mutation["valid"] // 2


def test_saved_regression_cases(broker: BrokerProcess) -> None:
    saved = load_cases()
    assert saved, "tests/fuzz/cases/ holds the requests that once failed"
    cases = [
        Case(0, i, c.api, c.name, c.notes.get("mutation", ""), c.data) for i, c in enumerate(saved)
    ]
    run(broker, cases)


def null_array_cases() -> Iterator[Case]:
    """Each array of each advertised request, sent as null (allowed by the schema or not)."""
    index = 0
    for api in ADVERTISED:
        frames = [build_frame(*api, random.Random(seed)) for seed in range(6)]
        seen: set[str] = set()
        for frame in frames:
            for span in frame.spans:
                path = span.path.split("[")[0] + span.path.split("]")[-1]
                if span.kind != "array" or path in seen:
                    continue
                seen.add(path)
                index += 1
                yield Case(0, index, api, "null", span.path, with_null(frame, span))


def test_null_in_every_array_is_answered_or_refused(broker: BrokerProcess) -> None:
    """A forbidden null closes the connection at decode (as Kafka's parser does); an
    allowed one is handled: no `'NoneType' object is not iterable` in any handler."""
    summary = run(broker, null_array_cases())
    assert summary.cases > 200
    assert summary.outcomes["answered"] > 0 and summary.outcomes["closed"] > 0
