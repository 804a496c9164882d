"""The end-to-end demonstration (`oncelog demo`) passes its own verification."""

from __future__ import annotations

import io
import re

from click.testing import CliRunner
from rich.console import Console

from oncelog.cli.demo import demo
from oncelog.demo import run_demo


def _row(output: str, label: str) -> tuple[int, str]:
    """(count, ok) of one row of the verification table."""
    match = re.search(rf"{re.escape(label)}\s*│\s*([\d,]+)\s*│\s*(\w+)", output)
    assert match, f"no row {label!r} in:\n{output}"
    return int(match[1].replace(",", "")), match[2]


def test_run_demo_verifies_every_order_across_a_restart() -> None:
    out = io.StringIO()
    code = run_demo(300, console=Console(file=out, width=120, color_system=None))
    output = out.getvalue()
    assert code == 0, output
    assert _row(output, "orders sent") == (300, "yes")
    assert _row(output, "acknowledged (acks=all)") == (300, "yes")
    assert _row(output, "records in the log before restart") == (150, "yes")
    assert _row(output, "records in the log after restart") == (150, "yes")
    assert _row(output, "read back") == (300, "yes")
    assert _row(output, "duplicates") == (0, "yes")
    assert _row(output, "missing") == (0, "yes")
    assert "PASS: 300 orders" in output


def test_demo_command_exit_code() -> None:
    result = CliRunner().invoke(demo, ["--orders", "40"])
    assert result.exit_code == 0, result.output
    assert _row(result.output, "duplicates") == (0, "yes")
    assert _row(result.output, "missing") == (0, "yes")


def test_demo_command_refuses_too_few_orders() -> None:
    result = CliRunner().invoke(demo, ["--orders", "1"])
    assert result.exit_code == 2


def test_report_fails_on_a_duplicate_or_a_missing_order() -> None:
    from collections import Counter

    from oncelog.demo import Tally, _report

    def report(read: Counter[int]) -> tuple[int, str]:
        tally = Tally(sent=3, acknowledged=3, read=read, read_back=sum(read.values()),
                      before_restart=1, survived_restart=1)
        out = io.StringIO()
        return _report(Console(file=out, width=120, color_system=None), tally, 3, 0.1), out.getvalue()

    code, output = report(Counter({0: 1, 1: 1, 2: 1}))
    assert code == 0, output
    code, output = report(Counter({0: 1, 1: 2, 2: 1}))
    assert code == 1 and _row(output, "duplicates") == (1, "NO")
    code, output = report(Counter({0: 1, 2: 1}))
    assert code == 1 and _row(output, "missing") == (1, "NO")
