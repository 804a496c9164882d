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


def _modules_after(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", f"import sys\n{code}\n{REPORT}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_the_program_runs_the_command_without_loading_hypothesis() -> None:
    loaded = _modules_after(
        "from oncelog.__main__ import run\n"
        "sys.argv = ['oncelog', '--help']\n"
        "try:\n    run()\nexcept SystemExit as exit:\n    assert exit.code == 0, exit.code"
    )
    assert loaded == "['kio.static.primitive', 'oncelog.cli.main']"


def test_importing_oncelog_as_a_library_keeps_kios_hypothesis_hooks() -> None:
    """The control: without the program's entry, kio loads hypothesis (what it costs)."""
    loaded = _modules_after("import oncelog.cli.main")
    assert loaded == "['hypothesis.core', 'kio.static.primitive', 'oncelog.cli.main']"


def test_hypothesis_stays_importable_after_the_entry_loaded_kio() -> None:
    loaded = _modules_after(
        "from oncelog.__main__ import run\n"
        "sys.argv = ['oncelog', '--help']\n"
        "try:\n    run()\nexcept SystemExit:\n    pass\n"
        "import hypothesis.core"
    )
    assert loaded == "['hypothesis.core', 'kio.static.primitive', 'oncelog.cli.main']"
