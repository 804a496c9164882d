"""An interpreter for a broker subprocess that runs a few lines before the broker starts:
how a test lowers the process's limits, or takes a mechanism away to show what happens
without it."""

from __future__ import annotations

import sys
from pathlib import Path


def python_with(directory: Path, prelude: str) -> str:
    """The path of an executable that runs `prelude`, then the module it is asked to run
    (`-m MODULE ARGS...`, as `BrokerProcess` calls its interpreter)."""
    wrapper = directory / "patched-python"
    wrapper.write_text(
        f"#!{sys.executable}\n"
        "import runpy, sys\n"
        f"{prelude}\n"
        "assert sys.argv[1] == '-m', sys.argv\n"
        "sys.argv = sys.argv[2:]\n"
        "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\n"
    )
    wrapper.chmod(0o755)
    return str(wrapper)
