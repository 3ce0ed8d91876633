"""Every ```python example in docs/integrations/ runs as written, with the conventions of
tests/test_docs_examples.py: one namespace per page, blocks in order, a temporary working
directory; a block whose first line is ``# not run: <reason>`` says why it is not run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = DOCS / "integrations"
FENCE = re.compile(r"```python\n(.*?)```", flags=re.S)


def _blocks(page: Path) -> list[str]:
    return FENCE.findall(page.read_text(encoding="utf-8"))


@pytest.mark.parametrize("page", sorted(p.name for p in PAGES.glob("*.md")))
def test_examples_run(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runnable = [b for b in _blocks(PAGES / page) if not b.startswith("# not run:")]
    assert runnable, f"{page} has no runnable example"
    namespace: dict[str, object] = {"__name__": f"docs_integrations_{page[:-3]}"}
    for index, block in enumerate(runnable):
        exec(compile(block, f"docs/integrations/{page}[{index}]", "exec"), namespace)


def test_fragments_say_why_and_pages_are_linked_from_the_index() -> None:
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    for page in PAGES.glob("*.md"):
        assert f"](integrations/{page.name})" in index, page.name
        for block in _blocks(page):
            if block.startswith("# not run:"):
                assert len(block.splitlines()[0]) > len("# not run: ") + 5, page.name
