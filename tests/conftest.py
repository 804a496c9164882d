"""Suite-wide hooks."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

import oncelog.broker.durability as durability

from .fsync_pools import PythonFsyncPool


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On pytest-xdist workers, the files that hold slow scenarios come first.

    scripts/test.sh runs the suite on 2 workers, file by file, in collection order
    (`--dist loadfile --no-loadscope-reorder`). A slow file started late (the cluster's
    consume-transform-produce kill loop takes ~4 min) runs alone at the end while the other
    worker has nothing left; started first, the quick files fill the other worker around it.
    Order within a file is kept (the sort is stable), and a run in one process is untouched.
    """
    if not hasattr(config, "workerinput"):  # set by pytest-xdist on its workers only
        return
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


@pytest.fixture(autouse=True, scope="session")
def _heap_unfrozen_at_the_end() -> Iterator[None]:
    """Leave nothing frozen for the session's end (see `_destroy_unreferenced_clients`):
    a client a session fixture dropped is collected before the interpreter exits."""
    yield
    gc.unfreeze()
    gc.collect()


@pytest.fixture(autouse=True, scope="module")
def _collect_everything_once_per_file() -> Iterator[None]:
    """Once a file is done, collect what its module fixtures dropped: those objects were
    alive, hence frozen, when its tests ended, and only this collection can reach them."""
    yield
    gc.unfreeze()
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def _destroy_unreferenced_clients() -> Iterator[None]:
    """Collect the Kafka clients a test dropped while its broker is still known.

    A librdkafka handle only stops when it is destroyed; one left for interpreter exit keeps
    reconnecting to a broker that is gone and prints after pytest's summary.

    What survives the collection is then frozen (`gc.freeze`), so the next test's collection
    walks only what that test allocated. A full collection walks every object a worker
    holds (its imports, Spark, hypothesis, 2,000-odd collected tests): it cost 0.05-0.6 s
    per test (pytest's --durations teardown times, median 0.1 s in tests/records, load
    5), more than the tests themselves there (tests/records took 93 s, against 36 s
    frozen, on a loaded machine: load 4-7).
    """
    yield
    gc.collect()
    gc.freeze()


@pytest.fixture
def fsyncs_in_python(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Brokers started in the test fsync on Python threads through the log module's
    ``fsync_together`` (tests/fsync_pools.py), where the test injects its faults."""
    monkeypatch.setattr(durability, "FsyncPool", PythonFsyncPool)
    yield
