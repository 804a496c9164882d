"""The README's "How the code is laid out" names every package of the tree, and only
packages and files that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src" / "oncelog"


def _layout() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## How the code is laid out", 1)[1]
    return section.split("```", 2)[1]


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
