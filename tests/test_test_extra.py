"""The one documented install for running the tests brings everything the tests import.

README.md and docs/proof.md both say ``pip install -e ".[dev]"``; this keeps that sentence,
the ``dev`` extra in pyproject.toml and the imports of the test suite in step.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
INSTALL = 'python3 -m pip install -e ".[dev]"'


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def extra_closure(extras: dict[str, list[str]], extra: str) -> set[str]:
    """Every distribution ``pip install .[extra]`` asks for by name, self-references followed."""
    seen: set[str] = set()
    wanted: set[str] = set()
    todo = [extra]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for text in extras[name]:
            requirement = Requirement(text)
            if _normal(requirement.name) == "akchat-fsm":
                todo.extend(requirement.extras)
            else:
                wanted.add(_normal(requirement.name))
    return wanted


def _project() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    return project


def _imported_tops(path: Path) -> set[str]:
    tops: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            tops |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            tops.add(node.module.split(".")[0])
    return tops


def test_the_docs_name_the_test_extra() -> None:
    for page in ("README.md", "docs/proof.md"):
        assert INSTALL in (ROOT / page).read_text(encoding="utf-8"), page


def test_the_dev_extra_brings_every_third_party_module_the_tests_import() -> None:
    project = _project()
    wanted = extra_closure(project["optional-dependencies"], "dev")
    wanted |= {_normal(Requirement(text).name) for text in project["dependencies"]}
    providers = packages_distributions()
    missing: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for top in sorted(_imported_tops(path)):
            if top in sys.stdlib_module_names or top == "akchat_fsm":
                continue
            dists = {_normal(d) for d in providers.get(top, [])}
            # No distribution: one of the suite's own helper modules, imported by file.
            if dists and not dists & wanted:
                missing.setdefault(top, []).append(str(path.relative_to(ROOT)))
    assert not missing, f"imported by tests but not brought by .[dev]: {missing}"


def test_the_closure_follows_self_references_and_sees_a_missing_package() -> None:
    extras = {"dev": ["akchat-fsm[all]", "ruff>=0.5"], "all": ["redis>=5; python_version>'3'"]}
    assert extra_closure(extras, "dev") == {"ruff", "redis"}
    assert "jsonschema" not in extra_closure(extras, "dev")
