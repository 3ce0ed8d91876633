"""The LangGraph bridge under interleaved decisions, crashes and unknown outcomes, on
LangGraph's own checkpointers.

A Hypothesis ``RuleBasedStateMachine`` drives the real ``langgraph`` / ``langchain`` packages
(``create_agent`` with per-call HITL and the bridge's boundary, the scripted offline model of
:mod:`lg_agents`) through the bridge. Several host "processes" share the session's store and
LangGraph's checkpointer (``SqliteSaver`` on one file, or ``PostgresSaver`` in one schema):
each has its own checkpointer connection and its own graph object, and each rule is a fresh
bridge of one of them. Reviewers approve, reject (with a reason) or let calls expire in any
order; any of a process's writes to the session's store (envelope ``save`` or ``save_record``:
audit entries, decisions, run claims, ledger claims and outcomes, the run's persist) may crash
before or after it applies, apply with an unknown outcome, or fail; one of its checkpointer
writes (``put`` / ``put_writes``) may crash before or after; a tool body may crash after its
side effect, or another process may try to continue the run while a body runs; a host may
resume an old paused checkpoint id through LangGraph itself (a fork), answering "approve" to
every interrupt under the bridge's guard, or answer the head's interrupts through LangGraph
itself, approving (refused by the boundary) or rejecting (LangGraph keeps that answer and runs
on): the bridge's continuation must still carry the session's decisions (ADR-0138; the two
tests at the end of this file pin the two shapes). A crashed process writes nothing
more (LangGraph may swallow an exception on its own writer thread: the process is dead all
the same). The host continues runs, the start-up sweep
(``reconcile_all`` with the bridge hook) runs, and an operator settles unknown executions
from the truth.

Checked after every step: no tool body ran twice, no gated body ran without an ``approved``
decision recorded in the session, and every tool message the model was handed is its call's
own outcome (the body's result for an approved call, the reviewer's reason for a rejected
one, the expiry sentence for an expired one, nothing for an undecided one). At the end the
recovery (sweep, operator, continue) leaves the run completed or waiting for a person, then the
reviewers decide what is left and the run completes with the output a crash-free run gives:
every approved call ran exactly once, every rejected or expired call never, nothing is
processing.

Code -> model: every save that reaches the store, every resume of the runtime and every tool
body is checked as it happens by ``_history.BridgeChecker`` (docs/proof.md, "Code -> model").
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from langgraph.types import Command

from akchat_fsm import reconcile_all
from akchat_fsm.errors import AkchatError, OutcomeUnknown, StorageUnavailable
from akchat_fsm.integrations.langgraph import LangGraphBridge, use_guard
from akchat_fsm.session import ChatDefinition, resume_chat_session
from akchat_fsm.session.sweep import SweepPorts
from akchat_fsm.storage.capabilities import saves_with_records
from akchat_fsm.storage.sqlite import SQLiteStorage
from akchat_fsm.wire.enums import ConfirmationStatus

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integrations"))
from lg_agents import GATED, Call, Counts, build_graph, open_saver
from process_helpers import PEOPLES_STEPS

from ._history import OPERATOR, SWEEP, BridgeChecker, CheckedRuntime, CheckedStorage

DEFINITION = ChatDefinition("lg-stateful")
#: Long enough that no call falls due while an example runs; ``expire`` moves the clock by it.
TTL_MS = 300_000
#: The host processes sharing the session's store and LangGraph's checkpointer.
HOSTS = 2
USER = {"messages": [{"role": "user", "content": "pay and mail them"}]}
#: The model's first turn: two gated calls and an ungated sibling (which runs before the
#: pause); once they are answered, one more gated call and an ungated one (run in the
#: continuation that pauses again); then it answers with every result.
FIRST = (
    Call("send_email", {"to": "a@x"}, "c1"),
    Call("lookup", {"order": "o-1"}, "u1"),
    Call("pay", {"amount": 5}, "c2"),
)
THEN = ((Call("send_email", {"to": "c@x"}, "c3"), Call("lookup", {"order": "o-2"}, "u2")),)
CALLS = {c.id: c for c in (*FIRST, *THEN[0])}
#: What each body returns, and the line :class:`lg_agents.Counts` is given for it.
RESULTS = {"c1": "sent to a@x", "u1": "order o-1 shipped", "c2": "paid 5", "c3": "sent to c@x"}
RESULTS["u2"] = "order o-2 shipped"
BODY_OF = {f"{c.tool}:{next(iter(c.args.values()))}": c.id for c in CALLS.values()}
#: Each call's reviewer gives one reason, so the reason the model reads is known.
REASONS = {call: f"not {call}, please" for call in CALLS}
EXPIRED = "The approval request for this tool call expired; it was not run."
#: What a host answering a pause through LangGraph itself (``answer_the_head``) rejects with.
FOREIGN = "someone else says no"
#: What a process's armed write does: mostly nothing; otherwise one fault.
FAULTS = ("",) * 4 + ("crash-before", "crash-after", "unknown", "unavailable")

#: A run must have exercised each of these, or it proves nothing. The generated run reaches
#: them only by chance; ``pinned_programs`` drives each one on every run, so the floor only
#: fails when the bridge made a point unreachable.
FLOOR = (
    "approve:ok",
    "reject:ok",
    "expire:ok",
    "fault:crash-before",
    "fault:crash-after",
    "fault:unknown",
    "fault:unavailable",
    "saver:crash-before",
    "saver:crash-after",
    "body:crash-after",
    "race:continuing",
    "fork:ConfirmationError",
    "head:ConfirmationError",
    "head:ok",
    "sweep:took-over",
    "recover:settled-unknown",
)


def expected(call: str, status: ConfirmationStatus | None) -> str:
    """The tool message the model must be handed for ``call`` once decided ``status``."""
    tool = CALLS[call].tool
    if status is ConfirmationStatus.REJECTED:
        return f"User rejected the tool call for `{tool}` with reason: {REASONS[call]}"
    if status is ConfirmationStatus.EXPIRED:
        return f"User rejected the tool call for `{tool}` with reason: {EXPIRED}"
    return RESULTS[call]


class Crash(BaseException):
    """The process dies here: nothing handles it, only what was written survives."""


class ChaosStorage:
    """A real storage whose ``at``-th write from now (envelope ``save`` or ``save_record``)
    can be armed to crash before or after applying, to apply and report an unknown outcome,
    or to fail before applying; once the process is dead, every write crashes. Spells out
    each method it forwards (a runtime-checkable protocol does not see ``__getattr__``)."""

    def __init__(self, inner: Any, machine: LangGraphBridgeProtocol) -> None:
        self.inner, self.machine = inner, machine
        self.fault, self.at = "", 0

    def arm(self, fault: str, at: int) -> None:
        self.fault, self.at = fault, at if fault else 0

    def _write(self, write: Callable[[], bool]) -> bool:
        self.machine.hold()
        if self.machine.dead:
            raise Crash()
        fault = ""
        if self.at:
            self.at -= 1
            if self.at == 0:
                fault, self.fault = self.fault, ""
        if fault:
            self.machine.fired(f"fault:{fault}")
        if fault == "crash-before":
            self.machine.die()
        if fault == "unavailable":
            raise StorageUnavailable("injected: nothing applied")
        applied = write()
        if fault == "crash-after":
            self.machine.die()
        if fault == "unknown":
            raise OutcomeUnknown("injected: applied, outcome unknown")
        return applied

    def load(self, session_id: str) -> Any:
        return self.inner.load(session_id)

    def save(self, snapshot: Any, expected_cursor: int | None) -> bool:
        return self._write(lambda: bool(self.inner.save(snapshot, expected_cursor)))

    def delete(self, session_id: str) -> None:
        self.inner.delete(session_id)

    def load_record(self, session_id: str, key: str) -> Any:
        return self.inner.load_record(session_id, key)

    def save_record(self, *args: Any, **kwargs: Any) -> bool:
        return self._write(lambda: bool(self.inner.save_record(*args, **kwargs)))

    def list_records(self, session_id: str, prefix: str = "") -> list[str]:
        return list(self.inner.list_records(session_id, prefix))

    def delete_record(self, session_id: str, key: str) -> None:
        self.machine.hold()
        if self.machine.dead:
            raise Crash()
        self.inner.delete_record(session_id, key)

    def list_processing(self, **options: Any) -> Any:
        return self.inner.list_processing(**options)

    def list_pending(self, *args: Any, **options: Any) -> Any:
        return self.inner.list_pending(*args, **options)

    def close(self) -> None:
        """The test closes the real store once, after every example."""


class Hosts:
    """The host processes of one test, shared by its examples (each example has its own
    session and LangGraph thread): per host, a checkpointer connection of its own on the one
    checkpoint database, and a graph object on it. Every tool body and checkpointer write
    reports to the example's machine (``machine``)."""

    def __init__(self, saver_spec: str, mode: str = "per_call") -> None:
        self.machine: LangGraphBridgeProtocol | None = None
        self.counts: list[Counts] = []
        self.graphs: list[Any] = []
        self.closers: list[Callable[[], None]] = []
        for _ in range(HOSTS):
            saver, close = open_saver(saver_spec)
            self.closers.append(close)
            for name in ("put", "put_writes"):
                setattr(saver, name, self._saver_write(getattr(saver, name)))
            counts = Counts(inside=self._body)
            self.counts.append(counts)
            self.graphs.append(build_graph(FIRST, counts, saver, then=THEN, mode=mode))

    def _body(self, text: str) -> None:
        assert self.machine is not None
        self.machine.body(BODY_OF[text])

    def _saver_write(self, write: Callable[..., Any]) -> Callable[..., Any]:
        def checked(*args: Any, **kwargs: Any) -> Any:
            assert self.machine is not None
            return self.machine.saver_write(lambda: write(*args, **kwargs))

        return checked

    def close(self) -> None:
        for close in self.closers:
            close()


