"""Tests go through the package's public names; the few white-box suites are listed by name.

A test that imports a ``_private`` module or name pins an implementation detail: renaming it
breaks the test though no user could tell. Counted per file: ``from akchat_fsm.x._y import
...``, ``from akchat_fsm.x import _y`` and ``import akchat_fsm.x._y``. No test file may import
one unless :data:`WHITE_BOX` names it with the reason it must step the internals; that list
only shrinks (:data:`WHITE_BOX_PINNED`): test through the public behaviour, or export a name
that is a real user-facing API (with a docstring, pinned, in the docs), never to pass this.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).parent

#: The test files that step internals by design, each with why (paths relative to tests/).
WHITE_BOX: dict[str, str] = {
    # the stateful machines and their histories: they drive the session's own plans step by step
    "stateful/_machine.py": "the session state machine drives the resolution plans step by step",
    "stateful/test_adversarial.py": "an adversarial history replays the session's own plans",
    "stateful/test_bridge_protocol.py": "steps the bridge plans and their runtime port one effect"
    " at a time, crashing between any two",
    "stateful/test_late_writes.py": "late storage writes land between the steps of a plan",
    "stateful/test_suites_bite.py": "seeded bugs in the session's plans the stateful suites catch",
    # the model-to-code conformance driver
    "models/_conformance.py": "drives the session's resolution plans as the model's actions",
    "models/test_model_conformance.py": "replays model traces through the session's own plans",
    # CrossHair contract bites: seeded bugs refuted by the kernel's own contract predicates
    "core/contract_bites/claim_ignores_expiry.py": "a seeded bug checked by the claim contracts'"
    " predicates",
    "core/contract_bites/claim_reject_ignores_expiry.py": "a seeded bug checked by the claim"
    " contracts' predicates",
    "core/contract_bites/lease_ignores_busy.py": "a seeded bug checked by the lease contract's"
    " predicate",
    # code-only mutant bites: a check no public input can reach is fed the mutant directly
    "scenarios/test_race_bounded.py": "swaps in a resolution plan that calls upstream before its"
    " claim, to see the bounded race search refute it",
    "machines/test_facts.py": "feeds the import-time wire/table agreement check a drifted table",
    "testing/test_conformance.py": "shrinks the kit's own profile to one history worker, to see"
    " it refuse an uncontended history",
    "testing/test_linearizability.py": "runs each of the checker's search orders alone against"
    " brute force (the orders are no user option)",
    "cli/test_cli_demo.py": "breaks the demo's own fake upstream, to see its invariant check bite",
    # byte-exactness of the wire encoder's fast paths, and the one pydantic-internals shim
    "wire/test_to_json_fast_path.py": "the fast path's output against the JS-exact encoder,"
    " byte for byte",
    "wire/test_binding_text_cache.py": "the per-binding text cache against the binding encoder,"
    " byte for byte",
    "wire/test_pydantic_compat.py": "pins the shim over pydantic's private metaclass, to fail"
    " first on a pydantic upgrade",
}
#: ``len(WHITE_BOX)``: lower it when an entry goes, never raise it (30 files imported private
#: names before the list existed, with a ceiling instead of a list).
WHITE_BOX_PINNED = 18


def private_imports(source: str) -> list[str]:
    """The private ``akchat_fsm`` imports in ``source``, one string each."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[0] != "akchat_fsm":
                continue
            if any(part.startswith("_") for part in parts[1:]):
                found.append(node.module)
            found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "akchat_fsm" and any(p.startswith("_") for p in parts[1:]):
                    found.append(alias.name)
    return found


def _offenders() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path in sorted(TESTS.rglob("*.py")):
        hits = private_imports(path.read_text(encoding="utf-8"))
        if hits:
            out[str(path.relative_to(TESTS))] = hits
    return out


def test_no_test_outside_the_white_box_list_imports_a_private_name() -> None:
    outside = {path: hits for path, hits in _offenders().items() if path not in WHITE_BOX}
    listing = "\n".join(f"  {path}: {', '.join(hits)}" for path, hits in outside.items())
    assert not outside, (
        f"{len(outside)} test files import private akchat_fsm names; use the public API "
        f"instead (or export a real user-facing name):\n{listing}"
    )


def test_the_white_box_list_only_shrinks_and_holds_no_stale_entry() -> None:
    offenders = _offenders()
    listing = "\n".join(f"  {path}: {', '.join(hits)}" for path, hits in offenders.items())
    print(f"{len(offenders)} white-box test files import private akchat_fsm names:\n{listing}")
    assert len(WHITE_BOX) == WHITE_BOX_PINNED, "the white-box list may only shrink"
    stale = sorted(path for path in WHITE_BOX if path not in offenders)
    assert not stale, f"no longer white-box: remove them and lower WHITE_BOX_PINNED: {stale}"
    assert all(reason.strip() for reason in WHITE_BOX.values())


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from akchat_fsm.session._state import apply", ["akchat_fsm.session._state"]),
        ("from akchat_fsm.session import _confirm, reconcile", ["akchat_fsm.session._confirm"]),
        ("import akchat_fsm.cli._common as c", ["akchat_fsm.cli._common"]),
        ("from akchat_fsm.core.records import _busy", ["akchat_fsm.core.records._busy"]),
        ("from akchat_fsm.session import reconcile", []),
        ("from . import _flows", []),  # the tests' own helpers are not the package's
        ("from other._pkg import _x", []),
    ],
)
def test_the_counter_sees_each_form(source: str, expected: list[str]) -> None:
    assert private_imports(source) == expected
