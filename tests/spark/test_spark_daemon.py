"""Python workers forked by `oncelog.spark.daemon` (the session's `spark.python.daemon.module`,
as `pipeline.job.new_session` sets it): they start with the connector imported, and what the
imports allocated is frozen out of the collector's reach, so PySpark's `gc.collect()` after
every task walks only what tasks allocated."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from typing import Any


def _worker_state(_: Iterator[int]) -> Iterator[tuple[str, int]]:
    """Run in a Python worker: the module its daemon (parent process) runs, and how many
    objects the collector has frozen."""
    import gc
    import os
    from pathlib import Path

    daemon_argv = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().split(b"\0")
    yield daemon_argv[daemon_argv.index(b"-m") + 1].decode(), gc.get_freeze_count()


def test_a_task_runs_in_a_worker_the_daemon_preloaded(spark: Any) -> None:
    states = spark.sparkContext.parallelize(range(4), 2).mapPartitions(_worker_state).collect()
    assert len(states) == 2
    assert {daemon for daemon, _ in states} == {"oncelog.spark.daemon"}
    # the modules' objects: about 48,000 (docs/spark.md); a worker PySpark's daemon forks has 0
    assert all(frozen > 10_000 for _, frozen in states)


def test_preload_imports_the_task_modules_and_freezes_them() -> None:
    """In a new interpreter, as Spark starts the daemon: every module of PRELOAD imported,
    objects frozen, nothing of the broker's protocol client (kio, hypothesis's hooks)."""
    probe = (
        "import gc, sys\nfrom oncelog.spark import daemon\ndaemon.preload()\n"
        "print((sorted(m for m in daemon.PRELOAD if m not in sys.modules), gc.get_freeze_count(),"
        " sorted(m for m in ('kio', 'hypothesis') if m in sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    missing, frozen, protocol_client = ast.literal_eval(done.stdout.strip())
    assert missing == []
    assert frozen > 10_000
    assert protocol_client == []
    from oncelog.spark.daemon import PRELOAD

    assert "oncelog.spark.writer" in PRELOAD and "pyspark.worker" in PRELOAD
