"""The ``oncelog`` command: argument parsing and presentation only (the requests are
:mod:`oncelog.client`'s)."""

from oncelog.cli.main import main

__all__ = ["main"]
