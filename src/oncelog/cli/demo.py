"""`oncelog demo`: the end-to-end demonstration (the main job until the Spark pipeline lands)."""

from __future__ import annotations

import click


@click.command("demo")
@click.option("--orders", default=20000, show_default=True, type=click.IntRange(min=2),
              help="How many orders to produce, restart across, and read back.")
@click.pass_context
def demo(ctx: click.Context, orders: int) -> None:
    """Produce orders at acks=all to an embedded broker, restart it midway, read them
    back and verify: exit code 0 only if nothing is missing or duplicated."""
    from oncelog.demo import run_demo

    ctx.exit(run_demo(orders))
