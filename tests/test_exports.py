"""Every package's public API, chosen and kept true (trio's ``test_exports`` is the model).

Each package of ``oncelog`` names its public API in ``__all__``, and ``__all__`` is the one
place it is written: a package without one fails, as does a listed name that is not
defined or a class or function the package imports from its own modules without listing
it (an export nobody chose). Modules that declare ``__all__`` must export what they list,
and every public class, in every module, says what it is for in a docstring.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import types
from pathlib import Path

import pytest

import oncelog

SOURCE = Path(oncelog.__file__).parent


def _tree() -> list[pkgutil.ModuleInfo]:
    """Every module and package below oncelog, except ``__main__`` (the program's
    entry, not an API)."""
    found = pkgutil.walk_packages(oncelog.__path__, prefix="oncelog.")
    return [m for m in found if not m.name.endswith(".__main__")]


PACKAGES = ["oncelog", *(m.name for m in _tree() if m.ispkg)]
MODULES = [m.name for m in _tree() if not m.ispkg]


def test_every_package_has_chosen_its_public_api() -> None:
    unchosen = [n for n in PACKAGES if not hasattr(importlib.import_module(n), "__all__")]
    assert unchosen == []


@pytest.mark.parametrize("name", PACKAGES)
def test_package_exports_what_it_chose_and_only_that(name: str) -> None:
    package = importlib.import_module(name)
    exported = getattr(package, "__all__", [])
    assert len(set(exported)) == len(exported), f"{name}.__all__ repeats a name"
    for attribute in exported:
        assert not attribute.startswith("_"), attribute
        assert hasattr(package, attribute), f"{name}.__all__ lists {attribute!r}, not defined"
    unlisted = [
        attribute
        for attribute, value in vars(package).items()
        if not attribute.startswith("_")
        and not isinstance(value, types.ModuleType)
        and getattr(value, "__module__", "").startswith(f"{name}.")
        and attribute not in exported
    ]
    assert unlisted == [], f"{name} imports these from its modules without exporting them"


@pytest.mark.parametrize("name", MODULES)
def test_a_module_exports_what_its_all_lists(name: str) -> None:
    module = importlib.import_module(name)
    for attribute in getattr(module, "__all__", ()):
        assert hasattr(module, attribute), f"{name}.__all__ lists {attribute!r}, not defined"


def test_every_public_class_has_a_docstring() -> None:
    """Read from the source: a dataclass without one gets a generated ``__doc__``."""
    missing = []
    for path in sorted(SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                if ast.get_docstring(node) is None:
                    missing.append(f"{path.relative_to(SOURCE)}:{node.lineno} {node.name}")
    assert missing == []
