"""The ``oncelog`` program (``python -m oncelog``, the console script) loads kio without its
hypothesis hooks; importing oncelog as a library (tests, the pytest fixture) keeps them.

Each case runs in a fresh interpreter: what it checks is which modules a process start
imports, and this test process has imported hypothesis long ago.
"""

from __future__ import annotations

import subprocess
import sys

REPORT = (
    "print(sorted(m for m in ('hypothesis.core', 'kio.static.primitive', 'oncelog.cli.main')"
    " if m in sys.modules))"
)


def _reports(code: str) -> list[str]:
    """What ``code`` printed; each REPORT line lists which of those modules were loaded."""
    done = subprocess.run(
        [sys.executable, "-c", f"import sys\n{code}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()


def test_the_program_runs_the_command_without_loading_hypothesis() -> None:
    """...and hypothesis is importable afterwards (the entry hid it only while kio loaded)."""
    reports = _reports(
        "from oncelog.__main__ import run\n"
        "sys.argv = ['oncelog', '--help']\n"
        "try:\n    run()\nexcept SystemExit as exit:\n    assert exit.code == 0, exit.code\n"
        f"{REPORT}\n"
        "import hypothesis.core\n"
        f"{REPORT}"
    )
    assert reports[-2:] == [
        "['kio.static.primitive', 'oncelog.cli.main']",
        "['hypothesis.core', 'kio.static.primitive', 'oncelog.cli.main']",
    ]


def test_importing_oncelog_as_a_library_keeps_kios_hypothesis_hooks() -> None:
    """The control: without the program's entry, kio loads hypothesis (what it costs)."""
    reports = _reports(f"import oncelog.cli.main\n{REPORT}")
    assert reports[-1] == "['hypothesis.core', 'kio.static.primitive', 'oncelog.cli.main']"
