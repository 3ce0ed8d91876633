"""Every pointer in a comment or docstring under src/ names something that ships and exists.

Pointers are read from the source text (comments and string literals), not run:

* a docs page (``docs/reference.md``) exists, and each ``§N.N`` after it is a heading there;
* an ``ADR-NNNN`` exists in docs/adr/, and an ``ADR-NNNN §k`` names a numbered item of it;
* a dotted module path (``akchat_fsm.core.state.Step``) or a relative ``:mod:`.x``` resolves to
  a module of the package, and its first attribute is bound at that module's top level;
* a file path (``session/_state.py``, ``models/gen_promela.py``) exists;
* nothing names the unshipped ``REFERENCE`` (ADR-0118).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = SRC / "akchat_fsm"

_UNSHIPPED = re.compile(r"\bREFERENCE(?:\.md)?\b(?!')")
_DOCS = re.compile(r"(?<![\w./-])docs/[\w./-]*?\.md\b")
_ADR = re.compile(r"\bADR-(\d{4})\b")
_ADR_ITEM = re.compile(r"\bADR-(\d{4}) §(\d+)\b")
_SECTION = re.compile(r"§\s?(\d+(?:\.\d+)?)(?:\s?[-–]\s?(\d+(?:\.\d+)?))?")
_DOTTED = re.compile(r"(?<![\w.])akchat_fsm(?:\.\w+)+")
_RELATIVE_MOD = re.compile(r":mod:`~?(\.+[\w.]*)`")
_FILE = re.compile(r"(?<![\w./-])((?:[\w-]+/)+[\w.-]+\.(?:py|md|pml|json|toml|ini))\b")


def _texts(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment block and string literal of one source file."""
    out: list[tuple[int, str]] = []
    comment: list[str] = []
    start = last = 0
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
    for tok in tokens:
        if tok.type == tokenize.COMMENT:
            if comment and tok.start[0] == last + 1:
                comment.append(tok.string.lstrip("#:").strip())
            else:
                if comment:
                    out.append((start, " ".join(comment)))
                comment, start = [tok.string.lstrip("#:").strip()], tok.start[0]
            last = tok.start[0]
        elif tok.type == tokenize.STRING:
            out.append((tok.start[0], tok.string))
    if comment:
        out.append((start, " ".join(comment)))
    return out


@cache
def _headings(page: Path) -> str:
    return "\n".join(
        line for line in page.read_text(encoding="utf-8").splitlines() if line.startswith("#")
    )


def _module_file(parts: list[str]) -> Path | None:
    base = SRC.joinpath(*parts)
    if (base / "__init__.py").exists():
        return base / "__init__.py"
    if base.with_suffix(".py").exists():
        return base.with_suffix(".py")
    return None


@cache
def _top_level_names(module: Path) -> frozenset[str]:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # lazy export tables name their attributes as strings
    return frozenset(names)


def _resolve_dotted(parts: list[str]) -> str | None:
    """``None`` when the dotted path exists, else what is missing."""
    for cut in range(len(parts), 0, -1):
        module = _module_file(parts[:cut])
        if module is None:
            continue
        rest = parts[cut:]
        if rest and rest[0] not in _top_level_names(module):
            return f"{'.'.join(parts[:cut])} has no {rest[0]!r}"
        return None
    return "no such module"


def _package_parts(path: Path) -> list[str]:
    rel = path.relative_to(SRC)
    return list(rel.parent.parts)


