"""A broker shutdown that hangs says where it waits (oncelog.broker.stall_report)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from oncelog.broker.stall_report import await_chain, watched


async def _inner_step(gate: asyncio.Event) -> None:
    await gate.wait()


async def _outer_stop(gate: asyncio.Event) -> None:
    await _inner_step(gate)


def test_the_chain_names_each_coroutine_down_to_the_future_it_waits_for() -> None:
    async def scenario() -> list[str]:
        gate = asyncio.Event()
        task = asyncio.ensure_future(_outer_stop(gate))
        await asyncio.sleep(0)
        chain = await_chain(task.get_coro())
        gate.set()
        await task
        return chain

    chain = asyncio.run(scenario())
    assert [step.split(" ")[0] for step in chain[:2]] == ["_outer_stop", "_inner_step"]
    assert any("Event.wait" in step for step in chain)
    assert chain[-1] == "waiting for a future"


def test_a_stalled_stop_logs_where_every_task_waits(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        gate = asyncio.Event()
        stuck = asyncio.ensure_future(_outer_stop(gate))
        stuck.set_name("stuck-step")
        stopping = asyncio.ensure_future(watched(stuck, "the test's stop", 0.05))
        await asyncio.sleep(0.3)
        gate.set()
        await stopping

    caplog.set_level(logging.WARNING, "oncelog.broker.stall_report")
    asyncio.run(scenario())
    (record,) = caplog.records
    assert "the test's stop has not finished after" in record.getMessage()
    assert "task stuck-step:" in record.getMessage()
    assert "_inner_step (" in record.getMessage()


def test_a_prompt_stop_reports_nothing(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    async def scenario() -> None:
        await watched(asyncio.sleep(0.01), "the test's stop", 0.05)
        await asyncio.sleep(0.2)  # past the report and the thread dump, had they stayed armed

    caplog.set_level(logging.WARNING, "oncelog.broker.stall_report")
    asyncio.run(scenario())
    assert caplog.records == []
    assert "Thread" not in capfd.readouterr().err
