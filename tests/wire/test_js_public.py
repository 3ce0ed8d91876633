"""``akchat_fsm.wire.js``: the public JavaScript-exact rules (ADR-0117).

Its ``__all__`` is pinned like the package's; each name says which JavaScript behaviour it
mirrors, and a few rows pin that behaviour where Python's own answer differs.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from akchat_fsm.wire import js

# A change here is a change to the public API: make it on purpose, and note it in the changelog.
EXPECTED = [
    "DATETIME_PATTERN", "IDENTIFIER_PATTERN", "MAX_SAFE_INTEGER", "as_safe_int",
    "escape_surrogates", "has_surrogate", "is_identifier", "is_zod_datetime", "js_form",
    "js_number_to_string", "utf16_len",
]  # fmt: skip


def test_all_is_pinned_and_sorted() -> None:
    assert js.__all__ == EXPECTED
    assert sorted(js.__all__) == js.__all__


def test_the_module_docstring_maps_every_name_to_its_javascript_behaviour() -> None:
    table = js.__doc__ or ""
    for name in js.__all__:
        assert f"``{name}``" in table, name


def test_every_public_function_has_a_docstring() -> None:
    functions = [getattr(js, n) for n in js.__all__ if inspect.isfunction(getattr(js, n))]
    assert len(functions) == 8
    assert all(inspect.getdoc(f) for f in functions)


def test_the_public_module_is_plain_python() -> None:
    # Hosts may lean on it without pydantic's API: only the standard library is imported.
    tree = ast.parse(Path(js.__file__).read_text(encoding="utf-8"))
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= {"__future__", "math", "re"}


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda: js.utf16_len("a\U0001f600"), 3),  # Python's len() says 2
        (lambda: js.utf16_len("\ud800"), 1),  # a lone surrogate is one code unit
        (lambda: js.as_safe_int(1.0), 1),
        (lambda: js.as_safe_int(True), None),  # Python's bool is an int; JS's is not a number
        (lambda: js.as_safe_int(2**53), None),
        (lambda: js.is_identifier("a\n"), False),  # Python's `$` would accept the newline
        (lambda: js.is_identifier("é"), False),
        (lambda: js.is_zod_datetime("2026-07-11T00:00Z"), True),  # zod 4.4.3 minutes-only
        (lambda: js.is_zod_datetime("1900-02-29T00:00:00Z"), False),
        (lambda: js.js_number_to_string(1e21), "1e+21"),  # Python: 1e+21 too, but...
        (lambda: js.js_number_to_string(1e20), "100000000000000000000"),  # ...Python: 1e+20
        (lambda: js.js_number_to_string(1.5e-7), "1.5e-7"),  # Python: 1.5e-07
        (lambda: js.js_form("\ud83d\ude00"), "\U0001f600"),
        (lambda: js.escape_surrogates('"\ud800"'), '"\\ud800"'),
        (lambda: js.has_surrogate("\U0001f600"), False),
    ],
)
def test_javascript_answers(call: object, expected: object) -> None:
    assert call() == expected  # type: ignore[operator]
