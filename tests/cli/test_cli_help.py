"""`--help` works for the group and every command."""

from __future__ import annotations

import pytest

COMMANDS = [
    [],
    ["broker"],
    ["topics"],
    ["topics", "create"],
    ["topics", "list"],
    ["topics", "describe"],
    ["topics", "delete"],
    ["produce"],
    ["consume"],
    ["dump-log"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "oncelog")
def test_help(cli, command: list[str]) -> None:
    result = cli(*command, "--help")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"Usage: {' '.join(['main', *command])}")


def test_top_level_lists_every_command(cli) -> None:
    listed = cli("--help").stdout
    for name in ("broker", "topics", "produce", "consume", "dump-log"):
        assert f"  {name} " in listed


def test_describe_help_explains_segments(cli) -> None:
    text = " ".join(cli("topics", "describe", "--help").stdout.split())
    assert "--data-dir" in text and "shown as '-' without it" in text
    assert "log end offset equals the high watermark" in text