class _CheckedBridge(LangGraphBridge):
    """The bridge with its runtime port reported to the history checker."""

    wrap: Callable[[Any], Any] = staticmethod(lambda inner: inner)

    def _runtime(self) -> Any:
        return self.wrap(super()._runtime())


class LangGraphBridgeProtocol(RuleBasedStateMachine):
    store: ClassVar[Any]
    hosts: ClassVar[Hosts]
    coverage: ClassVar[Counter[str]]
    #: Check every step against the model (``_history.BridgeChecker``) as it happens.
    check_history: ClassVar[bool] = True
    #: HITL in batched mode (``run_protocol(..., mode="batched")``).
    batched: ClassVar[bool] = False
    #: The bridge under test (a bite test swaps in a broken one).
    bridge_class: ClassVar[type[LangGraphBridge]] = _CheckedBridge

    def __init__(self) -> None:
        super().__init__()
        self.history = BridgeChecker(self._clock)
        self.processes = 0
        raw = CheckedStorage(self.store, self.history) if self.check_history else self.store
        self.storage = ChaosStorage(raw, self)
        self.session_id = f"lg{uuid.uuid4().hex[:16]}"  # one store serves every example
        self.thread_id = f"t{uuid.uuid4().hex[:16]}"  # and one checkpoint database
        self.offset = 0
        #: The truth outside the library: how often each tool body's side effect happened.
        self.executed: Counter[str] = Counter()
        #: The calls a fault hit while they were being rejected (their reason may be lost:
        #: the model then reads the generic sentence).
        self.reject_faulted: set[str] = set()
        self.dead = False
        #: Held while a rival process runs inside a body (``_race``), and that rival's thread.
        self.quiet = threading.Lock()
        self.racer: int | None = None
        self.rejecting: str | None = None
        self.body_fault = ""
        self.saver_fault, self.saver_at = "", 0
        for counts in self.hosts.counts:
            counts.bodies.clear()
            counts.handed.clear()
        self.hosts.machine = self
        with self._process("host"):
            outcome = self._bridge(0).run(USER, thread_id=self.thread_id, run_id="r1")
        assert outcome.status == "paused", outcome
        assert sorted(b.tool_call_id for b in outcome.pending) == ["c1", "c2"]
        #: Every pause the run was saved at (the snapshot: its checkpoint id, interrupt ids).
        self.pauses = [json.loads(outcome.snapshot)]

    # ------------------------------------------------------------------ the world
    def _clock(self) -> int:
        # The adapters stamp their processing index with the wall clock, which the sweep's
        # cut-off is compared with: the session's clock runs from it (``expire`` moves it on).
        return time.time_ns() // 1_000_000 + self.offset

    def fired(self, point: str) -> None:
        self.coverage[point] += 1
        if self.rejecting is not None:
            self.reject_faulted.add(self.rejecting)

    def die(self) -> None:
        """The acting process dies: it writes nothing more, runs no more bodies."""
        self.dead = True
        raise Crash()

    def body(self, call: str) -> None:
        """A tool body's side effect (the truth), in whatever process runs it."""
        self.hold()
        if self.dead:
            raise Crash()
        if self.check_history:
            self.history.body(call)
        self.executed[call] += 1
        fault, self.body_fault = self.body_fault, ""
        if fault == "race":
            self._race()
        elif fault:
            self.coverage[f"body:{fault}"] += 1
            self.die()

    def saver_write(self, write: Callable[[], Any]) -> Any:
        """One of LangGraph's checkpointer writes, in the acting process."""
        if self.dead:
            raise Crash()
        fault = ""
        if self.saver_at:
            self.saver_at -= 1
            if self.saver_at == 0:
                fault, self.saver_fault = self.saver_fault, ""
        if fault:
            self.fired(f"saver:{fault}")
        if fault == "crash-before":
            self.die()
        result = write()
        if fault == "crash-after":
            self.die()
        return result

    def hold(self) -> None:
        """While a rival process runs (``_race``), the acting process's other threads wait
        before any write or body: the history checker follows one process at a time. A
        rival that needs them (it ran the graph while the continuation was live) fails."""
        if self.quiet.locked() and threading.get_ident() != self.racer:
            if not self.quiet.acquire(timeout=60):
                raise AssertionError("a rival ran the graph beside a live continuation")
            self.quiet.release()

    def _race(self) -> None:
        """While this body runs, another host process continues the same run (on a thread of
        its own: the body runs inside the boundary's event loop): it must find the run held
        and run nothing."""
        found: list[Any] = []

        def other() -> None:
            self.racer = threading.get_ident()
            with self._process("racer"):
                found.append(self._bridge(1).continue_run("r1"))

        saved = (self.storage.fault, self.storage.at, self.saver_fault, self.saver_at)
        self.storage.arm("", 0)
        self.saver_fault, self.saver_at = "", 0
        racer = threading.Thread(target=other)
        with self.quiet:
            racer.start()
            racer.join()
            self.racer = None
        self.storage.fault, self.storage.at, self.saver_fault, self.saver_at = saved
        assert [o.status for o in found] == ["continuing"], found
        self.coverage["race:continuing"] += 1

    @contextlib.contextmanager
    def _process(self, kind: str) -> Iterator[None]:
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

    def _operator(self) -> Any:
        return self.history.acting(OPERATOR) if self.check_history else contextlib.nullcontext()

    def _bridge(self, host: int, session: Any = None) -> LangGraphBridge:
        if session is None:
            session = resume_chat_session(
                DEFINITION, session_id=self.session_id, storage=self.storage, clock=self._clock
            )
        bridge = self.bridge_class(
            self.hosts.graphs[host], session, self.storage, ttl_ms=TTL_MS, clock=self._clock
        )
        if self.check_history and isinstance(bridge, _CheckedBridge):
            bridge.wrap = lambda inner: CheckedRuntime(inner, self.history)
        return bridge

    def _bindings(self) -> dict[str, Any]:
        session = resume_chat_session(DEFINITION, session_id=self.session_id, storage=self.store)
        return {b.tool_call_id: b for b in session.confirmations}

    def _act(
        self,
        what: str,
        host: int,
        fault: str,
        at: int,
        action: Callable[[LangGraphBridge], object],
        kind: str = "p",
    ) -> None:
        self.dead = False
        self.storage.arm(fault, at)
        try:
            with self._process(kind):
                action(self._bridge(host))
            # LangGraph may swallow a crash on its own writer thread; dead is dead.
            self.coverage[f"{what}:{'crash' if self.dead else 'ok'}"] += 1
        except Crash:
            self.coverage[f"{what}:crash"] += 1
        except AkchatError as exc:
            self.coverage[f"{what}:{type(exc).__name__}"] += 1
        finally:
            self.storage.arm("", 0)
            self.dead = False
            self.rejecting = None
        self._saw_pauses()

    # ------------------------------------------------------------------ rules
    @rule(
        index=st.integers(0, 2),
        approve=st.booleans(),
        host=st.integers(0, HOSTS - 1),
        fault=st.sampled_from(FAULTS),
        at=st.integers(1, 12),
    )
    def decide(self, index: int, approve: bool, host: int, fault: str, at: int) -> None:
        """A reviewer decides one call (the last decision of a batch continues the run: the
        armed write may be any of the decision's, the continuation's or the ledger's)."""
        bindings = sorted(self._bindings().values(), key=lambda b: b.tool_call_id)
        if index >= len(bindings):
            return
        token, call = bindings[index].token, bindings[index].tool_call_id
        if approve:
            self._act("approve", host, fault, at, lambda b: b.approve(token))
        else:
            self.rejecting = call
            self._act("reject", host, fault, at, lambda b: b.reject(token, REASONS[call]))

    @rule(host=st.integers(0, HOSTS - 1), fault=st.sampled_from(FAULTS), at=st.integers(1, 8))
    def expire(self, host: int, fault: str, at: int) -> None:
        self.offset += TTL_MS
        self._act("expire", host, fault, at, lambda b: b.expire_due())

    @rule(host=st.integers(0, HOSTS - 1), fault=st.sampled_from(FAULTS), at=st.integers(1, 8))
    def continue_run(self, host: int, fault: str, at: int) -> None:
        self._act("continue", host, fault, at, lambda b: b.continue_run("r1"))

    @rule(fault=st.sampled_from(("crash-after", "race")))
    def arm_the_next_body(self, fault: str) -> None:
        """Armed until a body runs: its side effect happens, then its process dies; or
        another process tries to continue the run meanwhile."""
        self.body_fault = fault

    @rule(when=st.sampled_from(("crash-before", "crash-after")), at=st.integers(1, 6))
    def crash_a_checkpointer_write(self, when: str, at: int) -> None:
        """Armed until reached: the ``at``-th checkpointer write from now (``put`` or
        ``put_writes``, any process's) kills its process before or after it applies."""
        self.saver_fault, self.saver_at = when, at

    @rule(host=st.integers(0, HOSTS - 1), fault=st.sampled_from(FAULTS), at=st.integers(1, 8))
    def sweep(self, host: int, fault: str, at: int) -> None:
        self._act("sweep", host, fault, at, lambda b: self._sweep(host), kind=SWEEP)

    @rule()
    def operator_settles(self) -> None:
        self._settle()

    @rule(index=st.integers(0, 2), host=st.integers(0, HOSTS - 1))
    def fork_an_old_pause(self, index: int, host: int) -> None:
        """A host drives LangGraph itself and resumes an old paused checkpoint id (a fork),
        answering every interrupt "approve" (under the bridge's guard, holding no decision):
        the boundary must refuse every gated call, replay what already ran, and the bridge
        must still finish the run from the thread's head."""
        pause = self.pauses[index % len(self.pauses)]
        graph = self.hosts.graphs[host]
        head = graph.get_state({"configurable": {"thread_id": self.thread_id}}).config
        if head["configurable"]["checkpoint_id"] == pause["checkpoint_id"]:
            return  # not a fork: ``answer_the_head`` answers the head's own interrupts
        fork_of = {"thread_id": self.thread_id, "checkpoint_id": pause["checkpoint_id"]}
        config = {"configurable": fork_of}
        asked = set(pause["interrupts"].values())
        approve = {"type": "approve"}
        answer = Command(resume={i: _answer(i, pause, approve, self.batched) for i in asked})

        def fork(bridge: LangGraphBridge) -> None:
            with use_guard(bridge.execution_guard()):
                graph.invoke(answer, config, version="v2")

        self._foreign("fork", host, fork)

    @rule(approve=st.booleans(), host=st.integers(0, HOSTS - 1))
    def answer_the_head(self, approve: bool, host: int) -> None:
        """A host answers the interrupts on the thread's head through LangGraph itself (under
        the bridge's guard, holding no decision): "approve", which the boundary refuses, or a
        rejection of its own, which LangGraph keeps as the pause's answer and runs on with.
        Neither may reach the run: the bridge's continuation must carry the session's
        decisions."""
        graph = self.hosts.graphs[host]
        config = {"configurable": {"thread_id": self.thread_id}}
        asked = graph.get_state(config).interrupts
        if not asked:
            return
        answer = {"type": "approve"} if approve else {"type": "reject", "message": FOREIGN}

        def foreign(bridge: LangGraphBridge) -> None:
            with use_guard(bridge.execution_guard()):
                resume = {i.id: _shaped(i.value, answer) for i in asked}
                graph.invoke(Command(resume=resume), config, version="v2")

        self._foreign("head", host, foreign)

    def _foreign(self, what: str, host: int, action: Callable[[LangGraphBridge], object]) -> None:
        """A host's own graph call beside the bridge. What it hands the model is not the
        bridge's run (a foreign rejection kept on a pause may reach the model in a later fork
        of that pause too): dropped from what the model was handed; its bodies still count.
        The faults armed for the bridge's next body or checkpointer write stay armed for it."""
        handed = [len(counts.handed) for counts in self.hosts.counts]
        armed = self.body_fault, self.saver_fault, self.saver_at
        self.body_fault, self.saver_fault, self.saver_at = "", "", 0
        try:
            self._act(what, host, "", 0, action, kind="rogue")
        finally:
            self.body_fault, self.saver_fault, self.saver_at = armed
            for counts, before in zip(self.hosts.counts, handed, strict=True):
                del counts.handed[before:]

    def _saw_pauses(self) -> None:
        run = self._bridge(0).run_record("r1")
        snapshot = None if run is None else json.loads(run.snapshot)
        if snapshot and snapshot["interrupts"] and snapshot not in self.pauses:
            self.pauses.append(snapshot)

    # ------------------------------------------------------------------ invariants
    @invariant()
    def no_body_ran_twice(self) -> None:
        assert all(n <= 1 for n in self.executed.values()), self.executed

    @invariant()
    def no_gated_body_ran_without_an_approval(self) -> None:
        bindings = self._bindings()
        for call in self.executed:
            if CALLS[call].tool in GATED:
                binding = bindings.get(call)
                assert binding is not None, (call, "ran before it was even proposed")
                assert binding.status is ConfirmationStatus.APPROVED, (call, binding.status)

    @invariant()
    def the_model_is_handed_each_calls_own_outcome(self) -> None:
        """The reviewer's reason reaches the model; an approved call's result, an expired
        one's sentence; an undecided call's nothing."""
        bindings = self._bindings()
        for counts in self.hosts.counts:
            for call, text in counts.handed:
                if CALLS[call].tool not in GATED:
                    assert text == RESULTS[call], (call, text)
                    continue
                status = bindings[call].status
                assert status.is_terminal, (call, status, text)
                if status is ConfirmationStatus.REJECTED and call in self.reject_faulted:
                    # its reason's write was hit: the generic sentence is allowed
                    assert text.startswith(expected(call, status).split(": ")[0]), (call, text)
                else:
                    assert text == expected(call, status), (call, status, text)

    # ------------------------------------------------------------------ recovery
    def _sweep(self, host: int) -> dict[str, str]:
        """The start-up sweep with the bridge hook, at the session's clock."""

        def ports_for(session_id: str) -> SweepPorts | None:
            if session_id != self.session_id:
                return None  # an earlier example's session (all completed)
            return SweepPorts(DEFINITION, bridge=lambda s: self._bridge(host, s))

        before = self._run_state()
        # The adapters stamp each write with the wall clock's millisecond and list a session
        # whose last write is strictly before the cut-off: a write in the sweep's own
        # millisecond is not "older than 0" yet, and the sweep would skip the session. A
        # start-up sweep comes after the crash it recovers: the clock ticks past it first.
        written = time.time_ns() // 1_000_000
        while time.time_ns() // 1_000_000 <= written:
            time.sleep(0.0001)
        report = reconcile_all(self.storage, ports_for, older_than_ms=0, clock=self._clock)
        for swept in report.sessions:
            if swept.session_id == self.session_id and swept.error is not None:
                raise swept.error
        if before == "continuing" and self._run_state() != "continuing":
            self.coverage["sweep:took-over"] += 1  # a dead process's continuation, finished
        return {run_id: step for s in report.sessions for run_id, step in s.waiting}

    def _run_state(self) -> str | None:
        run = self._bridge(0).run_record("r1")
        return None if run is None else run.state.value

    def _settle(self) -> None:
        """An operator settles each unknown execution from the truth."""
        bridge = self._bridge(0)
        for entry in bridge.unknown_executions():
            call = entry.tool_call_id
            ran = self.executed[call] > 0
            with self._operator():
                # A plain result, as `akchat-fsm settle --result` takes it: the model reads it
                # as the call's message, the same text the body returns.
                bridge.settle_execution(call, ran=ran, result=RESULTS[call] if ran else None)
            self.coverage["recover:settled-unknown"] += 1

    def teardown(self) -> None:
        """Recover: the sweep, the operator's verdicts, a continuation leave the run completed
        or waiting for a person; the reviewers approve what is left, until it completes."""
        try:
            self._recover()
        finally:
            self.hosts.machine = None

    def _recover(self) -> None:
        self.storage.arm("", 0)
        self.body_fault, self.saver_fault, self.saver_at, self.dead = "", "", 0, False
        for _ in range(6):
            with self._process(SWEEP):
                waiting = self._sweep(0)
            self._settle()
            with self._process("host"):
                outcome = self._bridge(0).continue_run("r1")
            pending = [
                b for b in self._bindings().values() if b.status is ConfirmationStatus.PENDING
            ]
            if outcome.status == "completed":
                break
            # Nothing the sweep, the operator or the host could finish is left: a person's.
            assert outcome.status in ("paused", "waiting") and pending, (outcome, waiting)
            assert all(step.startswith(PEOPLES_STEPS) for step in waiting.values()), waiting
            for binding in pending:
                with self._process("host"):
                    self._bridge(0).approve(binding.token)
        self.no_body_ran_twice()
        self.no_gated_body_ran_without_an_approval()
        self.the_model_is_handed_each_calls_own_outcome()
        run = self._bridge(0).run_record("r1")
        assert run is not None and run.state.value == "completed", run
        bindings = self._bindings()
        assert sorted(bindings) == ["c1", "c2", "c3"]  # both turns were bound
        statuses = {call: binding.status for call, binding in bindings.items()}
        approved = ConfirmationStatus.APPROVED
        for call in CALLS:  # an ungated call (no confirmation) ran, as an approved one did
            ran = 1 if statuses.get(call, approved) is approved else 0
            assert self.executed[call] == ran, (call, statuses.get(call), self.executed)
        said = {call: expected(call, statuses.get(call)) for call in CALLS}
        final = self._bridge(0).continue_run("r1")
        assert final.status == "completed" and final.replayed, final
        if not self.reject_faulted:
            assert final.output == "; ".join(f"{k}={v}" for k, v in sorted(said.items())), final
        assert self._bridge(0).unknown_executions() == ()
        assert [p.session_id for p in self.store.list_processing()] == []


