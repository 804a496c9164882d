"""What a Python worker imports to run the connector's tasks: not oncelog's own protocol
client and kio's types. PySpark's worker runs `gc.collect()` after every task, and those
modules were two fifths of the worker's objects (68,000 against 47,000 without them; a
collection took 26-43 ms against 9-12 ms with hypothesis installed, which gives kio's
types hooks)."""

from __future__ import annotations

import subprocess
import sys

import pytest

WORKER_MODULES = (
    "oncelog.spark.source",
    "oncelog.spark.reader",
    "oncelog.spark.consume",
    "oncelog.spark.writer",
    "oncelog.spark.claims",
    "oncelog.spark.producers",
)


def test_the_connector_modules_leave_the_protocol_client_unimported() -> None:
    probe = (
        f"import sys\nfor name in {WORKER_MODULES!r}:\n    __import__(name)\n"
        "print(sorted(m for m in ('kio', 'oncelog.protocol', 'oncelog.client.connection', "
        "'hypothesis') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"


def test_the_client_package_still_gives_its_names() -> None:
    from oncelog import client
    from oncelog.client.admin import Admin
    from oncelog.client.connection import KafkaConnection

    assert client.Admin is Admin and client.KafkaConnection is KafkaConnection
    assert {"Admin", "KafkaConnection"} <= set(dir(client))
    with pytest.raises(AttributeError, match="Nothing"):
        client.Nothing  # noqa: B018
