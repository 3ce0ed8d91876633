"""Rewrite private imports and reference pointers in place (idempotent; ADR-0117, ADR-0118).

Run from the repository root after merging work that predates the change::

    /work/venv/bin/python scripts/rewrite_pointers.py          # rewrite, then ruff-sort imports
    /work/venv/bin/python scripts/rewrite_pointers.py --check  # list what would change; exit 1

What it rewrites, and nothing else:

1. imports from the old private ``akchat_fsm.wire._js`` (any spelling, relative or absolute):
   public names go to ``akchat_fsm.wire.js``, the two pydantic field types to
   ``akchat_fsm.wire._fields`` (wire-internal);
2. ``from pydantic._internal._model_construction import ModelMetaclass`` inside the wire
   package: from ``._pydantic_compat`` instead; imports of ``akchat_fsm.storage._cas`` from
   outside storage: from the public ``akchat_fsm.storage.checks``;
3. pointers into the unshipped reference (``REFERENCE §1.3``, ``REFERENCE.md §7``): in code and
   models they name the shipped summary, ``docs/reference.md §1.3`` (``section 3.3`` in the
   ASCII-only Promela model); in docs pages they become
   a link, ``[reference §1.3](reference.md)`` (relative to the page). A comment or docstring
   paragraph that the longer pointer pushes past 100 columns is re-wrapped.

A second run changes nothing. Changed Python files then get ``ruff check --select I --fix``
(import order: ``._js`` and ``.js`` sort differently) and ``ruff format``.
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import shutil
import subprocess
import sys
import textwrap
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY_DIRS = ("src", "tests", "scripts", "models", "benchmarks")
WIDTH = 100
OLD_JS = "akchat_fsm.wire._js"
FIELD_TYPES = frozenset({"NonNegativeInt", "StrictStr"})
OLD_CAS = "akchat_fsm.storage._cas"
STORAGE_CHECKS = frozenset({"MAX_RECORD_CHARS", "check_record_key", "check_session_id", "now_ms"})
PYDANTIC_META = "pydantic._internal._model_construction"
SUMMARY = "docs/reference.md"

# "REFERENCE §1.3", "REFERENCE.md §7", and the model's "REFERENCE 3.3" (no section sign).
_POINTER = re.compile(r"\bREFERENCE(?:\.md)? (?:§ ?)?(?=\d)")
_DOC_POINTER = re.compile(r"\bREFERENCE(?:\.md)? §? ?(\d+(?:\.\d+)?(?:[-–]\d+(?:\.\d+)?)?)")


def _js_public() -> frozenset[str]:
    """``__all__`` of the public module, read from its source (nothing is imported)."""
    tree = ast.parse((ROOT / "src/akchat_fsm/wire/js.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return frozenset(ast.literal_eval(node.value))
    raise SystemExit("src/akchat_fsm/wire/js.py has no __all__")


def _package_of(path: Path) -> list[str]:
    """The dotted package a source file's relative imports start from ([] outside src/)."""
    try:
        rel = path.relative_to(ROOT / "src")
    except ValueError:
        return []
    return list(rel.parent.parts)


