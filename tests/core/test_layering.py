"""The core stays sans-I/O and its kernel stays analysable (read from the source, not run)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "src" / "akchat_fsm" / "core"
KERNEL = {"records.py", "retention.py", "cursor.py", "lease.py"}
STDLIB_ALLOWED = {
    "__future__",
    "collections.abc",
    "dataclasses",
    "datetime",
    "enum",
    "secrets",
    "types",
    "typing",
}


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            out.append((module, [alias.name for alias in node.names]))
    return out


@pytest.mark.parametrize("path", sorted(CORE.glob("*.py")), ids=lambda p: p.name)
def test_core_imports_no_io_and_no_machine_instances(path: Path) -> None:
    for module, names in _imports(path):
        if module.startswith("."):
            # Siblings (".x"), or the layers below: wire, machines (tables, vocabularies), errors.
            layer = module.split(".")[2:3]  # "..wire.session" -> ["wire"]; ".records" -> []
            assert layer in ([], ["wire"], ["machines"], ["errors"]), module
            assert not any(name.endswith("Lifecycle") for name in names), (module, names)
        else:
            assert module in STDLIB_ALLOWED, f"{path.name} imports {module}"


@pytest.mark.parametrize("name", sorted(KERNEL))
def test_kernel_never_touches_pydantic_models(name: str) -> None:
    for module, _ in _imports(CORE / name):
        assert "session" not in module and "pydantic" not in module, module
        assert not module.startswith(".state") and not module.startswith(".confirmations")
