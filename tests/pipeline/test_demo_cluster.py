"""`oncelog demo --brokers 3`: the order-enrichment pipeline on a local 3-broker cluster
(replication factor 3), with the demo's faults plus two broker SIGKILLs mid-run: the leader
of enriched-orders-0, then a sink writer's transaction coordinator, each restarted. Exactly
once must deliver every order once; the at_least_once control, under the same faults, must
show duplicates. And an interrupted run (Ctrl-C) must stop every process it started."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from oncelog.pipeline.driver import _alive, _children

from .test_pipeline import assert_every_order_once, needs_spark, run_demo

ORDERS = 1200
PER_TRIGGER = 80  # 15 micro-batches: room for the driver kill and both broker faults


def _broker_faults(events: list[str]) -> list[str]:
    return [e for e in events if "killed with SIGKILL while driver" in e]


@pytest.mark.slow
def test_exactly_once_through_leader_and_coordinator_sigkills_on_three_brokers() -> None:
    needs_spark()
    result, output = run_demo("exactly_once", ORDERS, PER_TRIGGER, brokers=3)
    assert_every_order_once(result, output, ORDERS)
    kills = _broker_faults(result.events)
    assert len(kills) == 2, output
    assert "leader of enriched-orders-0" in kills[0], output
    assert "transaction coordinator of sink writer oncelog-sink-" in kills[1], output
    assert sum("leads it now" in e for e in result.events) == 2, output
    assert sum("back in the ISR of every partition" in e for e in result.events) == 2, output
    assert any(
        e.startswith("driver 1 (pid") and "SIGKILL after all 3 tasks" in e for e in result.events
    ), output
    assert "PASS: 1,200 orders" in output


@pytest.mark.slow
def test_at_least_once_control_on_three_brokers_shows_the_duplicates() -> None:
    needs_spark()
    result, output = run_demo("at_least_once", ORDERS, PER_TRIGGER, brokers=3)
    v = result.verification
    assert result.code == 1, output
    assert v.duplicates > 0 and v.orders_out > v.orders_in and v.missing == 0, output
    assert len(_broker_faults(result.events)) == 2, output
    assert "FAIL: 1,200 orders" in output


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_ctrl_c_stops_every_process_the_demo_started() -> None:
    needs_spark()
    demo = subprocess.Popen(
        [sys.executable, "-m", "oncelog", "demo", "--brokers", "3", "--orders", "600"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=dict(os.environ, COLUMNS="400", PYTHONUNBUFFERED="1"),
        text=True,
        # Ctrl-C's default action, whatever this process inherited: a shell without job
        # control starts background jobs with SIGINT ignored, and so would the demo be.
        preexec_fn=_default_sigint,
    )
    started: list[int] = []
    try:
        assert demo.stdout is not None
        seen = ""
        deadline = time.monotonic() + 300
        while "driver 1 started (pid" not in seen:
            line = demo.stdout.readline()
            assert line and time.monotonic() < deadline, seen
            seen += line
        started = [int(p) for p in re.findall(r"pid (\d+)", seen)]
        assert len(started) == 5, seen  # ZooKeeper, three brokers, the driver
        time.sleep(3)  # let the driver start its JVM and Python workers
        started += _children(started[-1])
        demo.send_signal(signal.SIGINT)
        rest, _ = demo.communicate(timeout=120)
        survivors = [pid for pid in started if _alive(pid)]
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait(30)
        for pid in started:  # whatever the demo left behind must not outlive the test
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert demo.returncode != 0, seen + rest
    assert survivors == [], seen + rest