def _shaped(asked: Any, answer: dict[str, str]) -> Any:
    """``answer`` in the shape an interrupt takes: as it is (per-call), or one per action
    request of a batched interrupt."""
    if isinstance(asked, dict) and isinstance(asked.get("action_requests"), list):
        return {"decisions": [answer] * len(asked["action_requests"])}
    return answer


def _answer(interrupt: str, pause: dict[str, Any], answer: dict[str, str], batched: bool) -> Any:
    """``answer`` for ``interrupt`` of a saved pause: per-call, or as many as the batch's calls
    (the calls of one batched interrupt share its id)."""
    size = list(pause["interrupts"].values()).count(interrupt)
    return {"decisions": [answer] * size} if batched else answer


def _then_check(m: LangGraphBridgeProtocol, *steps: tuple[Callable[[], object], str]) -> None:
    """Each step, then the invariants; a step must exercise the floor points it names."""
    for step, points in steps:
        before = {point: m.coverage[point] for point in points.split()}
        step()
        m.no_body_ran_twice()
        m.no_gated_body_ran_without_an_approval()
        m.the_model_is_handed_each_calls_own_outcome()
        missed = [point for point, n in before.items() if m.coverage[point] == n]
        assert not missed, f"the pinned step never reached {missed}"


def _claim_write(m: LangGraphBridgeProtocol) -> int:
    """Which write of an approve is its claim: the first where the storage the sessions are
    given writes the audit entry inside the claim (ADR-0141), the second, after the entry,
    elsewhere (ADR-0132). The sessions see the chaos wrapper, not the store under it."""
    return 1 if saves_with_records(m.storage) else 2


