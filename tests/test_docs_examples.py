"""Every ```python example in docs/ runs as written (doctest ``>>>`` blocks run via pytest's
doctest collection). A block whose first line is ``# not run: <reason>`` is a fragment or a
signature and says why; everything else is executed, in order, one namespace per page, in a
temporary working directory."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
FENCE = re.compile(r"```python\n(.*?)```", flags=re.S)


def _pages() -> dict[str, list[str]]:
    pages = {}
    for page in sorted(DOCS.glob("*.md")):
        blocks = [b for b in FENCE.findall(page.read_text(encoding="utf-8"))]
        runnable = [b for b in blocks if not b.startswith(("# not run:", ">>>"))]
        if runnable:
            pages[page.name] = runnable
    return pages


def test_fragments_say_why_they_are_not_run() -> None:
    for page in DOCS.glob("*.md"):
        for block in FENCE.findall(page.read_text(encoding="utf-8")):
            if block.startswith("# not run:"):
                assert len(block.splitlines()[0]) > len("# not run: ") + 5, page.name


@pytest.mark.parametrize("page", sorted(_pages()))
def test_examples_run(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # examples may create files (sessions.db)
    namespace: dict[str, object] = {"__name__": f"docs_{page.replace('-', '_')[:-3]}"}
    for index, block in enumerate(_pages()[page]):
        exec(compile(block, f"docs/{page}[{index}]", "exec"), namespace)
