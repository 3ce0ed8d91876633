"""Guardrails: the driver depends on no storage or session code and creates nothing durable."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import akchat_fsm

PACKAGE = Path(akchat_fsm.__file__).resolve().parent
FORBIDDEN = ("akchat_fsm.storage", "akchat_fsm.session")


def _module_file(name: str) -> Path | None:
    parts = name.split(".")[1:]
    base = PACKAGE.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(name: str, path: Path) -> set[str]:
    """Package-internal modules imported by ``name`` (relative imports resolved)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m.startswith("akchat_fsm")}


def transitive_imports(root: str) -> set[str]:
    seen: set[str] = set()
    todo = [root]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = _module_file(name)
        if path is None:
            continue
        todo.extend(_imports(name, path))
        # importing a.b.c runs a/__init__ and a/b/__init__ (the root package is the lead's facade)
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(2, len(parts)))
    return seen


def test_driver_never_imports_storage_or_session_modules_ast() -> None:
    reached = transitive_imports("akchat_fsm.controlled")
    assert "akchat_fsm.wire.controlled" in reached  # the walk does follow imports
    assert not [m for m in reached if m.startswith(FORBIDDEN)]


def test_driver_import_adds_no_storage_or_session_module_at_runtime() -> None:
    code = (
        "import sys, json, akchat_fsm\n"
        "before = set(sys.modules)\n"
        "import akchat_fsm.controlled, akchat_fsm.wire.controlled\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    added = json.loads(out)
    assert "akchat_fsm.controlled" in added
    assert not [m for m in added if m.startswith(FORBIDDEN)]
