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
