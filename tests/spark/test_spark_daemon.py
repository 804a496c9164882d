"""Python workers forked by `oncelog.spark.daemon` (`spark.python.daemon.module`, as
`pipeline.job.new_session` sets it): they start with the connector imported, what the
imports allocated is frozen out of the collector's reach (PySpark's `gc.collect()` after
every task then walks only what tasks allocated), and the connector's read and exactly-once
write run in them. The other Spark tests run under PySpark's own daemon (tests/spark/
conftest.py), what users get without the option."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from .spark_helpers import create_topic, produce_transaction, read_all, unique

JOB = Path(__file__).with_name("daemon_job.py")


def test_the_connector_runs_in_workers_the_daemon_preloaded(bootstrap: str) -> None:
    source = create_topic(bootstrap, unique("daemon-in"), partitions=3)
    target = create_topic(bootstrap, unique("daemon-out"), partitions=3)
    values = [b"d%03d" % i for i in range(300)]
    produce_transaction(bootstrap, source, values)
    done = subprocess.run(
        [sys.executable, str(JOB), bootstrap, source, target, unique("daemon-sink")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["count"] == len(values)
    assert sorted(read_all(bootstrap, target)) == values  # written once each
    workers = {
        pid: (daemon, frozen, json.loads(imported))
        for daemon, pid, frozen, imported, _ in result["workers"]
    }
    forked = {int(pid) for *_, siblings in result["workers"] for pid in json.loads(siblings)}
    # every worker of the data sources' daemon reported, those that ran the connector's
    # read and write tasks among them (Spark keeps its idle workers for a minute)
    assert len(workers) >= 2 and set(workers) == forked, (sorted(workers), sorted(forked))
    assert {daemon for daemon, _, _ in workers.values()} == {"oncelog.spark.daemon"}
    # the modules' objects: about 48,000 (docs/spark.md); a worker of pyspark.daemon has 0
    assert all(frozen > 10_000 for _, frozen, _ in workers.values())
    # nothing a connector task needs is imported after the fork
    assert {m for _, _, imported in workers.values() for m in imported} == set()


def test_a_module_that_does_not_import_is_reported_and_skipped() -> None:
    """The daemon still serves every Python task of the executor, as pyspark.daemon would;
    only what needs the module fails. Its standard output stays Spark's handshake."""
    probe = (
        "import gc, sys\nfrom oncelog.spark import daemon\n"
        "loaded = daemon.preload(('oncelog.no_such_module', 'json', 'this'))\n"
        "print(('json' in loaded, 'oncelog.no_such_module' in loaded, gc.get_freeze_count() > 0))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert ast.literal_eval(done.stdout) == (True, False, True)  # nothing else on stdout
    assert "oncelog.spark.daemon: oncelog.no_such_module not preloaded" in done.stderr
    assert "The Zen of Python" in done.stderr  # what `this` prints on import
