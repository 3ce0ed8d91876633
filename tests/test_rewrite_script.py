"""scripts/rewrite_pointers.py: what it rewrites, that a second run changes nothing, and that
the tree needs no rewrite (so a merge that brings old imports or pointers back is caught)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "rewrite_pointers.py"
_spec = importlib.util.spec_from_file_location("rewrite_pointers", SCRIPT)
assert _spec is not None and _spec.loader is not None
rewrite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rewrite)

CORE_FILE = ROOT / "src" / "akchat_fsm" / "core" / "example.py"
WIRE_FILE = ROOT / "src" / "akchat_fsm" / "wire" / "example.py"
OLD = "REFERENCE"  # spelled apart so the script never rewrites this file


def test_js_imports_split_into_the_public_module_and_the_field_types() -> None:
    source = "from ..wire._js import MAX_SAFE_INTEGER, StrictStr, utf16_len as n\n"
    out = rewrite.rewrite_imports(CORE_FILE, source, rewrite._js_public())
    assert out == (
        "from ..wire._fields import StrictStr\n"
        "from ..wire.js import MAX_SAFE_INTEGER, utf16_len as n\n"
    )
    assert rewrite.rewrite_imports(CORE_FILE, out, rewrite._js_public()) == out


def test_metaclass_and_storage_imports_move_to_their_public_or_compat_homes() -> None:
    meta = "from pydantic._internal._model_construction import ModelMetaclass\n"
    out = rewrite.rewrite_imports(WIRE_FILE, meta, rewrite._js_public())
    assert out == "from ._pydantic_compat import ModelMetaclass\n"
    cas = "from ..storage._cas import check_session_id, now_ms\n"
    out = rewrite.rewrite_imports(CORE_FILE, cas, rewrite._js_public())
    assert out == "from ..storage.checks import check_session_id, now_ms\n"


def test_pointers_name_the_shipped_page_and_long_lines_are_rewrapped() -> None:
    source = (
        "def f() -> None:\n"
        f'    """Take the turn lease; ``False`` when busy or a replayed turn ({OLD} §9)."""\n'
        f"    # Rejections, in the order of the reference's resume steps ({OLD} §1.4): first\n"
        "    # the decode, then the identity.\n"
    )
    once = rewrite.rewrite_pointers_py(source, CORE_FILE)
    assert OLD not in once and "docs/reference.md §9" in once and "docs/reference.md §1.4" in once
    assert max(len(line) for line in once.splitlines()) <= 100
    assert rewrite.rewrite_pointers_py(once, CORE_FILE) == once
    compile(once, "example", "exec")


def test_docs_pages_get_a_relative_link() -> None:
    page = ROOT / "docs" / "adr" / "0001-example.md"
    text = f"as the reference does ({OLD} §1.3, {OLD}.md §7)"
    assert rewrite.rewrite_pointers_md(page, text) == (
        "as the reference does ([reference §1.3](../reference.md), [reference §7](../reference.md))"
    )


def test_the_tree_needs_no_rewrite() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
