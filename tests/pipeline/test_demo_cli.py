"""The `oncelog demo` command's argument checks (the run itself: test_pipeline.py)."""

from __future__ import annotations

from click.testing import CliRunner

from oncelog.cli.demo import demo


def test_demo_refuses_too_few_orders() -> None:
    result = CliRunner().invoke(demo, ["--orders", "1"])
    assert result.exit_code == 2
    assert "--orders" in result.output


def test_demo_refuses_an_unknown_guarantee() -> None:
    result = CliRunner().invoke(demo, ["--guarantee", "maybe_once"])
    assert result.exit_code == 2
