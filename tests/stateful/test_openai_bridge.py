"""The OpenAI Agents SDK bridge under interleaved decisions, crashes and unknown outcomes.

A Hypothesis ``RuleBasedStateMachine`` drives the real ``openai-agents`` package (scripted
model) through the bridge: reviewers approve, reject or let calls expire in any order; any
storage write may crash the client before or after it applies, report an unknown outcome, or
fail; a tool body may crash after its side effect; the host continues runs and reconciles
(an operator settling unknown executions from the truth). Each rule is a fresh client, as
another process would be. Checked after every step: no tool body ran twice, and no gated
body ran without an ``approved`` confirmation. At the end everything is recovered and every
approved call ran exactly once, every rejected or expired call never, nothing is processing.

Code -> model: every save that reaches the store, every resume of the runtime and every tool
body is checked as it happens by ``_history.BridgeChecker`` (docs/proof.md, "Code -> model").
"""

from __future__ import annotations

import contextlib
import sys
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from agents import Agent, RunConfig, function_tool
from agents.tool_context import ToolContext
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from akchat_fsm.errors import AkchatError
from akchat_fsm.integrations.openai_agents import OpenAIAgentsBridge
from akchat_fsm.session import ChatDefinition, resume_chat_session
from akchat_fsm.storage.memory import MemoryStorage
from akchat_fsm.storage.sqlite import SQLiteStorage
from akchat_fsm.wire.enums import ConfirmationStatus
from cleanup import sql_tables

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integrations"))
from oai_models import ScriptedModel

from ._history import OPERATOR, SWEEP, BridgeChecker, CheckedRuntime, CheckedStorage

DEFINITION = ChatDefinition("oai-stateful")
TTL_MS = 60_000
#: Two gated calls and an ungated sibling, then one more gated call: two batches in one run.
BATCHES = [
    [("send_email", {"to": "a@x"}), ("lookup", {"q": "z"}), ("send_email", {"to": "b@x"})],
    [("send_email", {"to": "c@x"})],
]
#: What the next storage write does: mostly nothing; otherwise one fault.
FAULTS = ("",) * 4 + ("crash-before", "crash-after", "unknown", "unavailable")

#: A run must have exercised each of these, or it proves nothing. The generated run reaches
#: them only by chance (it depends on the seed); ``pinned_programs`` drives each one on every
#: run, so the floor only fails when the bridge made a point unreachable.
FLOOR = (
    "approve:ok",
    "reject:ok",
    "expire:ok",
    "fault:crash-before",
    "fault:crash-after",
    "fault:unknown",
    "body:crash-after",
    "recover:settled-unknown",
)


class Crash(BaseException):
    """The client's process dies here: nothing handles it, only what was written survives."""


class ChaosStorage:
    """A real storage whose next write can be armed to crash, to apply and report an unknown
    outcome (a driver exception after the write), or to fail before applying."""

    def __init__(self, inner: Any, coverage: Counter[str]) -> None:
        self.inner, self.coverage, self.armed = inner, coverage, ""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _write(self, write: Callable[[], bool]) -> bool:
        fault, self.armed = self.armed, ""
        if fault:
            self.coverage[f"fault:{fault}"] += 1
        if fault == "crash-before":
            raise Crash()
        if fault == "unavailable":
            raise ConnectionError("refused before the write")
        applied = write()
        if fault == "crash-after":
            raise Crash()
        if fault == "unknown":
            raise TimeoutError("timed out after the write was sent")
        return applied

    def save(self, snapshot: Any, expected: int | None) -> bool:
        return self._write(lambda: bool(self.inner.save(snapshot, expected)))

    def save_record(self, *args: Any, **kwargs: Any) -> bool:
        return self._write(lambda: bool(self.inner.save_record(*args, **kwargs)))


class _CheckedBridge(OpenAIAgentsBridge):
    """The bridge with its runtime port reported to the history checker."""

    wrap: Callable[[Any], Any] = staticmethod(lambda inner: inner)

    def _runtime(self) -> Any:
        return self.wrap(super()._runtime())


