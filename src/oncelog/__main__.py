"""``python -m oncelog``, and the ``oncelog`` console script: the command as a program."""

from __future__ import annotations

import sys


def run() -> None:
    """Run the ``oncelog`` command, with kio loaded without its hypothesis hooks.

    When hypothesis is installed (any test environment: CI, a developer's venv), kio
    imports it and registers a hypothesis strategy for its types as it defines them; a
    broker or command process never draws an example, and the hooks cost about a quarter
    of the CPU time of a broker's start (importing the command: 0.89 vs 0.65 CPU-seconds,
    median of 5 each, load 19). So this process entry hides hypothesis while kio's types
    are defined, and only if nothing has imported it yet. Libraries and tests that import
    oncelog (the pytest fixture, tests that draw kio types) do not come through here.
    """
    if "hypothesis" not in sys.modules:
        sys.modules["hypothesis"] = None  # type: ignore[assignment]  # import raises
        try:
            import kio.static.primitive  # noqa: F401 - defines kio's types, hooks skipped
        finally:
            del sys.modules["hypothesis"]
    from oncelog.cli.main import main

    main()


if __name__ == "__main__":
    run()
