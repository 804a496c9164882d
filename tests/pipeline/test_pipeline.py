"""Seed 001's order-enrichment pipeline (`oncelog demo`) end to end, with its faults: every
task's first attempt failing half-way through its writes, the streaming driver (a
subprocess) killed with SIGKILL and restarted on its checkpoint, the broker restarted.
Exactly-once must deliver every order once; the at_least_once control, under the same
faults, must show duplicates (so the first test can fail)."""

from __future__ import annotations

import io
import json
import random
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from oncelog.pipeline.driver import planned_not_committed
from oncelog.pipeline.orders import customers, expected_enrichment, generate, make_order
from oncelog.pipeline.verify import matches

ORDERS = 600
PER_TRIGGER = 100  # about 7 micro-batches: room for a kill after two and a broker restart


def needs_spark() -> None:
    if shutil.which("java") is None:  # a failure, not a skip: CI must not pass without it
        pytest.fail("Spark needs Java 17 on the PATH (README: set-up)")


def run_demo(  # type: ignore[no-untyped-def]
    guarantee: str,
    orders: int = ORDERS,
    per_trigger: int = PER_TRIGGER,
    brokers: int = 1,
    keep_work_dir: bool = False,
):
    """run_pipeline_demo, its output printed into pytest's report should it raise."""
    from oncelog.pipeline.demo import run_pipeline_demo

    out = io.StringIO()
    try:
        result = run_pipeline_demo(
            orders,
            guarantee=guarantee,
            brokers=brokers,
            max_offsets_per_trigger=per_trigger,
            console=Console(file=out, width=140, color_system=None),
            timeout_s=600,  # generous: the machine may be shared; a healthy run takes ~100 s
            keep_work_dir=keep_work_dir,
        )
    except BaseException:
        print(out.getvalue())  # the events and the driver log's tail, in pytest's report
        raise
    return result, out.getvalue()


def assert_every_order_once(result, output: str, orders: int):  # type: ignore[no-untyped-def]
    """The run passed: every order in the output once, enriched right; its verification."""
    v = result.verification
    assert result.code == 0, output
    assert (v.orders_in, v.orders_out, v.duplicates, v.missing, v.wrong) == (
        orders,
        orders,
        0,
        0,
        0,
    ), output
    assert v.counts == dict.fromkeys(range(orders), 1)
    return v


@pytest.mark.slow
def test_exactly_once_through_task_failure_driver_sigkill_and_broker_restart() -> None:
    needs_spark()
    result, output = run_demo("exactly_once", keep_work_dir=True)
    try:
        # the SIGKILLed driver never ran Spark's shutdown hook: its block manager's directory
        # stayed behind, in the demo's work dir (removed with it), not in /tmp
        assert list((result.work_dir / "spark-scratch").glob("blockmgr-*")), output
    finally:
        shutil.rmtree(result.work_dir, ignore_errors=True)
    v = assert_every_order_once(result, output, ORDERS)
    # the faults really happened; the driver kill found a batch that all tasks had committed
    # and Spark had not recorded (the testing sink holds that moment): it was replayed
    assert any("killed with SIGKILL after all 3 tasks" in e for e in result.events), output
    assert any("broker restarted" in e for e in result.events), output
    assert result.driver_runs >= 2 and result.task_failures >= PER_TRIGGER // 100, output
    assert v.uncommitted_out > 0, output  # failed attempts' records: in the log, aborted
    assert "PASS: 600 orders" in output


@pytest.mark.slow
def test_at_least_once_control_shows_the_duplicates() -> None:
    needs_spark()
    result, output = run_demo("at_least_once")
    v = result.verification
    assert result.code == 1, output
    assert v.duplicates > 0 and v.orders_out > v.orders_in and v.missing == 0, output
    assert any("killed with SIGKILL" in e for e in result.events), output
    assert "FAIL: 600 orders" in output


def test_orders_and_enrichment_are_deterministic() -> None:
    assert generate(50, seed=7) == generate(50, seed=7)
    assert generate(50, seed=7) != generate(50, seed=8)
    assert customers() == customers()
    table = {c["customer_id"]: c for c in customers()}
    order = make_order(3, random.Random(1))
    enriched = expected_enrichment(order, table)
    assert enriched["name"] == table[order["customer_id"]]["name"]
    assert enriched["priority"] in ("high", "normal")
    assert matches(json.loads(json.dumps(enriched)), enriched)
    assert not matches({**enriched, "amount_with_tax": enriched["amount_with_tax"] + 1}, enriched)
    assert not matches({**enriched, "tier": "platinum"}, enriched)


def test_planned_not_committed_reads_the_checkpoint(tmp_path: Path) -> None:
    assert planned_not_committed(tmp_path) is None
    (tmp_path / "offsets").mkdir()
    (tmp_path / "commits").mkdir()
    for name in ("0", "1", ".1.crc"):
        (tmp_path / "offsets" / name).write_text("v1")
    (tmp_path / "commits" / "0").write_text("v1")
    assert planned_not_committed(tmp_path) == 1
    (tmp_path / "commits" / "1").write_text("v1")
    assert planned_not_committed(tmp_path) is None
