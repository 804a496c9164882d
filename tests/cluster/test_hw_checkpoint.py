"""The high watermark checkpoint has one writer at a time.

The replica manager writes replication-offset-checkpoint every
replica.high.watermark.checkpoint.interval.ms in a worker thread, and once more at stop on
the event loop. A stop that came while the thread wrote ran both writers on the one
temporary file: the second rename found it gone (FileNotFoundError logged at broker stop,
seen in a cluster test's broker log), and two writers truncating and writing one file can
leave it mixed. No ZooKeeper here: a node with an empty metadata cache hosts no replica.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from oncelog.broker.config import BrokerConfig
from oncelog.cluster.replica import HW_CHECKPOINT
from oncelog.cluster.replica_manager import ReplicaManager


def idle_node() -> SimpleNamespace:
    """What ReplicaManager.start and stop use of a ClusterNode, with nothing to host."""
    cache = SimpleNamespace(
        states={}, topics={}, subscribe=lambda _: None, unsubscribe=lambda _: None
    )
    config = BrokerConfig.load(None, {"replica.high.watermark.checkpoint.interval.ms": "10"})
    return SimpleNamespace(config=config, broker_id=1, cache=cache, on_lease_change=lambda _: None)


def test_stop_during_a_periodic_checkpoint_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    manager = ReplicaManager(idle_node(), tmp_path, flusher=None, clean_start=True)  # type: ignore[arg-type]
    loop_thread = threading.current_thread()
    real_replace = os.replace
    renaming, other_renamed = threading.Event(), threading.Event()

    def replace(src: str | Path, dst: str | Path) -> None:
        if Path(dst).parent != tmp_path:  # another broker's, running in this process
            real_replace(src, dst)
            return
        if threading.current_thread() is not loop_thread:
            renaming.set()  # the periodic write, about to rename its temporary file
            other_renamed.wait(1.0)  # long enough for stop() to write, unless it must wait
        else:
            other_renamed.set()
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)

    async def scenario() -> None:
        manager.start()
        while not renaming.is_set():
            await asyncio.sleep(0.01)
        await manager.stop()

    asyncio.run(scenario())
    assert "could not write the high watermark checkpoint" not in caplog.text
    assert (tmp_path / HW_CHECKPOINT).read_text() == "0\n0\n"  # version 0, no partitions
    assert not (tmp_path / f"{HW_CHECKPOINT}.tmp").exists()
