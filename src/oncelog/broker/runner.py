"""Run a broker in the foreground until SIGTERM or SIGINT, then stop it cleanly."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

from oncelog.broker.broker import Broker
from oncelog.broker.config import BrokerConfig
from oncelog.broker.stall_report import watched

log = logging.getLogger(__name__)

# A clean stop takes milliseconds; past this, the log says where it waits (stall_report).
SHUTDOWN_STALL_S = 10.0


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when installed (faster socket handling), else asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def write_ready_file(path: Path, ports: dict[str, int], metrics_port: int | None) -> None:
    """One ``LISTENER PORT`` line per listener, first listener first, then ``metrics PORT``
    when metrics are served; replaced atomically so that a reader never sees half of it."""
    lines = [f"{name} {port}\n" for name, port in ports.items()]
    if metrics_port is not None:
        lines.append(f"metrics {metrics_port}\n")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(lines))
    os.replace(tmp, path)


async def serve(
    config: BrokerConfig,
    data_dir: Path,
    host: str | None,
    port: int | None,
    ready_file: Path | None = None,
    metrics_port: int | None = None,
) -> None:
    broker = Broker(config, data_dir, host, port, metrics_port=metrics_port)
    await broker.start()
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    if ready_file is not None:
        write_ready_file(ready_file, broker.ports, broker.metrics_port)
    log.info(
        "oncelog broker %d serving %s from %s", broker.node_id, broker.bootstrap_servers, data_dir
    )
    try:
        await stopping.wait()
    finally:
        log.info("shutting down")
        await watched(broker.stop(), "the broker's shutdown", SHUTDOWN_STALL_S)


def run_forever(
    config: BrokerConfig,
    data_dir: Path,
    host: str | None,
    port: int | None,
    ready_file: Path | None = None,
    metrics_port: int | None = None,
) -> None:
    loop = new_event_loop()
    try:
        loop.run_until_complete(serve(config, data_dir, host, port, ready_file, metrics_port))
    finally:
        loop.close()