class OpenAIBridgeProtocol(RuleBasedStateMachine):
    make_storage: ClassVar[Callable[[], Any]]
    coverage: ClassVar[Counter[str]]
    #: Check every step against the model (``_history.BridgeChecker``) as it happens.
    check_history: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__()
        self.history = BridgeChecker(self._clock)
        self.processes = 0
        raw = self.make_storage()
        if self.check_history:
            raw = CheckedStorage(raw, self.history)
        self.storage = ChaosStorage(raw, self.coverage)
        self.session_id = f"s{uuid.uuid4().hex[:16]}"  # one store serves every example
        self.now = 1_000_000
        #: The truth outside the library: how often each tool body's side effect happened.
        self.executed: Counter[str] = Counter()
        self.body_fault = ""
        self.agent = Agent(name="assistant", model=ScriptedModel(BATCHES), tools=self._tools())
        with self._process("host"):
            outcome = self._bridge().run("mail them", run_id="r1")
        assert outcome.status == "paused"

    @contextlib.contextmanager
    def _process(self, kind: str) -> Any:
        """One bridge call, as its own process to the history checker (gone at its end)."""
        self.processes += 1
        actor = f"{kind}.{self.processes}"
        if not self.check_history:
            yield
            return
        try:
            with self.history.acting(actor):
                yield
        finally:
            self.history.gone(actor)

    def _body(self, call_id: str) -> None:
        if self.check_history:
            self.history.body(call_id)

    def _tools(self) -> list[Any]:
        @function_tool(needs_approval=True)
        def send_email(ctx: ToolContext[Any], to: str) -> str:
            """Send an email."""
            fault, self.body_fault = self.body_fault, ""
            self._body(ctx.tool_call_id)
            self.executed[ctx.tool_call_id] += 1
            if fault:
                self.coverage[f"body:{fault}"] += 1
                raise Crash()
            return f"sent to {to}"

        @function_tool
        def lookup(ctx: ToolContext[Any], q: str) -> str:
            """Look something up."""
            self._body(ctx.tool_call_id)
            self.executed[ctx.tool_call_id] += 1
            return f"found {q}"

        return [send_email, lookup]

    def _bridge(self) -> OpenAIAgentsBridge:
        session = resume_chat_session(
            DEFINITION, session_id=self.session_id, storage=self.storage, clock=self._clock
        )
        bridge = _CheckedBridge(
            self.agent,
            session,
            self.storage,
            run_config=RunConfig(tracing_disabled=True),
            ttl_ms=TTL_MS,
            clock=self._clock,
        )
        if self.check_history:
            bridge.wrap = lambda inner: CheckedRuntime(inner, self.history)
        return bridge

    def _clock(self) -> int:
        return self.now

    def _bindings(self) -> dict[str, Any]:
        session = resume_chat_session(DEFINITION, session_id=self.session_id, storage=self.storage)
        return {b.tool_call_id: b for b in session.confirmations}

    def _act(self, what: str, fault: str, action: Callable[[OpenAIAgentsBridge], object]) -> None:
        self.storage.armed = fault
        try:
            with self._process("p"):
                action(self._bridge())
            self.coverage[f"{what}:ok"] += 1
        except Crash:
            self.coverage[f"{what}:crash"] += 1
        except AkchatError as exc:
            self.coverage[f"{what}:{type(exc).__name__}"] += 1
        finally:
            self.storage.armed = ""

    # ------------------------------------------------------------------ rules
    @rule(index=st.integers(0, 2), approve=st.booleans(), fault=st.sampled_from(FAULTS))
    def decide(self, index: int, approve: bool, fault: str) -> None:
        bindings = list(self._bindings().values())
        if index >= len(bindings):
            return
        token = bindings[index].token
        if approve:
            self._act("approve", fault, lambda b: b.approve(token))
        else:
            self._act("reject", fault, lambda b: b.reject(token, "not this one"))

    @rule(fault=st.sampled_from(FAULTS))
    def expire(self, fault: str) -> None:
        self.now += TTL_MS
        self._act("expire", fault, lambda b: b.expire_due())

    @rule()
    def crash_the_next_body(self) -> None:
        """Armed until a body runs: the next side effect happens, then its process dies."""
        self.body_fault = "crash-after"

    @rule(fault=st.sampled_from(FAULTS))
    def continue_run(self, fault: str) -> None:
        self._act("continue", fault, lambda b: b.continue_run("r1"))

    @rule()
    def reconcile(self) -> None:
        try:
            self._recover_once()
        except Crash:  # an armed body crash fired in the reconciler's continuation
            self.coverage["reconcile:crash"] += 1

    # ------------------------------------------------------------------ invariants
    @invariant()
    def no_body_ran_twice(self) -> None:
        assert all(n <= 1 for n in self.executed.values()), self.executed

    @invariant()
    def no_gated_body_ran_without_an_approval(self) -> None:
        bindings = self._bindings()
        for call_id in self.executed:
            if call_id in bindings:  # a gated call (the ungated sibling has no confirmation)
                assert bindings[call_id].status is ConfirmationStatus.APPROVED, call_id

    # ------------------------------------------------------------------ recovery
    def _recover_once(self) -> None:
        """Reconcile; an operator settles each unknown execution from the truth."""
        bridge = self._bridge()
        with self._process(SWEEP):
            report = bridge.reconcile()
        for entry in report.execution_unknown:
            ran = self.executed[entry.tool_call_id] > 0
            with self._operator():
                bridge.settle_execution(entry.tool_call_id, ran=ran, result="settled")
            self.coverage["recover:settled-unknown"] += 1

    def _operator(self) -> Any:
        return self.history.acting(OPERATOR) if self.check_history else contextlib.nullcontext()

    def teardown(self) -> None:
        """Recover everything; the reviewers decide what is still pending (approve)."""
        self.storage.armed = self.body_fault = ""
        for _ in range(8):
            self._recover_once()
            pending = [
                b for b in self._bindings().values() if b.status is ConfirmationStatus.PENDING
            ]
            for binding in pending:
                # an unknown execution: settled next round
                with contextlib.suppress(AkchatError), self._process("host"):
                    self._bridge().approve(binding.token)
            run = self._bridge().run_record("r1")
            if run is not None and run.state.value == "completed" and not pending:
                break
        run = self._bridge().run_record("r1")
        assert run is not None and run.state.value == "completed", run
        bindings = self._bindings()
        assert len(bindings) == 3  # both batches were bound
        for call_id, binding in bindings.items():
            expected = 1 if binding.status is ConfirmationStatus.APPROVED else 0
            assert self.executed[call_id] == expected, (call_id, binding.status, self.executed)
        assert [s.session_id for s in self.storage.list_processing()] == []


