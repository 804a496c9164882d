"""Failing requests kept as regression cases: one text file per request in ``cases/``.

A file holds comment lines (``# key: value``: the API and version, the mutation, what
failed) and then the request's bytes in hex, without the size prefix. The fuzzer's
``--save`` writes them; ``test_fuzz_broker.py`` replays every one against a broker.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from .harness import Failure

CASES_DIR = Path(__file__).parent / "cases"


@dataclass(frozen=True, slots=True)
class SavedCase:
    name: str
    api: tuple[int, int]
    data: bytes
    notes: dict[str, str]


def save_case(directory: Path, failure: Failure) -> Path:
    assert failure.case is not None
    case = failure.case
    digest = hashlib.sha256(case.data).hexdigest()[:10]
    slug = failure.kind.split(" ")[0]
    path = directory / f"{slug}-{case.api[0]}v{case.api[1]}-{case.mutation}-{digest}.txt"
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"# api: {case.api[0]} {case.api[1]}\n"
        f"# mutation: {case.mutation} ({case.detail})\n"
        f"# found: seed {case.seed} case {case.index}\n"
        f"# failure: {failure.kind}: {failure.detail.splitlines()[-1] if failure.detail else ''}\n"
        f"{case.data.hex()}\n"
    )
    return path


def load_cases(directory: Path = CASES_DIR) -> list[SavedCase]:
    cases = []
    for path in sorted(directory.glob("*.txt")):
        notes: dict[str, str] = {}
        hex_lines = []
        for line in path.read_text().splitlines():
            if line.startswith("#"):
                key, _, value = line[1:].partition(":")
                notes[key.strip()] = value.strip()
            elif line.strip():
                hex_lines.append(line.strip())
        key, version = (int(part) for part in notes["api"].split())
        cases.append(SavedCase(path.stem, (key, version), bytes.fromhex("".join(hex_lines)), notes))
    return cases
