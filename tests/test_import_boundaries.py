"""Private stays private: read from the source (AST), not run (ADR-0117, ADR-0118).

* A module ``akchat_fsm.<pkg>._x`` is imported only from inside ``akchat_fsm.<pkg>``; another
  package uses the public module (``akchat_fsm.wire.js``, ``akchat_fsm.storage.checks``).
* pydantic's private machinery (``pydantic._internal``, ``__pydantic_*__`` attributes) is
  touched by ``akchat_fsm/wire/_pydantic_compat.py`` alone.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
SOURCES = sorted((SRC / "akchat_fsm").rglob("*.py"))
COMPAT = SRC / "akchat_fsm" / "wire" / "_pydantic_compat.py"
_PYDANTIC_DUNDER = re.compile(r"^__pydantic_\w+__$")


def _module_of(path: Path) -> list[str]:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _is_module(parts: list[str]) -> bool:
    base = SRC.joinpath(*parts)
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def imported_modules(source: str, module: list[str], is_package: bool) -> list[list[str]]:
    """Every module an ``import`` names, absolute, including submodules imported by name."""
    package = module if is_package else module[:-1]
    out: list[list[str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [alias.name.split(".") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = base + (node.module.split(".") if node.module else [])
            out.append(target)
            # `from ..wire import _js` imports a module by name
            out += [[*target, a.name] for a in node.names if _is_module([*target, a.name])]
    return out


def private_imports(source: str, module: list[str], is_package: bool = False) -> list[str]:
    """The private modules of *another* package that this source imports."""
    found = []
    for target in imported_modules(source, module, is_package):
        if target[:1] != ["akchat_fsm"]:
            continue
        for index, part in enumerate(target):
            if part.startswith("_") and not part.startswith("__"):
                owner = target[:index]
                if module[: len(owner)] != owner:
                    found.append(".".join(target))
                break
    return found


def pydantic_internals(source: str) -> list[str]:
    """Imports of ``pydantic._internal`` and uses of ``__pydantic_*__`` attributes."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            names = []
        found += [n for n in names if n.split(".")[0] == "pydantic" and "._" in n]
        if isinstance(node, ast.Attribute) and _PYDANTIC_DUNDER.match(node.attr):
            found.append(node.attr)
        text = node.value if isinstance(node, ast.Constant) else None
        if isinstance(text, str) and _PYDANTIC_DUNDER.match(text):  # getattr(m, "__pydantic_")
            found.append(text)
    return found


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(SRC)))
def test_no_module_imports_a_private_module_of_another_package(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    assert private_imports(source, _module_of(path), path.name == "__init__.py") == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(SRC)))
def test_only_the_compat_module_touches_pydantic_internals(path: Path) -> None:
    found = pydantic_internals(path.read_text(encoding="utf-8"))
    if path == COMPAT:
        assert found  # the one place; if it no longer needs any, delete the module
    else:
        assert found == []


@pytest.mark.parametrize(
    ("source", "module", "expected"),
    [
        ("from ..wire._js import utf16_len", "akchat_fsm.core.turns", ["akchat_fsm.wire._js"]),
        ("from ..wire import _fields", "akchat_fsm.core.turns", ["akchat_fsm.wire._fields"]),
        ("import akchat_fsm.storage._cas", "akchat_fsm.cli.show", ["akchat_fsm.storage._cas"]),
        ("from ._fields import StrictStr", "akchat_fsm.wire.memory", []),  # its own package
        ("from .wire.js import utf16_len", "akchat_fsm.controlled", []),
        ("from ..storage.checks import now_ms", "akchat_fsm.integrations.ledger", []),
    ],
)
def test_the_private_import_scan_bites(source: str, module: str, expected: list[str]) -> None:
    assert private_imports(source, module.split(".")) == expected


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "from pydantic._internal._model_construction import ModelMetaclass",
            ["pydantic._internal._model_construction"],
        ),
        ("import pydantic._internal", ["pydantic._internal"]),
        ("snapshot.__pydantic_fields_set__.discard('x')", ["__pydantic_fields_set__"]),
        ("getattr(model, '__pydantic_private__')", ["__pydantic_private__"]),
        ("from pydantic import BaseModel\nfrom pydantic_core import core_schema", []),
        ("def __get_pydantic_core_schema__(cls, source, handler): ...", []),
    ],
)
def test_the_pydantic_scan_bites(source: str, expected: list[str]) -> None:
    assert pydantic_internals(source) == expected