def pinned_programs(machine: type[LangGraphBridgeProtocol]) -> None:
    """Fixed programs through the machine's own rules, invariants after every step, that
    drive every ``FLOOR`` point whatever the seed of the generated run."""
    m = machine()
    try:
        _then_check(
            m,
            # a host answers "approve" on the head through LangGraph: the boundary refuses
            # it, and LangGraph keeps it as the pause's first answer to each call
            (lambda: m.answer_the_head(True, 0), "head:ConfirmationError"),
            # c1 (index 0): the approval's audit entry never applies; then its CAS applies
            # with an unknown outcome, which the bridge settles
            (lambda: m.decide(0, True, 0, "crash-before", 1), "fault:crash-before"),
            (lambda: m.decide(0, True, 1, "unknown", _claim_write(m)), "fault:unknown approve:ok"),
            (lambda: m.arm_the_next_body("crash-after"), ""),
            # rejecting c2 continues the run: c1's body dies after acting
            (lambda: m.decide(1, False, 0, "", 1), "body:crash-after"),
            (lambda: m.sweep(1, "", 1), "sweep:took-over"),  # it reports c1 unknown
            (m.operator_settles, "recover:settled-unknown"),
            (lambda: m.arm_the_next_body("race"), ""),
            # the second turn: c3 pending, u2 ran (per-call mode: batched HITL runs nothing
            # before it asks, so u2 and its race come once c3 is decided, below)
            (lambda: m.continue_run(1, "", 1), "" if m.batched else "race:continuing"),
            # a host resumes the first pause's checkpoint id itself (LangGraph forks the thread)
            # answering "approve": c1's task runs again (its first run died in the body), and
            # the boundary refuses it, since the host's guard holds no decision
            (lambda: m.fork_an_old_pause(0, 0), "fork:ConfirmationError"),
            (lambda: m.decide(2, True, 0, "unavailable", 1), "fault:unavailable"),
            (lambda: m.expire(0, "", 1), "expire:ok race:continuing" if m.batched else "expire:ok"),
        )
    finally:
        m.teardown()
    m = machine()
    try:
        _then_check(
            m,
            (lambda: m.decide(1, False, 0, "", 1), "reject:ok"),  # c2; c1 still pending
            # a host rejects both on the head itself: LangGraph runs on (the ungated u2 of
            # the next turn runs, through the ledger) and pauses on c3, off the run's record
            (lambda: m.answer_the_head(False, 1), "head:ok"),
            # c1's approving claim applies, then its process dies; the sweep completes it and
            # continues the run, dying at its first checkpointer write; the next sweep takes
            # the dead continuation over and dies after its second one
            (lambda: m.decide(0, True, 0, "crash-after", _claim_write(m)), "fault:crash-after"),
            (lambda: m.crash_a_checkpointer_write("crash-before", 1), ""),
            (lambda: m.sweep(0, "", 1), "saver:crash-before"),
            (lambda: m.crash_a_checkpointer_write("crash-after", 2), ""),
            (lambda: m.sweep(1, "", 1), "saver:crash-after"),
            (lambda: m.sweep(0, "", 1), ""),
        )
    finally:
        m.teardown()