def _then_check(m: OpenAIBridgeProtocol, *steps: tuple[Callable[[], object], str]) -> None:
    """Each step, then the invariants; a step must exercise the floor points it names
    (space-separated)."""
    for step, points in steps:
        before = {point: m.coverage[point] for point in points.split()}
        step()
        m.no_body_ran_twice()
        m.no_gated_body_ran_without_an_approval()
        missed = [point for point, n in before.items() if m.coverage[point] == n]
        assert not missed, f"the pinned step never reached {missed}"


def pinned_programs(machine: type[OpenAIBridgeProtocol]) -> None:
    """Two fixed programs through the machine's own rules, invariants after every step, that
    drive every ``FLOOR`` point whatever the seed of the generated run (which reaches them
    only by chance). Should the bridge make a point unreachable, a step says so."""
    m = machine()
    try:
        _then_check(
            m,
            # the approval's write never applies; then it applies with an unknown outcome,
            # which the bridge settles
            (lambda: m.decide(0, True, "crash-before"), "fault:crash-before"),
            (lambda: m.decide(0, True, "unknown"), "fault:unknown approve:ok"),
            (m.crash_the_next_body, ""),
            # deciding the last call continues the run: the approved body dies after acting
            (lambda: m.decide(1, False, ""), "body:crash-after"),
            (m.reconcile, "recover:settled-unknown"),  # the operator settles it
            (lambda: m.continue_run(""), ""),  # the second batch: one more gated call
            (lambda: m.expire(""), "expire:ok"),
        )
    finally:
        m.teardown()
    m = machine()
    try:
        _then_check(
            m,
            (lambda: m.decide(0, True, "crash-after"), "fault:crash-after"),
            (lambda: m.decide(1, False, ""), "reject:ok"),
        )
    finally:
        m.teardown()


def run_protocol(make_storage: Callable[[], Any]) -> None:
    coverage: Counter[str] = Counter()
    machine = type(
        "Protocol",
        (OpenAIBridgeProtocol,),
        {"make_storage": staticmethod(make_storage), "coverage": coverage},
    )
    run_state_machine_as_test(machine, settings=settings(settings(), deadline=None))
    print("coverage:", dict(sorted(coverage.items())))  # shown with -s
    pinned_programs(machine)
    missing = [what for what in FLOOR if not coverage[what]]
    assert not missing, f"the run never exercised {missing}: {sorted(coverage.items())}"


def test_openai_bridge_in_memory() -> None:
    run_protocol(MemoryStorage)


def test_openai_bridge_sqlite(tmp_path: Path) -> None:
    store = SQLiteStorage(tmp_path / "sessions.db")
    try:
        run_protocol(lambda: store)
    finally:
        store.close()


def test_openai_bridge_postgres(pg_url: str) -> None:
    import psycopg

    from akchat_fsm.storage.postgres import PostgresStorage

    table = f"oai_{uuid.uuid4().hex[:12]}"
    store = PostgresStorage(pg_url, table=table)
    try:
        run_protocol(lambda: store)
    finally:
        store.close()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {sql_tables(table)}")
