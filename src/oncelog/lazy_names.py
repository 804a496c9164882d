"""A package's names imported from their modules on first use (PEP 562), for the packages
whose `__init__` must stay light: `oncelog.spark`, `oncelog.testing` and `oncelog.protocol`,
which Spark's Python workers import before the module they need (and
`oncelog.protocol.errors`, whose `ErrorCode` is kio's)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any


def lazy_names(
    package: str, home: Mapping[str, str], namespace: MutableMapping[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The package's `__getattr__` and `__dir__`: a name of `home` is imported from its
    module when first asked for and kept in `namespace` (the package's globals), so the
    next access finds it without a call. (The type checker takes the names from the
    package's TYPE_CHECKING imports; a misspelt name is an AttributeError at run time.)"""

    def getattr_(name: str) -> Any:
        if name not in home:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home[name]), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted([*namespace, *home])

    return getattr_, dir_
