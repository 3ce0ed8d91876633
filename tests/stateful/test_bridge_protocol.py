"""The pydantic-ai bridge under interleaving clients, crashes and unknown outcomes.

A Hypothesis ``RuleBasedStateMachine`` adds the bridge's steps to the resolution suite's
clients / crash / unknown-outcome rules: three clients, each with its own session object over
one real storage (memory, SQLite, PostgreSQL), run the bridge's real plans (decide → continue →
execute through the ledger → persist the run) one effect at a time, with the real pydantic-ai
agent (its ``FunctionModel``) behind the runtime port. Any step may apply with an unknown
outcome, fail before applying, or kill the client (before or after a write, or inside a tool
body before or after its side effect). Invariants after every step; at teardown every client
dies and a recovery (reconcile, operator verdicts from the side-effect truth, the humans'
decisions repeated) must leave every run completed, every approved call executed exactly once,
every execution approved and nothing processing.

Retention churn: the world may make decisions elsewhere in the same session (the host's own
confirmations, through a coordinator with a small ``keep_terminal``), so the oldest decided
confirmations of a waiting run are pruned from the envelope; the bridge must then read that
call's ``decided:`` record rather than propose it again (ADR-0103).

Reviewer edits (ADR-0135): ``edit`` approves a call for other arguments (``editable_tools``),
with the digest of the arguments shown, a stale digest, or hostile arguments; the runtime may
hand the bodies the model's arguments instead (``args:model``), which the execution guard must
refuse. Every body runs once, with the arguments of its call's deciding audit entry (the edit's,
or the model's for a plain approve); a refused edit writes nothing.

Code -> model: every save that reaches the store, every resume of the runtime and every tool
body is checked as it happens by ``_history.BridgeChecker`` (the run record against the
generated ``RUN_TABLE`` under its guards, each call's ledger record against
``EXECUTION_TABLE``, and the rules across records; docs/proof.md, "Code -> model"). Each
continuation claim holds a lease (``LEASE_MS``), so the sweep may meet a lease that has not
passed yet, which it must leave alone.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from akchat_fsm import ChatDefinition, arguments_digest, resume_chat_session
from akchat_fsm.errors import (
    AkchatError,
    ArgumentsMismatch,
    InvalidConfirmationToken,
    LimitExceeded,
)
from akchat_fsm.integrations._bridge import (
    BridgeContext,
    plan_continue,
    plan_decide,
    plan_edit,
    plan_start,
)
from akchat_fsm.integrations._bridge_io import ListRecords, LoadRecord, SaveRecord
from akchat_fsm.integrations._bridge_ports import BridgeSession, ExecutionGuard
from akchat_fsm.integrations._bridge_runs import (
    DECISION_PREFIX,
    RunRecord,
    RunState,
    decision_key,
    decision_status,
)
from akchat_fsm.integrations.ledger import AsyncToolLedger, ExecutionState, ToolLedger
from akchat_fsm.integrations.ledger import args_digest as ledger_digest
from akchat_fsm.integrations.pydantic_ai import PydanticAIBridge, _refusal, _Runtime
from akchat_fsm.machines.confirmation import ConfirmationEvent
from akchat_fsm.session.audit import plan_deciding_entry
from akchat_fsm.session.drivers import Ports, run_sync
from akchat_fsm.session.effects import (
    BridgeEffect,
    Load,
    ResumeRuntime,
    SaveSnapshot,
    StartRuntime,
)
from akchat_fsm.storage.memory import MemoryStorage
from akchat_fsm.storage.sqlite import SQLiteStorage
from akchat_fsm.testing.doubles import RecordingUpstream
from akchat_fsm.wire.enums import ConfirmationStatus

from ._bridge_world import (
    ChaosStorage,
    Crash,
    EditIgnoringRuntime,
    PlanStepper,
    Truth,
    build_agent,
    perform,
)
from ._history import OPERATOR, SWEEP, BridgeChecker, CheckedRuntime, CheckedStorage

CLIENTS = 3
TTL_MS = 150
#: How long a continuation claim holds without a renewal (a few ticks: the sweep meets leases
#: that hold and leases that passed).
LEASE_MS = 300
DEFINITION = ChatDefinition("bridge-stateful")
OPS = ("approve",) * 3 + ("edit",) * 3 + ("reject",) * 2
OPS += ("expire", "continue", "continue", "start")
#: The tools a reviewer may edit (the bridge's ``editable_tools``): the agent's only tool.
EDITABLE = frozenset({"act"})
#: What an ``edit`` sends, by the step's draw (0-19): mostly an edit of the arguments shown; a
#: digest of arguments the reviewer was not shown (``ArgumentsMismatch``); hostile arguments,
#: not a bounded JSON object (``LimitExceeded``). The refused two must write nothing.
EDIT_VARIANTS = ("valid",) * 16 + ("stale",) * 2 + ("hostile",) * 2
HOSTILE_ARGS: tuple[Any, ...] = (
    ["n", 1],  # not an object
    {"n": float("nan")},  # not JSON
    {"n": "x" * 20_000},  # a string past the input bound
    {"n": [[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]},  # past the depth bound
)
INTENTS = {
    "approve": ConfirmationEvent.APPROVE,
    "reject": ConfirmationEvent.REJECT,
    "expire": ConfirmationEvent.EXPIRE,
}
#: The fault a step's draw (0-19) means for the effect the client waits on: mostly none, so
#: operations reach the runtime; the runtime's steps (where the tool bodies run) fault most.
FAULTS: dict[str, tuple[str, ...]] = {
    "save": ("ok",) * 14
    + ("unknown",) * 2
    + ("unavailable", "crash-before")
    + ("crash-after",) * 2,
    "read": ("ok",) * 18 + ("unavailable", "crash-before"),
    # an observer event of a session plan the bridge composed: only a kill before it
    "emit": ("ok",) * 19 + ("crash-before",),
    # the runtime (start / resume): arm its first write (a ledger claim) or the tool body
    "runtime": ("ok",) * 6
    + ("w:unknown", "w:unavailable", "w:crash-before", "w:crash-after") * 2
    + ("body:crash-before", "body:crash-after") * 2
    + ("crash-before", "crash-after"),
}
# A resume that runs a reviewer's edit may also hand the bodies the model's arguments (a
# runtime that ignored ``override_args``): the guard must refuse the edited call.
FAULTS["runtime:edited"] = ("ok",) + ("args:model",) * 5 + FAULTS["runtime"][6:]  # draw 0: none
WORLD = ("",) * 6 + ("tick", "tick", "reconcile", "churn")
#: Retention churn: the host decides this many of its own confirmations, admitted through a
#: coordinator that keeps only ``CHURN_KEEP`` resolved records, so older ones are pruned.
CHURN_DECISIONS = 2
CHURN_KEEP = 1


def fault_table(effect: Any) -> tuple[str, ...]:
    """The faults a draw can mean for ``effect``."""
    if isinstance(effect, SaveRecord | SaveSnapshot):
        return FAULTS["save"]
    if isinstance(effect, LoadRecord | ListRecords | Load):
        return FAULTS["read"]
    if isinstance(effect, ResumeRuntime) and any(d.args is not None for d in effect.decisions):
        return FAULTS["runtime:edited"]
    return FAULTS["runtime" if isinstance(effect, StartRuntime | ResumeRuntime) else "emit"]


class _Client:
    def __init__(self) -> None:
        self.session: Any = None
        self.run: PlanStepper | None = None
        self.op = ""
        #: Who runs the current plan, for the history checker (a new name per plan).
        self.actor = ""
        #: An edit's variant (EDIT_VARIANTS), and the writes its plan sent (refused: none).
        self.variant = ""
        self.writes = 0

    @property
    def busy(self) -> bool:
        return self.run is not None and not self.run.done


class BridgeProtocol(RuleBasedStateMachine):
    """Subclasses set ``make_storage`` (a factory of the real adapter under test)."""

    make_storage: ClassVar[Callable[[], Any]]
    coverage: ClassVar[Counter[str]] = Counter()
    #: Check every step against the model (``_history.BridgeChecker``) as it happens; the bite
    #: tests of the invariants switch it off, so that the invariants bite on their own.
    check_history: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__()
        self.session_id = f"bp-{uuid.uuid4().hex[:16]}"
        self.history = BridgeChecker(self.clock)
        self.plans = 0
        self.raw = type(self).make_storage()
        if self.check_history:
            self.raw = CheckedStorage(self.raw, self.history)
        self.storage = ChaosStorage(self.raw)
        self.truth = Truth(on_body=self.history.body if self.check_history else None)
        self.agent = build_agent(self.truth)
        self.now = 1_000
        self.runs = 0
        self.clients = [_Client() for _ in range(CLIENTS)]
        self.terminal_seen: dict[str, ConfirmationStatus] = {}
        self.executed_seen: dict[str, Any] = {}
        self.completed_seen: dict[str, Any] = {}
        #: Calls whose confirmation was seen ``approved`` (it may be pruned by churn later).
        self.approved_seen: set[str] = set()
        #: Their bindings as last seen approved; the calls whose body's arguments were checked.
        self.approved_bindings: dict[str, Any] = {}
        self.args_checked: set[str] = set()
        self.binding_checked: set[str] = set()
        #: An invariant failed: teardown then only cleans up (its recovery may fail on what
        #: the failure left, and must not replace the failure Hypothesis reports).
        self.failed = False

    # ------------------------------------------------------------------ helpers
    def clock(self) -> int:
        return self.now

    def acting(self, actor: str) -> Any:
        """The checker's context for ``actor``'s steps (nothing when it is off)."""
        return self.history.acting(actor) if self.check_history else contextlib.nullcontext()

    def actor(self, kind: str) -> str:
        """A new process name: every plan is its own process to the checker."""
        self.plans += 1
        return f"{kind}.{self.plans}"

    def runtime(self, inner: Any) -> Any:
        return CheckedRuntime(inner, self.history) if self.check_history else inner

    def ctx(self, client: _Client) -> BridgeContext:
        """The client's plans compose its session's plans: their loads, saves and events are
        steps of the bridge plan, so a fault can fall between any two of them."""
        ledger = AsyncToolLedger(self.storage, self.session_id, owner="machine", clock=self.clock)
        session = BridgeSession(client.session, self.storage, TTL_MS)
        return BridgeContext(
            self.session_id,
            "pydantic-ai",
            "machine",
            self.clock,
            ledger,
            lease_ms=LEASE_MS,
            session=session,
        )

    def ports(self) -> Ports:
        # A new run's calls that need no approval run through the ledger too (none here).
        ledger = AsyncToolLedger(self.storage, self.session_id, owner="machine", clock=self.clock)
        guard = ExecutionGuard(ledger, frozenset())
        runtime = EditIgnoringRuntime(_Runtime(self.agent, guard), self.truth)
        return Ports(self.storage, runtime=self.runtime(runtime))

    def bridge(self) -> PydanticAIBridge:
        """A fault-free host (the recovery process, the humans at teardown)."""
        session = resume_chat_session(
            DEFINITION, session_id=self.session_id, storage=self.raw, clock=self.clock
        )
        bridge = _CheckedBridge(
            self.agent,
            session,
            self.raw,
            ttl_ms=TTL_MS,
            clock=self.clock,
            lease_ms=LEASE_MS,
            editable_tools=tuple(EDITABLE),
        )
        bridge.wrap = self.runtime
        return bridge

    def bindings(self) -> list[Any]:
        session = resume_chat_session(
            DEFINITION, session_id=self.session_id, storage=self.raw, clock=self.clock
        )
        return list(session.confirmations)

    def run_ids(self) -> list[str]:
        return [k[len("run:") :] for k in self.raw.list_records(self.session_id, "run:")]

    def run_record(self, run_id: str) -> RunRecord | None:
        return RunRecord.from_stored(self.raw.load_record(self.session_id, f"run:{run_id}"))

    def _plan(self, client: _Client, op: str, pick: int, draw: int = 0) -> Any:
        ctx = self.ctx(client)
        if op == "edit":
            return self._edit_plan(client, ctx, pick, draw)
        if op in INTENTS:
            bindings = self.bindings()
            live = [b.token for b in bindings if not b.status.is_terminal]
            tokens = (live if live and pick < 6 else [b.token for b in bindings]) or ["confirm-0"]
            reason = "no" if op == "reject" else None
            return plan_decide(ctx, tokens[pick % len(tokens)], INTENTS[op], reason, True)
        if op == "continue":
            runs = self.run_ids() or ["run-0"]
            return plan_continue(ctx, runs[pick % len(runs)], {})
        # start: a new run only once the newest one completed (one open run at a time)
        newest = self.run_record(f"run-{self.runs}")
        run_id = (
            f"run-{self.runs + 1}"
            if newest and newest.state is RunState.COMPLETED
            else f"run-{self.runs}"
        )
        return plan_start(ctx, run_id, (run_id,), {})

    def _edit_plan(self, client: _Client, ctx: BridgeContext, pick: int, draw: int) -> Any:
        """An edit of a live call (mostly), for ``{"n": 100 + pick}`` with the digest of the
        arguments shown; or, by ``draw``, a stale digest or hostile arguments."""
        client.variant = EDIT_VARIANTS[draw]
        bindings = self.bindings()
        live = [b for b in bindings if not b.status.is_terminal]
        chosen = (live if live and pick < 6 else bindings) or [None]
        binding = chosen[pick % len(chosen)]
        token = "confirm-0" if binding is None else binding.token
        shown = arguments_digest(binding.input if binding is not None else {})
        args: Any = {"n": 100 + pick}
        if client.variant == "stale":
            shown = arguments_digest({"n": -1 - pick})  # arguments the reviewer was not shown
        elif client.variant == "hostile":
            args = HOSTILE_ARGS[pick % len(HOSTILE_ARGS)]
        refusal = lambda call, b: _refusal(EDITABLE, b)  # noqa: E731
        return plan_edit(ctx, token, args, shown, None, True, None, "api", refusal)

    def _finish(self, client: _Client) -> None:
        run = client.run
        assert run is not None
        if not run.done:
            return
        self.gone(client.actor)
        if run.error is not None and not isinstance(run.error, AkchatError):
            raise run.error  # pydantic-ai or Python refused something: a bridge bug
        outcome = "ok" if run.error is None else type(run.error).__name__
        if client.op == "edit" and client.variant != "valid":
            # refused before anything is written (ADR-0135): not even a write was sent
            assert run.error is not None, f"a {client.variant} edit was accepted"
            sent = client.writes
            assert sent == 0, f"a refused {client.variant} edit sent {sent} writes"
            if client.variant == "hostile":
                assert isinstance(run.error, LimitExceeded), run.error
            else:  # or the token is gone (retention pruned it): refused before any write too
                assert isinstance(run.error, ArgumentsMismatch | InvalidConfirmationToken), (
                    run.error
                )
            outcome = f"refused:{outcome}"
        self.coverage[f"{client.op}:{outcome}"] += 1
        if client.op == "start" and run.error is None:
            self.runs = max(self.runs, int(run.result.run_id.split("-")[1]))

    # ------------------------------------------------------------------ rules
    @initialize()
    def start_first_run(self) -> None:
        actor = self.actor("host")
        with self.acting(actor):
            outcome = self.bridge().run("run-0", run_id="run-0")
        self.gone(actor)
        assert outcome.status == "paused" and len(outcome.pending) == 2

    @rule(
        c=st.integers(0, CLIENTS - 1),
        op=st.sampled_from(OPS),
        pick=st.integers(0, 7),
        draw=st.integers(0, 19),
        world=st.sampled_from(WORLD),
    )
    def advance(self, c: int, op: str, pick: int, draw: int, world: str) -> None:
        """Client ``c`` starts ``op`` (resuming first if it died) or performs its next effect,
        perhaps with a fault; ``world`` may first move the clock or run a recovery."""
        if world == "tick":
            self.now += 10 * (pick + 1)
        elif world == "reconcile" and not any(client.busy for client in self.clients):
            self.coverage["world:reconcile"] += 1
            self._recover_once()
        elif world == "churn" and not any(client.busy for client in self.clients):
            # Only between plans: a plan that read a binding before the prune and writes its
            # decision record after another read "no record" is a window ADR-0103 leaves open.
            self._churn()
        client = self.clients[c]
        if not client.busy:
            if client.session is None:
                client.session = resume_chat_session(
                    DEFINITION, session_id=self.session_id, storage=self.storage, clock=self.clock
                )
            client.op, client.variant, client.writes = op, "", 0
            client.actor = self.actor(f"c{c}")
            with self.acting(client.actor):
                client.run = PlanStepper(self._plan(client, op, pick, draw))
            self._finish(client)
            return
        self._step(client, draw)

    def gone(self, actor: str) -> None:
        if self.check_history:
            self.history.gone(actor)

    def _step(self, client: _Client, draw: int) -> None:
        run = client.run
        assert run is not None
        effect = run.next
        fault = fault_table(effect)[draw]
        name = type(effect).__name__
        self.coverage[f"effect:{name}"] += 1
        if fault_table(effect) is FAULTS["runtime:edited"]:
            self.coverage[f"effect:{name}:edited"] += 1
        if fault == "crash-before":
            return self._crash(client, f"before:{name}")
        if isinstance(effect, SaveRecord | SaveSnapshot | StartRuntime | ResumeRuntime):
            client.writes += 1
        if fault == "args:model":
            self.truth.ignore_edits = True
        elif fault.startswith("w:"):
            # the runtime's first ledger write (the lease renewal before it is not armed)
            self.storage.armed, self.storage.armed_for = fault[2:], "call:"
        elif fault.startswith("body:"):
            self.truth.body_mode = fault[5:]
        elif fault in ("unknown", "unavailable", "crash-after"):
            self.storage.armed = fault
        with self.acting(client.actor):
            try:
                value = perform(effect, self.ports())
                if fault == "crash-after" and isinstance(effect, BridgeEffect):
                    raise Crash()  # the call returned; the process died before using the result
                if isinstance(effect, LoadRecord) and effect.key.startswith(DECISION_PREFIX):
                    self.coverage[f"read:decided:{'found' if value is not None else 'none'}"] += 1
            except Crash:
                return self._crash(client, f"in:{name}:{fault}")
            except Exception as exc:
                self.coverage[f"thrown:{type(exc).__name__}"] += 1
                run.throw(exc)
            else:
                run.feed(value)
            finally:
                self.storage.armed, self.storage.armed_for, self.truth.body_mode = "", "", ""
                self.truth.ignore_edits = False
        self._finish(client)

    def _crash(self, client: _Client, where: str) -> None:
        self.coverage[f"crash:{where}"] += 1
        if client.run is not None and not client.run.done:
            client.run.crash()
        client.run, client.session = None, None
        self.gone(client.actor)

    def _churn(self) -> None:
        """Decisions elsewhere in the same session: the host proposes and rejects its own
        tool calls through a coordinator that keeps ``CHURN_KEEP`` resolved records, so each
        admission prunes older decided confirmations (a waiting run's among them)."""
        self.coverage["world:churn"] += 1
        session = resume_chat_session(
            DEFINITION, session_id=self.session_id, storage=self.raw, clock=self.clock
        )
        decided_before = {
            b.tool_call_id for b in session.confirmations if b.status.is_terminal
        } & self.bridged_calls()
        host = session.confirmations_for(RecordingUpstream(), keep_terminal=CHURN_KEEP)
        actor = self.actor("host")
        with self.acting(actor):
            for i in range(CHURN_DECISIONS):
                host.reject(host.propose("host_tool", {"n": i}).token, reason="host churn")
        self.gone(actor)
        left = {b.tool_call_id for b in self.bindings()}
        if decided_before - left:
            self.coverage["churn:pruned"] += 1

    def bridged_calls(self) -> set[str]:
        """The tool call ids of every stored run's approval calls."""
        return {
            call.tool_call_id
            for run_id in self.run_ids()
            if (record := self.run_record(run_id)) is not None
            for call in record.approvals
        }

    def recorded_decisions(self) -> dict[str, ConfirmationStatus]:
        """The ``decided:`` records of the bridged calls, by call id."""
        found: dict[str, ConfirmationStatus] = {}
        for call_id in self.bridged_calls():
            status = decision_status(self.raw.load_record(self.session_id, decision_key(call_id)))
            if status is not None:
                found[call_id] = status
        return found

    def _recover_once(self) -> None:
        """What a host runs after a crash, with no live claimant: reconcile, then settle the
        unknown executions the way an operator would (from the side-effect truth)."""
        bridge = self.bridge()
        sweep = self.actor(SWEEP)
        with self.acting(sweep):
            report = bridge.reconcile()
        self.gone(sweep)
        for outcome in report.confirmations:
            self.coverage[f"reconcile:{outcome.action}"] += 1
        for run in report.runs:
            self.coverage[f"reconcile:run:{run.status}"] += 1
        for entry in report.execution_unknown:
            self.coverage["reconcile:execution_unknown"] += 1
            ran = self.truth.executions[entry.tool_call_id] == 1
            with self.acting(OPERATOR):
                bridge.settle_execution(entry.tool_call_id, ran=ran, result="did (settled)")

    # ------------------------------------------------------------------ invariants
    @invariant()
    def bridge_invariants(self) -> None:
        try:
            self._invariants()
        except AssertionError:
            self.failed = True  # teardown's recovery must not replace this failure
            raise

    def _invariants(self) -> None:
        bindings = {b.tool_call_id: b for b in self.bindings()}
        now_approved = {
            c: b for c, b in bindings.items() if b.status is ConfirmationStatus.APPROVED
        }
        self.approved_seen |= set(now_approved)
        self.approved_bindings.update(now_approved)
        for call_id, n in self.truth.executions.items():
            assert n <= 1, f"{call_id} ran {n} times"
            binding = bindings.get(call_id)
            # pruned by churn: it must have been seen approved before
            approved = (
                binding.status is ConfirmationStatus.APPROVED
                if binding is not None
                else call_id in self.approved_seen
            )
            assert approved, f"{call_id} ran without an approved record: {binding}"
        self.check_body_arguments()
        for binding in bindings.values():
            seen = self.terminal_seen.get(binding.token)
            if seen is not None:
                assert binding.status is seen, f"{binding.token}: {seen} became {binding.status}"
            elif binding.status.is_terminal:
                self.terminal_seen[binding.token] = binding.status
        entries = ToolLedger(self.raw, self.session_id).entries()
        self.check_ledger_arguments(entries)
        for entry in entries:
            if entry.state is ExecutionState.EXECUTED:
                seen_result = self.executed_seen.setdefault(entry.tool_call_id, entry.result)
                assert entry.result == seen_result, f"{entry.tool_call_id}'s result changed"
        for run_id in self.run_ids():
            record = self.run_record(run_id)
            if record is not None and record.state is RunState.COMPLETED:
                output = self.completed_seen.setdefault(run_id, record.output)
                assert record.output == output, f"{run_id} completed twice differently"
        # A call whose decision the bridge recorded is never asked again: its confirmation,
        # when the envelope still (or again) holds one, says what the record says.
        for call_id, status in self.recorded_decisions().items():
            binding = bindings.get(call_id)
            assert binding is None or binding.status is status, (
                f"{call_id} was decided {status.value} (its decision record) and is now "
                f"{binding.status.value}: proposed again"
            )

    def deciding_args(self, call_id: str) -> tuple[bool, Any]:
        """(an edit?, the arguments to run) of an approved call, from its deciding entry."""
        binding = self.approved_bindings[call_id]
        entry = run_sync(plan_deciding_entry(self.session_id, binding), Ports(self.raw))
        if entry is not None and entry.is_edit:
            return True, entry.edited_args
        return False, binding.input

    def check_ledger_arguments(self, entries: Any) -> None:
        """Each approved call's ledger entry is bound to the arguments of its deciding entry
        (the claim comes before the body: a wrong binding shows even when no body ran). Read
        once per call: the binding of a recorded call never changes."""
        for entry in entries:
            call_id = entry.tool_call_id
            if call_id in self.binding_checked or call_id not in self.approved_bindings:
                continue
            edited, args = self.deciding_args(call_id)
            assert entry.args_digest == ledger_digest(dict(args)), (
                f"the ledger binds {call_id} to other arguments than its deciding entry's "
                f"({'an edit' if edited else 'a plain approve'}: {dict(args)})"
            )
            self.binding_checked.add(call_id)

    def check_body_arguments(self) -> None:
        """Each body ran with its call's deciding audit entry's arguments: the reviewer's
        edit, or the model's for a plain approve (read once per call: a decided call's entry
        never changes)."""
        for call_id, ran in self.truth.ran_with.items():
            if call_id in self.args_checked:
                continue
            edited, args = self.deciding_args(call_id)
            wanted = args["n"]
            assert ran == [wanted], (
                f"{call_id} ran with n={ran}; its deciding entry "
                f"({'an edit' if edited else 'a plain approve'}) says n={wanted}"
            )
            self.coverage[f"body:{'edited' if edited else 'as-proposed'}"] += 1
            self.args_checked.add(call_id)

    def teardown(self) -> None:
        if self.failed:
            with contextlib.suppress(Exception):
                self._teardown()
            return
        self._teardown()

    def _teardown(self) -> None:
        try:
            for client in self.clients:
                if client.busy:
                    self._crash(client, "teardown")
            self._let_leases_pass()
            for _ in range(4):  # recovery, then the humans finish deciding, until all settle
                self._recover_once()
                bridge = self.bridge()
                for binding in self.bindings():
                    if binding.status is ConfirmationStatus.PENDING:
                        # expired meanwhile (AlreadyResolved): an expiry is a decision too
                        with contextlib.suppress(AkchatError), self.host():
                            bridge.approve(binding.token)
                for run_id in self.run_ids():
                    with self.host():
                        bridge.continue_run(run_id)
            self.final_checks()
        finally:
            close = getattr(self.raw, "close", None)
            if close is not None and getattr(type(self), "close_each", False):
                close()

    def _let_leases_pass(self) -> None:
        """Every claimant is gone: wait until the last continuation lease has passed (and no
        longer, so that the humans still find pending calls to approve)."""
        leases = [
            record.lease_until_ms
            for run_id in self.run_ids()
            if (record := self.run_record(run_id)) is not None
            and record.state is RunState.CONTINUING
            and record.lease_until_ms is not None
        ]
        self.now = max([self.now, *leases])

    @contextlib.contextmanager
    def host(self) -> Any:
        """One call of the fault-free host, as its own process."""
        actor = self.actor("host")
        try:
            with self.acting(actor):
                yield
        finally:
            self.gone(actor)

    def final_checks(self) -> None:
        # decided calls proposed again with no decision record (ADR-0103's open window)
        self.coverage["reopened"] += len(self.history.reopened)
        self.bridge_invariants()
        bindings = {b.tool_call_id: b for b in self.bindings()}
        for call_id, binding in bindings.items():
            assert not binding.status.is_processing, f"{call_id} left {binding.status}"
            expected = 1 if binding.status is ConfirmationStatus.APPROVED else 0
            assert self.truth.executions[call_id] == expected, (
                f"{call_id} is {binding.status.value} and ran {self.truth.executions[call_id]}"
            )
        for call_id in self.approved_seen - set(bindings):  # approved, then pruned by churn
            assert self.truth.executions[call_id] == 1, (
                f"{call_id} was approved (then pruned) and ran {self.truth.executions[call_id]}"
            )
        ledger = {e.tool_call_id: e for e in ToolLedger(self.raw, self.session_id).entries()}
        for call_id, binding in bindings.items():
            if binding.status is ConfirmationStatus.APPROVED:
                entry = ledger.get(call_id)
                assert entry is not None and entry.state is ExecutionState.EXECUTED, (
                    f"{call_id} is approved but its execution is not recorded"
                )
        for run_id in self.run_ids():
            record = self.run_record(run_id)
            assert record is not None and record.state is RunState.COMPLETED, (run_id, record)
        assert self.raw.list_processing() == [], "something was left processing"


class _CheckedBridge(PydanticAIBridge):
    """The host's bridge, its runtime port reported to the history checker."""

    wrap: Callable[[Any], Any] = staticmethod(lambda inner: inner)

    def _runtime(self) -> Any:
        return self.wrap(super()._runtime())


#: A run must have exercised each of these (a key, or a key prefix ending in ':') at least
#: once, or it proves nothing: kills inside the runtime (a ledger write, a tool body), unknown
#: outcomes, completed continuations, recoveries of unknown executions. The generated run
#: reaches them only by chance (it depends on the seed); ``pinned_program`` drives each one
#: on every run, so the floor only fails when the bridge made a point unreachable.
FLOOR = (
    "effect:SaveSnapshot",
    "effect:ResumeRuntime",
    "effect:SaveRecord",
    "crash:in:ResumeRuntime:body:",
    "crash:in:ResumeRuntime:w:",
    "crash:in:SaveSnapshot:",
    "thrown:OutcomeUnknown",
    "continue:ok",
    "approve:ok",
    "reconcile:execution_unknown",
    "reconcile:run:continuing",
    "churn:pruned",
    "read:decided:found",
    "edit:ok",
    "edit:refused:ArgumentsMismatch",
    "edit:refused:LimitExceeded",
    "thrown:ArgumentsMismatch",  # the guard refused an edited call handed other arguments
    "body:edited",
)


def _is(kind: type) -> Callable[[Any], bool]:
    return lambda effect: isinstance(effect, kind)


def _start_and_step_to(
    m: BridgeProtocol, c: int, op: str, wanted: Callable[[Any], bool], world: str = ""
) -> None:
    """Idle client ``c`` (after ``world``) starts ``op`` and performs its effects with no
    fault until the next one is ``wanted`` (it must get there: a plan that cannot is a
    finding)."""
    assert not m.clients[c].busy, f"client {c} is still busy"
    m.advance(c, op, 0, 0, world)  # draw 0: no fault, whatever the effect
    m.bridge_invariants()
    while m.clients[c].busy and not wanted(m.clients[c].run.next):  # type: ignore[union-attr]
        m.advance(c, op, 0, 0, "")
        m.bridge_invariants()
    assert m.clients[c].busy, f"client {c}'s {op} finished before reaching the wanted effect"


def _reached(coverage: Counter[str], point: str) -> int:
    """How often ``point`` (a key, or a key prefix ending in ':') was exercised."""
    return sum(
        n
        for key, n in coverage.items()
        if key == point or (point.endswith(":") and key.startswith(point))
    )


def _step(m: BridgeProtocol, c: int, fault: str = "ok", world: str = "", hits: str = "") -> None:
    """Busy client ``c`` performs its next effect with ``fault`` (one that fits the effect);
    that step must exercise the floor point ``hits``, if named."""
    run = m.clients[c].run
    assert run is not None and not run.done, f"client {c} is idle"
    before = _reached(m.coverage, hits)
    m.advance(c, "continue", 0, fault_table(run.next).index(fault), world)
    m.bridge_invariants()
    assert not hits or _reached(m.coverage, hits) > before, f"{fault} never reached {hits}"


def _finish(m: BridgeProtocol, c: int) -> None:
    while m.clients[c].busy:
        _step(m, c)


def _run(
    m: BridgeProtocol,
    c: int,
    op: str,
    world: str = "",
    hits: tuple[str, ...] = (),
    pick: int = 0,
) -> None:
    """Idle client ``c`` (after ``world``) runs ``op`` (on the ``pick``-th target) to its
    end, with no fault; that must exercise each floor point of ``hits``."""
    assert not m.clients[c].busy, f"client {c} is still busy"
    before = [_reached(m.coverage, point) for point in hits]
    m.advance(c, op, pick, 0, world)  # draw 0: no fault, whatever the effect
    m.bridge_invariants()
    _finish(m, c)
    after = [_reached(m.coverage, point) for point in hits]
    missed = [point for point, b, a in zip(hits, before, after, strict=True) if a == b]
    assert not missed, f"{op} never reached {missed}"


def _edit(m: BridgeProtocol, c: int, variant: str, hits: str) -> None:
    """Idle client ``c`` sends an edit of ``variant`` and runs it to its end, with no fault."""
    before = _reached(m.coverage, hits)
    m.advance(c, "edit", 0, EDIT_VARIANTS.index(variant), "")
    m.bridge_invariants()
    _finish(m, c)
    assert _reached(m.coverage, hits) > before, f"a {variant} edit never reached {hits}"


def pinned_program(machine: type[BridgeProtocol]) -> None:
    """One fixed program through the machine's own rule, invariants after every step, that
    drives every ``FLOOR`` point whatever the seed of the generated run: each fault waits for
    the effect it is meant for (so the program follows the plans, not a count of their
    steps). Should the bridge make a point unreachable, the program stops short of it (an
    assertion here) or the floor misses it."""
    m = machine()
    try:
        m.start_first_run()
        m.bridge_invariants()
        # an approval dies after its write applied; a recovery finishes it
        _start_and_step_to(m, 2, "approve", _is(SaveSnapshot))  # the claim (CAS#1)
        _step(m, 2, "crash-after", hits="crash:in:SaveSnapshot:")
        # approving the other call continues the run, which dies inside the first tool body
        # after its side effect; a sweep leaves its lease alone until it passes, then finds
        # that execution unknown and settles it; a client continues the run to its end
        _start_and_step_to(m, 0, "approve", _is(ResumeRuntime), world="reconcile")
        _step(m, 0, "body:crash-after", hits="crash:in:ResumeRuntime:body:")
        _run(m, 1, "continue", "reconcile", hits=("reconcile:run:continuing",))
        m.now += LEASE_MS
        _run(m, 1, "continue", "reconcile", hits=("reconcile:execution_unknown", "continue:ok"))
        # a new run, whose first record save applies with an unknown outcome
        _start_and_step_to(m, 0, "start", lambda effect: isinstance(effect, SaveRecord))
        _step(m, 0, "unknown", hits="thrown:OutcomeUnknown")
        _finish(m, 0)
        # one call approved (the run waits, so its decision is recorded); decisions elsewhere
        # in the session prune that confirmation; approving the other call reads the pruned
        # one's decision record and continues the run, which dies before its ledger claim
        # applies
        _run(m, 0, "approve", hits=("approve:ok",))
        before = [_reached(m.coverage, p) for p in ("churn:pruned", "read:decided:found")]
        _start_and_step_to(m, 1, "approve", _is(ResumeRuntime), world="churn")
        after = [_reached(m.coverage, p) for p in ("churn:pruned", "read:decided:found")]
        assert all(a > b for a, b in zip(after, before, strict=True)), (before, after)
        _step(m, 1, "w:crash-before", hits="crash:in:ResumeRuntime:w:")
        # the sweep finishes that run; a new one's calls are edited (ADR-0135): a stale digest
        # and hostile arguments are refused with nothing written; an edit of one call waits
        # for the other; the second edit's continuation hands the bodies the model's
        # arguments, which the guard refuses; the next continuation runs both with the edits
        m.now += LEASE_MS
        m._recover_once()
        _run(m, 0, "start")
        _edit(m, 0, "stale", hits="edit:refused:ArgumentsMismatch")
        _edit(m, 0, "hostile", hits="edit:refused:LimitExceeded")
        _run(m, 0, "edit", hits=("edit:ok",))
        _start_and_step_to(m, 1, "edit", _is(ResumeRuntime))
        _step(m, 1, "args:model", hits="thrown:ArgumentsMismatch")
        _finish(m, 1)
        newest = m.run_ids().index(f"run-{m.runs}")
        _run(m, 2, "continue", hits=("continue:ok", "body:edited"), pick=newest)
    except BaseException:
        # the program's own failure is the finding: a teardown that fails after it (its
        # recovery meeting what the failure left) must not replace it
        with contextlib.suppress(Exception):
            m.teardown()
        raise
    m.teardown()


def run_bridge_protocol(
    make_storage: Callable[[], Any], check_history: bool = True, **overrides: Any
) -> Counter[str]:
    coverage: Counter[str] = Counter()
    machine = type(
        "Protocol",
        (BridgeProtocol,),
        {
            "make_storage": staticmethod(make_storage),
            "coverage": coverage,
            "check_history": check_history,
        },
    )
    run_state_machine_as_test(machine, settings=settings(settings(), **overrides))
    print("coverage:", dict(sorted(coverage.items())))  # shown with -s
    pinned_program(machine)
    missing = [what for what in FLOOR if not _reached(coverage, what)]
    assert not missing, f"the run never exercised {missing}: {sorted(coverage.items())}"
    return coverage


def test_bridge_protocol_in_memory() -> None:
    run_bridge_protocol(MemoryStorage, stateful_step_count=80)


def test_bridge_protocol_sqlite(tmp_path: Path) -> None:
    store = SQLiteStorage(tmp_path / "sessions.db")
    try:
        run_bridge_protocol(lambda: store, stateful_step_count=80)
    finally:
        store.close()


@pytest.mark.postgres
def test_bridge_protocol_postgres(pg_url: str) -> None:
    import psycopg

    from akchat_fsm.storage.postgres import PostgresStorage

    table = f"bp_{uuid.uuid4().hex[:12]}"
    store = PostgresStorage(pg_url, table=table)
    try:
        run_bridge_protocol(lambda: store, stateful_step_count=80)
    finally:
        store.close()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}, {table}__records")