def _absolute(path: Path, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = _package_of(path)
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _render(indent: str, module: str, names: list[str]) -> list[str]:
    one = f"{indent}from {module} import {', '.join(names)}"
    if len(one) <= WIDTH:
        return [one]
    return [f"{indent}from {module} import (", *[f"{indent}    {n}," for n in names], f"{indent})"]


def _alias(alias: ast.alias) -> str:
    return alias.name if alias.asname is None else f"{alias.name} as {alias.asname}"


def rewrite_imports(path: Path, text: str, public: frozenset[str]) -> str:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    lines = text.splitlines(keepends=True)
    edits: list[tuple[int, int, list[str]]] = []
    in_wire = _package_of(path)[:2] == ["akchat_fsm", "wire"]
    in_storage = _package_of(path)[:2] == ["akchat_fsm", "storage"]
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        target = _absolute(path, node)
        indent = " " * node.col_offset
        if target == OLD_JS:
            spelled = "." * node.level + (node.module or "")
            stem = spelled[: -len("_js")]
            js = [_alias(a) for a in node.names if a.name not in FIELD_TYPES]
            fields = [_alias(a) for a in node.names if a.name in FIELD_TYPES]
            unknown = [a.name for a in node.names if a.name not in public | FIELD_TYPES]
            if unknown:
                print(f"{path}: not public in wire.js, left as is: {unknown}", file=sys.stderr)
                continue
            new: list[str] = []
            if fields:
                new += _render(indent, stem + "_fields", fields)
            if js:
                new += _render(indent, stem + "js", js)
            edits.append((node.lineno, node.end_lineno or node.lineno, new))
        elif target == OLD_CAS and _package_of(path)[:1] == ["akchat_fsm"] and not in_storage:
            # Only the package's own modules: tests and benchmarks may look inside storage.
            names = [a.name for a in node.names]
            if not set(names) <= STORAGE_CHECKS:
                print(f"{path}: not in storage.checks, left as is: {names}", file=sys.stderr)
                continue
            spelled = "." * node.level + (node.module or "")
            new_module = spelled[: -len("_cas")] + "checks"
            edits.append(
                (
                    node.lineno,
                    node.end_lineno or node.lineno,
                    _render(indent, new_module, [_alias(a) for a in node.names]),
                )
            )
        elif (
            target == PYDANTIC_META
            and _package_of(path)[:1] == ["akchat_fsm"]
            and path.name != "_pydantic_compat.py"
        ):
            if not in_wire:
                print(f"{path}: pydantic internals outside wire, left as is", file=sys.stderr)
                continue
            stem = "." if _package_of(path) == ["akchat_fsm", "wire"] else None
            if stem is None:
                print(f"{path}: unexpected package, left as is", file=sys.stderr)
                continue
            names = [_alias(a) for a in node.names]
            edits.append(
                (
                    node.lineno,
                    node.end_lineno or node.lineno,
                    _render(indent, "._pydantic_compat", names),
                )
            )
    for first, last, new in sorted(edits, reverse=True):
        lines[first - 1 : last] = [line + "\n" for line in new]
    return "".join(lines)


def _string_rows(text: str) -> list[tuple[int, int]]:
    """0-based (first, last) rows of every triple-quoted string token."""
    rows = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.STRING and re.match(r"^[rRbBuU]*(\"\"\"|''')", tok.string):
                rows.append((tok.start[0] - 1, tok.end[0] - 1))
    except (tokenize.TokenError, SyntaxError):
        return []
    return rows


def _wrap(words: list[str], first: str, rest: str) -> list[str]:
    return textwrap.wrap(
        " ".join(words),
        width=WIDTH,
        initial_indent=first,
        subsequent_indent=rest,
        break_long_words=False,
        break_on_hyphens=False,
    )


def _reflow_comment(lines: list[str], i: int) -> bool:
    match = re.match(r"^(\s*#:? )", lines[i])  # "#: " documents the attribute below it
    if match is None:
        return False  # a trailing comment after code: left for a human
    prefix = match.group(1)
    start, end = i, i
    while start > 0 and lines[start - 1].startswith(prefix):
        start -= 1
    while end + 1 < len(lines) and lines[end + 1].startswith(prefix):
        end += 1
    words = " ".join(line[len(prefix) :] for line in lines[start : end + 1]).split()
    lines[start : end + 1] = _wrap(words, prefix, prefix)
    return True


_MARKUP = re.compile(r"^\s*(?:[-*] |\d+\. |[=|+:]|\.\. )")


def _reflow_docstring(lines: list[str], i: int, first: int, last: int) -> bool:
    # The paragraph around row i, inside the string spanning rows first..last.
    start, end = i, i
    while start > first and lines[start - 1].strip() and not _MARKUP.match(lines[start]):
        start -= 1
    while end < last and lines[end + 1].strip() and lines[end + 1].strip() not in {'"""', "'''"}:
        if _MARKUP.match(lines[end + 1]):
            break
        end += 1
    head = lines[start]
    opening = re.match(r"^(\s*[rRbBuU]*(?:\"\"\"|'''))", head) if start == first else None
    if opening is None:
        indent = re.match(r"^(\s*)", head).group(1)  # type: ignore[union-attr]
        item = re.match(r"^(\s*(?:[-*] |\d+\. ))", head)
        first_prefix, rest_prefix = indent, indent
        if item is not None:
            first_prefix = item.group(1)
            rest_prefix = " " * len(first_prefix)
            head = head[len(first_prefix) :]
        else:
            head = head[len(indent) :]
    else:
        first_prefix = opening.group(1)
        rest_prefix = re.match(r"^(\s*)", first_prefix).group(1)  # type: ignore[union-attr]
        head = head[len(first_prefix) :]
    body = [head] + [line.strip() for line in lines[start + 1 : end + 1]]
    if any(
        line.strip() and not line.startswith(rest_prefix) for line in lines[start + 1 : end + 1]
    ):
        return False
    lines[start : end + 1] = _wrap(" ".join(body).split(), first_prefix, rest_prefix)
    return True


def rewrite_pointers_py(text: str, path: Path) -> str:
    if "REFERENCE" not in text:
        return text
    lines = _POINTER.sub(SUMMARY + " §", text).splitlines()
    strings = _string_rows("\n".join(lines) + "\n")
    changed = True
    while changed:  # one reflow may move rows; start over until every line fits
        changed = False
        for i, line in enumerate(lines):
            if len(line) <= WIDTH or SUMMARY not in line:
                continue
            inside = next(((a, b) for a, b in strings if a <= i <= b), None)
            ok = (
                _reflow_docstring(lines, i, *inside)
                if inside is not None
                else _reflow_comment(lines, i)
            )
            if ok:
                strings = _string_rows("\n".join(lines) + "\n")
                changed = True
                break
            print(f"{path}:{i + 1}: over {WIDTH} columns; re-wrap it by hand", file=sys.stderr)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def rewrite_pointers_md(path: Path, text: str) -> str:
    if path == ROOT / SUMMARY:
        return text
    link = Path(*[".."] * len(path.parent.relative_to(ROOT / "docs").parts), "reference.md")
    return _DOC_POINTER.sub(lambda m: f"[reference §{m.group(1)}]({link.as_posix()})", text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if needed")
    args = parser.parse_args(argv)
    public = _js_public()
    changed: list[Path] = []
    for top in PY_DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix not in {".py", ".pml"} or path == Path(__file__).resolve():
                continue
            text = path.read_text(encoding="utf-8")
            new = text
            if path.suffix == ".py":
                new = rewrite_pointers_py(rewrite_imports(path, new, public), path)
            else:
                new = _POINTER.sub(SUMMARY + " section ", new)  # ASCII for spin's cpp
            if new != text:
                changed.append(path)
                if not args.check:
                    path.write_text(new, encoding="utf-8")
    for path in sorted((ROOT / "docs").rglob("*.md")):
        text = path.read_text(encoding="utf-8")
        new = rewrite_pointers_md(path, text)
        if new != text:
            changed.append(path)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    for path in changed:
        print(path.relative_to(ROOT))
    if args.check:
        return 1 if changed else 0
    python = [str(p) for p in changed if p.suffix == ".py"]
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if python:
        subprocess.run([ruff, "check", "--quiet", "--select", "I", "--fix", *python], check=False)
        subprocess.run([ruff, "format", "--quiet", *python], check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
