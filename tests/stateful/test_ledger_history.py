"""Code -> model for the tool-execution ledger: workers and operators over ``ToolLedger``.

Three worker processes execute four tool calls (even ones a plain tool, odd ones declared
idempotent) through the real :class:`~akchat_fsm.integrations.ledger.ToolLedger` over one
record storage; an operator gives verdicts (``settle`` / ``settle_unknown``). Each ledger save
may crash the worker before or after it reaches the store, or end "outcome unknown" (applied, or
lost); a worker may crash inside its body, and a body may, as its side effect, let another
worker execute the same call or an operator settle it meanwhile (the interleavings that matter:
both happen while the claim is held). Every save and every body run is checked as it happens by
``_history.LedgerChecker`` against the generated ``EXECUTION_TABLE`` and ``body_once``
(docs/proof.md, "Code -> model").
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

from akchat_fsm.errors import AkchatError, OutcomeUnknown
from akchat_fsm.integrations.ledger import ToolLedger, ledger_key
from akchat_fsm.storage.memory import MemoryStorage

from ._history import OPERATOR, LedgerChecker

CALLS = ("call-0", "call-1", "call-2", "call-3")
IDEMPOTENT = {call: n % 2 == 1 for n, call in enumerate(CALLS)}
#: What a save's fault draw (0-9) means: mostly nothing.
SAVE_FAULTS = ("ok",) * 5 + ("crash-before", "crash-after", "unknown", "lost", "ok")
#: What happens inside a body: nothing, a crash after its side effect, a rival worker executing
#: the same call (and perhaps crashing inside its own body), an operator's "it ran" given
#: meanwhile (true: the body is running).
IN_BODY = ("", "", "crash", "rival", "rival-crash", "settle-ran")


class Crash(BaseException):
    """The worker process dies here (a ``BaseException``: nothing in the library catches it)."""


class FaultyRecords:
    """The record storage a worker sees: its next saves' faults, every save reported."""

    def __init__(self, inner: MemoryStorage, checker: LedgerChecker, faults: list[str]) -> None:
        self.inner, self.checker, self.faults = inner, checker, faults

    def load_record(self, session_id: str, key: str) -> Any:
        return self.inner.load_record(session_id, key)

    def list_records(self, session_id: str, prefix: str = "") -> list[str]:
        return self.inner.list_records(session_id, prefix)

    def delete_record(self, session_id: str, key: str) -> None:
        raise AssertionError("the ledger never deletes a record")

    def save_record(
        self,
        session_id: str,
        key: str,
        text: str,
        expected_version: int | None,
        *,
        processing: bool = False,
    ) -> bool:
        fault = self.faults.pop(0) if self.faults else "ok"
        if fault == "crash-before":
            raise Crash(f"crashed before saving {key}")
        if fault == "lost":
            raise OutcomeUnknown("injected: the save never reached the store")
        applied = self.inner.save_record(
            session_id, key, text, expected_version, processing=processing
        )
        self.checker.saved(key, text, expected_version, applied)
        if fault == "crash-after":
            raise Crash(f"crashed after saving {key}")
        if fault == "unknown":
            raise OutcomeUnknown("injected: the save applied, its reply was lost")
        return applied


class LedgerProtocol(RuleBasedStateMachine):
    """Workers and an operator over one ledger; the checker judges every step."""

    coverage: ClassVar[Counter[str]] = Counter()

    def __init__(self) -> None:
        super().__init__()
        self.session_id = f"lh-{uuid.uuid4().hex[:16]}"
        self.storage = MemoryStorage()
        self.history = LedgerChecker()

    def _ledger(self, owner: str, faults: list[str]) -> ToolLedger:
        storage = FaultyRecords(self.storage, self.history, faults)
        return ToolLedger(storage, self.session_id, owner=owner, clock=lambda: 1_000)

    def _execute(self, worker: int, call: str, faults: list[str], in_body: str) -> None:
        key = ledger_key(call)

        def body() -> str:
            self.history.body(key)
            self.coverage["body"] += 1
            if in_body == "crash":
                raise Crash("crashed inside the body, after its side effect")
            if in_body.startswith("rival"):
                # "rival" -> the rival does nothing in its own body; "rival-crash" -> it crashes
                # there (never "rival" again: a rival whose body runs must not recurse).
                rival = in_body.removeprefix("rival").removeprefix("-")
                self._execute((worker + 1) % 3, call, [], rival)
            elif in_body == "settle-ran":
                self._settle(call, ran=True, unknown_only=True)
            return f"done by w{worker}"

        with self.history.acting(f"w{worker}", idempotent=IDEMPOTENT[call]):
            try:
                self._ledger(f"w{worker}", faults).execute(
                    call, "send", {"n": 1}, body, idempotent=IDEMPOTENT[call]
                )
                self.coverage["execute:ok"] += 1
            except Crash:
                self.coverage["execute:crash"] += 1
            except AkchatError as error:
                self.coverage[f"execute:{type(error).__name__}"] += 1

    def _settle(self, call: str, *, ran: bool, unknown_only: bool) -> None:
        if not ran and self.history.ran_under(ledger_key(call)):
            # "It did not run" is the operator's knowledge, as "no claimant is alive" is the
            # host's for a release (the model does not let an operator say it falsely).
            return
        with self.history.acting(OPERATOR):
            ledger = self._ledger(OPERATOR, [])
            settle = ledger.settle_unknown if unknown_only else ledger.settle
            try:
                settle(call, ran=ran, result="settled")
                self.coverage[f"settle:{'ran' if ran else 'released'}"] += 1
            except AkchatError as error:
                self.coverage[f"settle:{type(error).__name__}"] += 1

    @rule(
        worker=st.integers(0, 2),
        call=st.sampled_from(CALLS),
        draws=st.lists(st.integers(0, 9), max_size=3),
        in_body=st.sampled_from(IN_BODY),
    )
    def execute(self, worker: int, call: str, draws: list[int], in_body: str) -> None:
        self._execute(worker, call, [SAVE_FAULTS[d] for d in draws], in_body)

    @rule(worker=st.integers(0, 2), call=st.sampled_from(CALLS))
    def abandon(self, worker: int, call: str) -> None:
        """A worker dies right after its first ledger save (its claim, if it claims): what
        operators settle, and what a rival finds with an unknown outcome."""
        self._execute(worker, call, ["crash-after"], "")

    @rule(call=st.sampled_from(CALLS), ran=st.booleans(), unknown_only=st.booleans())
    def settle(self, call: str, ran: bool, unknown_only: bool) -> None:
        self._settle(call, ran=ran, unknown_only=unknown_only)


#: A run must have exercised each of these (the derandomized default reaches them all).
FLOOR = ("body", "execute:ok", "execute:crash", "execute:ExecutionUnknown", "settle:released")


def run_ledger(machine: type[LedgerProtocol] = LedgerProtocol, **overrides: Any) -> Counter[str]:
    from hypothesis import settings

    coverage: Counter[str] = Counter()
    protocol = type("Ledger", (machine,), {"coverage": coverage})
    run_state_machine_as_test(protocol, settings=settings(settings(), **overrides))
    return coverage


def test_ledger_histories_are_runs_the_model_allows() -> None:
    coverage = run_ledger()
    print("coverage:", dict(sorted(coverage.items())))  # shown with -s
    missing = [what for what in FLOOR if not coverage[what]]
    assert not missing, f"the run never exercised {missing}: {sorted(coverage.items())}"