def test_the_suite_bites_a_bridge_that_runs_bodies_without_the_ledger(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same machine with a seeded bug: the tool hook runs the body first and only then
    records it in the ledger (a tool executed without its claim). The invariants must catch a
    body run twice after a crash or a racing continuation."""
    from hypothesis import Phase
    from hypothesis.errors import Flaky

    from akchat_fsm.integrations import pydantic_ai

    async def unguarded(self: Any, ctx: Any, **kw: Any) -> Any:
        value = await kw["handler"](kw["args"])  # the side effect, before any claim
        call = kw["call"]
        await self.guard.execute(
            call.tool_call_id, call.tool_name, call.args_as_dict(), lambda: value
        )
        return value

    monkeypatch.setattr(pydantic_ai._LedgerCapability, "wrap_tool_execute", unguarded)
    with pytest.raises((AssertionError, Flaky, BaseExceptionGroup)) as caught:
        run_bridge_protocol(
            MemoryStorage,
            False,  # the invariants on their own (the checker's layer: test_suites_bite.py)
            stateful_step_count=80,
            max_examples=200,
            phases=(Phase.explicit, Phase.generate),  # a failure is the point; skip shrinking
        )
    errors: list[BaseException] = [caught.value]
    every = [caught.value]
    while any(isinstance(e, BaseExceptionGroup) for e in errors):
        errors = [x for e in errors for x in getattr(e, "exceptions", [e])]
        every += errors
    # A body run outside the ledger shows as a body run twice, or (when the call was edited)
    # as a body run with the model's arguments instead of its deciding entry's.
    caught_it = re.compile(r"ran [2-9]\d* times|ran with n=.*an edit")
    assert any(caught_it.search(str(e)) for e in errors), errors
    # The failure carries the program that replays it (Hypothesis attaches it as notes):
    # nothing between the machine and pytest may swallow it.
    program = "\n".join(note for e in every for note in getattr(e, "__notes__", []))
    assert "state = Protocol()" in program and "state.advance(" in program, program[:2000]


@pytest.mark.redis
def test_bridge_protocol_redis(redis_url: str) -> None:
    from akchat_fsm.storage.redis import RedisStorage

    store = RedisStorage(redis_url, prefix=f"bp:{uuid.uuid4().hex[:12]}:")
    try:
        run_bridge_protocol(lambda: store, stateful_step_count=80)
    finally:
        store.close()


def test_the_suite_bites_a_bridge_that_ignores_its_decision_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same machine with a seeded bug: readiness never reads the ``decided:`` records, so
    a waiting run's call whose confirmation retention pruned looks unproposed and is proposed
    again (the reviewer asked twice). The pinned program prunes one on every run; the
    invariants must catch the second proposal."""
    from hypothesis import Phase
    from hypothesis.errors import Flaky

    from akchat_fsm.integrations import _bridge

    def no_records(ctx: Any, calls: Any) -> Any:
        return {}, {}  # no statuses, no edits
        yield  # a plan that reads nothing

    monkeypatch.setattr(_bridge, "_recorded_decisions", no_records)
    with pytest.raises((AssertionError, Flaky, BaseExceptionGroup)) as caught:
        run_bridge_protocol(
            MemoryStorage,
            False,  # the invariants on their own (the checker's layer: test_suites_bite.py)
            stateful_step_count=80,
            max_examples=20,
            phases=(Phase.explicit, Phase.generate),  # a failure is the point; skip shrinking
        )
    errors: list[BaseException] = [caught.value]
    while any(isinstance(e, BaseExceptionGroup) for e in errors):
        errors = [x for e in errors for x in getattr(e, "exceptions", [e])]
    assert any("proposed again" in str(e) for e in errors), errors