def examples() -> dict[str, Any]:
    """Few examples in the default profiles (each step runs the real graph); ``deep`` 10x."""
    if settings.get_current_profile_name().startswith("deep"):
        return {"max_examples": 60, "stateful_step_count": 30}
    return {"max_examples": 6, "stateful_step_count": 12}


def run_protocol(
    store: Any, saver_spec: str, mode: str = "per_call", **overrides: Any
) -> Counter[str]:
    coverage: Counter[str] = Counter()
    hosts = Hosts(saver_spec, mode)
    attributes = {
        "store": store,
        "hosts": hosts,
        "coverage": coverage,
        "batched": mode == "batched",
        **overrides.pop("cls", {}),
    }
    machine = type("Protocol", (LangGraphBridgeProtocol,), attributes)
    try:
        run_state_machine_as_test(
            machine, settings=settings(settings(), deadline=None, **{**examples(), **overrides})
        )
        print("coverage:", dict(sorted(coverage.items())))  # shown with -s
        pinned_programs(machine)
    finally:
        hosts.close()
    missing = [what for what in FLOOR if not coverage[what]]
    assert not missing, f"the run never exercised {missing}: {sorted(coverage.items())}"
    return coverage


def test_langgraph_bridge_on_sqlite_with_sqlitesaver(tmp_path: Path) -> None:
    store = SQLiteStorage(tmp_path / "sessions.db")
    sqlite3.connect(tmp_path / "checkpoints.db").close()
    try:
        run_protocol(store, f"sqlite:{tmp_path / 'checkpoints.db'}")
    finally:
        store.close()