def problems_in(text: str, path: Path) -> list[str]:
    """What is wrong with the pointers in one comment or string of ``path``."""
    out: list[str] = []
    if _UNSHIPPED.search(text):
        out.append("names REFERENCE, which does not ship: point at docs/reference.md §N")
    for match in _ADR.finditer(text):
        if not any((ROOT / "docs" / "adr").glob(f"{match.group(1)}-*.md")):
            out.append(f"{match.group()} does not exist")
    for match in _ADR_ITEM.finditer(text):  # "ADR-0100 §3": item 3 of that record's decision
        for page in (ROOT / "docs" / "adr").glob(f"{match.group(1)}-*.md"):
            if not re.search(rf"^{match.group(2)}\. ", page.read_text(encoding="utf-8"), re.M):
                out.append(f"{match.group()}: no item {match.group(2)} in {page.name}")
    # Any other "§N.N" belongs to the nearest docs page named before it in the same text.
    pages = [(m.start(), m.group()) for m in _DOCS.finditer(text)]
    for name in {name for _, name in pages}:
        if not (ROOT / name).exists():
            out.append(f"{name} does not exist")
    items = {m.start(2) - 1 for m in _ADR_ITEM.finditer(text)}
    for match in _SECTION.finditer(text):
        if match.start() in items:
            continue
        before = [name for at, name in pages if at < match.start()]
        if not before:
            out.append(f"{match.group()} names a section of no page")
            continue
        page = ROOT / before[-1]
        if not page.exists():
            continue  # already reported
        for number in filter(None, match.groups()):
            if not re.search(rf"§{re.escape(number)}(?![\d.]\d)", _headings(page)):
                out.append(f"{before[-1]} has no heading §{number}")
    for match in _DOTTED.finditer(text):
        missing = _resolve_dotted(match.group().split("."))
        if missing:
            out.append(f"{match.group()}: {missing}")
    for match in _RELATIVE_MOD.finditer(text):
        dots = len(match.group(1)) - len(match.group(1).lstrip("."))
        package = _package_parts(path)
        base = package[: len(package) - dots + 1]
        tail = [p for p in match.group(1).lstrip(".").split(".") if p]
        if _module_file(base + tail) is None:
            out.append(f":mod:`{match.group(1)}` is not a module next to {path.name}")
    for match in _FILE.finditer(text):
        name = match.group(1)
        if name.startswith("docs/"):
            continue  # checked above
        places = (ROOT, PACKAGE, path.parent)
        if not any((place / name).exists() for place in places):
            out.append(f"{name} does not exist")
    return out


SOURCES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_pointer_in_the_source_exists(path: Path) -> None:
    found = [
        f"line {line}: {problem}"
        for line, text in _texts(path)
        for problem in problems_in(text, path)
    ]
    assert found == []


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("(REFERENCE" + " §1.3)", "REFERENCE"),  # split: the rewrite script must not touch it
        ("see docs/no-such-page.md", "does not exist"),
        ("docs/reference.md §7.99", "no heading §7.99"),
        ("docs/reference.md §1.1-1.9", "no heading §1.9"),
        ("a bare §1.3", "no page"),
        ("ADR-" + "9999", "does not exist"),  # split: the ADR index test scans this file
        ("ADR-0100 §42", "no item 42"),
        ("docs/reference.md §1.1; ADR-0100 §3 and §7.99", "no heading §7.99"),
        ("akchat_fsm.core.session.Step", "has no 'session'"),  # the dangling pointer of 967f7f2
        ("akchat_fsm.core.state.NoSuchStep", "has no 'NoSuchStep'"),
        (":mod:`.no_such_module`", "not a module"),
        ("see session/_no_such_file.py", "does not exist"),
        ("models/no_such_model.pml", "does not exist"),
    ],
)
def test_the_pointer_check_bites(text: str, problem: str) -> None:
    problems = problems_in(text, PACKAGE / "core" / "effects.py")
    assert any(problem in found for found in problems), problems


def test_good_pointers_pass() -> None:
    text = (
        "docs/reference.md §1.1, §5.3-5.4 and §7.17; ADR-0100 §3; "
        "akchat_fsm.core.state.Step; :mod:`.records`; session/_state.py; models/gen_promela.py"
    )
    assert problems_in(text, PACKAGE / "core" / "effects.py") == []
