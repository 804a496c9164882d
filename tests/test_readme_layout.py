"""The README's "How the code is laid out" names every package of the tree, and only
packages and files that exist; its table of API versions is what the broker advertises."""

from __future__ import annotations

import re
from pathlib import Path

from oncelog.protocol.api_versions import SUPPORTED_VERSIONS

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src" / "oncelog"
README = ROOT / "README.md"


def _layout() -> str:
    section = README.read_text(encoding="utf-8").split("## How the code is laid out", 1)[1]
    return section.split("```", 2)[1]


def _advertised_in_readme() -> dict[int, tuple[int, int]]:
    """The README's table "API versions oncelog advertises": a row may name several APIs,
    `A (key) / B (key)`, with one bound for all or one per API (`2 / 1`)."""
    table = README.read_text(encoding="utf-8").split("| API (key) | Lowest | Highest |", 1)[1]
    rows = table.split("\n\n", 1)[0].splitlines()[2:]
    advertised = {}
    for row in rows:
        apis, lowest, highest = (cell.strip() for cell in row.strip("|").split("|"))
        keys = [int(key) for key in re.findall(r"\((\d+)\)", apis)]
        lows, highs = lowest.split(" / "), highest.split(" / ")
        for i, key in enumerate(keys):
            low = lows[i] if len(lows) > 1 else lows[0]
            high = highs[i] if len(highs) > 1 else highs[0]
            advertised[key] = (int(low), int(high))
    return advertised


def test_every_package_is_in_the_layout() -> None:
    named = set(re.findall(r"^  (\w+)/", _layout(), flags=re.M))
    packages = {p.parent.name for p in SOURCE.glob("*/__init__.py")}
    assert named == packages


def test_every_file_the_layout_names_exists() -> None:
    layout = _layout()
    for name in re.findall(r"\b([\w/]+\.(?:py|sh))\b", layout):
        candidates = [
            *SOURCE.rglob(Path(name).name),
            *(ROOT / d / name for d in ("scripts", "bench", "tests")),
        ]
        assert any(p.exists() for p in candidates), name
    for top in re.findall(r"^(\w+)/", layout, flags=re.M):
        assert (ROOT / top).is_dir() or (SOURCE / top).is_dir(), top


def test_the_api_versions_table_is_what_the_broker_advertises() -> None:
    assert _advertised_in_readme() == {int(k): span for k, span in SUPPORTED_VERSIONS.items()}