def test_batched_hitl_through_the_bridge_on_sqlite_with_sqlitesaver(tmp_path: Path) -> None:
    """The same machine with HITL in batched mode (one interrupt per model turn, answered by
    one ``{"decisions": [...]}`` once every call of it is decided, ADR-0140)."""
    store = SQLiteStorage(tmp_path / "sessions.db")
    sqlite3.connect(tmp_path / "checkpoints.db").close()
    try:
        run_protocol(store, f"sqlite:{tmp_path / 'checkpoints.db'}", mode="batched")
    finally:
        store.close()


@pytest.mark.postgres
def test_langgraph_bridge_on_postgres_with_postgressaver(pg_url: str) -> None:
    import psycopg

    from akchat_fsm.storage.postgres import PostgresStorage

    name = f"lgsm_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    store = PostgresStorage(pg_url, table=name)
    try:
        run_protocol(store, f"postgres:{pg_url}|{name}")
    finally:
        store.close()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
            conn.execute(f"DROP TABLE IF EXISTS {name}, {name}__records")


# --------------------------------------------------------------------------- foreign answers
# An answer sent outside the bridge on the paused head (a host or an inbox answering the
# interrupt through LangGraph itself) is the one LangGraph keeps: ``interrupt()`` returns the
# first ``__resume__`` written for its task. The bridge's continuation finds it on the pause
# and replays the pause, answering the fork with the session's decision (ADR-0138). Without
# that, a foreign reject completed a run whose call the reviewer approved, and a foreign
# approve (refused by the boundary) was re-read by every later continuation, which the
# boundary refused again.
def _paused_with_a_foreign_answer(tmp_path: Path, answer: dict[str, str]) -> tuple[Any, Any]:
    """A run paused on ``c1`` (``send_email``), then answered ``answer`` by a host driving
    LangGraph itself on the thread's head (under the bridge's guard, holding no decision)."""
    store = SQLiteStorage(tmp_path / "sessions.db")
    saver, close = open_saver(f"sqlite:{tmp_path / 'checkpoints.db'}")
    counts = Counts()
    graph = build_graph(FIRST[:1], counts, saver)

    def bridge() -> LangGraphBridge:
        session = resume_chat_session(DEFINITION, session_id="s1", storage=store)
        return LangGraphBridge(graph, session, store)

    paused = bridge().run(USER, thread_id="t1", run_id="r1")
    interrupt = json.loads(paused.snapshot)["interrupts"]["c1"]
    with contextlib.suppress(AkchatError), use_guard(bridge().execution_guard()):
        graph.invoke(Command(resume={interrupt: answer}), {"configurable": {"thread_id": "t1"}})
    assert counts.bodies == []  # the boundary refused an approve; a reject runs nothing
    return (bridge, paused.pending[0].token, counts), (store, close)


def test_a_foreign_answer_on_the_head_cannot_override_the_sessions_approval(
    tmp_path: Path,
) -> None:
    (bridge, token, counts), (store, close) = _paused_with_a_foreign_answer(
        tmp_path, {"type": "reject", "message": "someone else says no"}
    )
    try:
        decided = bridge().approve(token)
        assert decided.run is not None and decided.run.status == "completed"
        assert counts.bodies == ["send_email:a@x"], (counts.bodies, decided.run.output)
        assert decided.run.output == "c1=sent to a@x"
    finally:
        close()
        store.close()


def test_a_refused_foreign_answer_on_the_head_does_not_wedge_the_run(tmp_path: Path) -> None:
    (bridge, token, counts), (store, close) = _paused_with_a_foreign_answer(
        tmp_path, {"type": "approve"}
    )
    try:
        decided = bridge().reject(token, REASONS["c1"])
        assert decided.run is not None and decided.run.status == "completed"
        assert decided.run.output == f"c1={expected('c1', ConfirmationStatus.REJECTED)}"
        assert counts.bodies == []
    finally:
        close()
        store.close()
