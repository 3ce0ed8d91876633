"""The documentation indexes list every page and every decision record."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_every_adr_is_listed_in_the_adr_index() -> None:
    index = (DOCS / "adr" / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\((\d{4}-[^)]+\.md)\)", index))
    on_disk = {p.name for p in (DOCS / "adr").glob("[0-9][0-9][0-9][0-9]-*.md")}
    assert on_disk - linked == set(), "ADRs missing from docs/adr/README.md"
    assert linked - on_disk == set(), "docs/adr/README.md links ADRs that do not exist"


def test_adr_numbers_are_unique() -> None:
    numbers = [p.name[:4] for p in (DOCS / "adr").glob("[0-9][0-9][0-9][0-9]-*.md")]
    assert len(numbers) == len(set(numbers))


def test_every_page_is_listed_in_the_docs_index() -> None:
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    pages = {p.name for p in DOCS.glob("*.md")} - {"README.md"}
    missing = {page for page in pages if f"]({page})" not in index}
    assert missing == set()


ROOT = DOCS.parent
#: Where an "ADR-NNNN" may be mentioned: everything that ships or documents the project.
_MENTIONING = (
    "src",
    "tests",
    "docs",
    "models",
    "scripts",
    "benchmarks",
    "README.md",
    "CHANGELOG.md",
)


def _folded() -> set[str]:
    """The numbers of the records folded into docs pages (the table at the end of the index)."""
    index = (DOCS / "adr" / "README.md").read_text(encoding="utf-8")
    section = index.split("## Folded into the docs", 1)[1]
    return set(re.findall(r"^\| (\d{4}) \|", section, flags=re.M))


def _mentioning_files() -> list[Path]:
    files: list[Path] = []
    for name in _MENTIONING:
        path = ROOT / name
        if path.is_file():
            files.append(path)
        else:
            suffixes = {".py", ".md", ".pml", ".txt", ".toml", ".ini", ".json"}
            files.extend(p for p in path.rglob("*") if p.is_file() and p.suffix in suffixes)
    return files


def test_folded_numbers_are_never_reused() -> None:
    folded = _folded()
    assert folded, "the folded table is missing from docs/adr/README.md"
    on_disk = {p.name[:4] for p in (DOCS / "adr").glob("[0-9][0-9][0-9][0-9]-*.md")}
    assert folded & on_disk == set()


def test_every_adr_mention_resolves_to_a_record_or_a_folded_page() -> None:
    known = {p.name[:4] for p in (DOCS / "adr").glob("[0-9][0-9][0-9][0-9]-*.md")} | _folded()
    dangling = set()
    for path in _mentioning_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for number in re.findall(r"\bADR[- ](\d{4})\b", text):
            if number not in known:
                dangling.add(f"{path.relative_to(ROOT)}: ADR-{number}")
        for name in re.findall(r"(?:adr/|\]\()(\d{4}-[\w.-]+\.md)", text):
            if not (DOCS / "adr" / name).is_file():
                dangling.add(f"{path.relative_to(ROOT)}: {name}")
    assert dangling == set()
