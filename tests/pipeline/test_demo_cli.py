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


def test_demo_refuses_a_two_broker_cluster() -> None:
    result = CliRunner().invoke(demo, ["--brokers", "2"])
    assert result.exit_code == 2
    assert "at least 3 brokers" in result.output


def test_demo_refuses_a_local_cluster_and_another_one() -> None:
    result = CliRunner().invoke(demo, ["--brokers", "3", "--bootstrap-servers", "h:9092"])
    assert result.exit_code == 2
    assert "--bootstrap-servers" in result.output
