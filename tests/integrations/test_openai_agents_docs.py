"""docs/integrations/openai-agents.md runs as written, against the real SDK.

(tests/test_docs_examples.py runs the pages directly under docs/; this page lives one level
down, so it is run here with the same conventions: blocks in order, one namespace.)
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "openai-agents.md"
FENCE = re.compile(r"```python\n(.*?)```", flags=re.S)


def test_the_page_is_linked_from_the_docs_index() -> None:
    index = (PAGE.parents[1] / "README.md").read_text(encoding="utf-8")
    assert "(integrations/openai-agents.md)" in index


def test_every_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    blocks = [b for b in FENCE.findall(PAGE.read_text(encoding="utf-8"))]
    runnable = [b for b in blocks if not b.startswith("# not run:")]
    assert len(runnable) >= 2
    namespace: dict[str, object] = {"__name__": "docs_openai_agents"}
    for index, block in enumerate(runnable):
        exec(compile(block, f"{PAGE.name}[{index}]", "exec"), namespace)
    assert namespace["sent"] == ["ann@example.com", "ann@example.com", "bob@example.com"]
