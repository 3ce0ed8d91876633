"""Model -> code: replay SPIN's random simulations of ``resolution.pml`` against the real plans.

``simulate`` runs ``spin -DTRACE -u<steps> -n<seed>`` on the correct model and parses the
``TR`` lines the ``-DTRACE`` build prints (one per atomic step: a client's load-and-decide, a
save and its verdict, an upstream call, a re-read, the end of an attempt). ``replay`` drives one
client per model client, each running the library's real resolution plan
(``session._confirm.plan_resolve``, resumed fresh from storage like the model's load) one
effect at a time over a real storage and the shipped ``RecordingUpstream``, and after every
model step compares an abstraction of what is stored (the confirmation's status, the cursor
relative to the proposal's, whether upstream acted and how, upstream calls per client) with
the model's state as printed.

Bounds (``CONFIGS``): three clients on one confirmation, two attempts each; ``races`` has no
faults, ``faults`` one client crash, one unknown save outcome and one upstream fault (failed,
or acted with the reply lost) per run, and the release-only reconciler (``-DNO_RESUME``) that
then releases or completes the orphaned claim. A model crash or the end of a model attempt
abandons the code client's plan (the process stops there); a reconciler write that applied is
the code's whole ``reconcile(release_untouched=True)`` at that step. One model artefact is
absorbed: the model's terminal save first goes out on the cursor the client loaded, so it
conflicts once and re-reads; the code saves on its claim's cursor. Such a conflict, when the
code's save would apply, is a model-only step (it changes nothing on either side).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from akchat_fsm.errors import AkchatError, OutcomeUnknown
from akchat_fsm.machines.confirmation import ConfirmationEvent
from akchat_fsm.session import ChatDefinition, _confirm, _ops
from akchat_fsm.session._state import SessionHolder
from akchat_fsm.session.drivers import Ports, execute_sync
from akchat_fsm.session.effects import CallApprove, CallDeny, Emit, Load, SaveSnapshot
from akchat_fsm.testing.doubles import RecordingChatMemory, RecordingUpstream
from akchat_fsm.wire.decode import decode_session_snapshot
from akchat_fsm.wire.enums import ConfirmationStatus

MODELS = Path(__file__).resolve().parents[2] / "models"
#: The bounds replayed: ``races`` (clients only) and ``faults`` (a crash, an unknown save
#: outcome and an upstream fault per run, which the release-only reconciler then settles).
CONFIGS = {
    "races": ("-DMAXCRASH=0", "-DMAXUNKNOWN=0", "-DMAXUPFAULT=0"),
    "faults": ("-DMAXCRASH=1", "-DMAXUNKNOWN=1", "-DMAXUPFAULT=1"),
}
DEFINES = ("-DTRACE", "-DNCLIENTS=3", "-DNCONF=1", "-DMAXOPS=2", "-DNO_RESUME")
#: The model's status codes (models/confirmation_table.pml, generated from the machine).
STATUS = {
    0: ConfirmationStatus.PENDING,
    1: ConfirmationStatus.APPROVING,
    2: ConfirmationStatus.REJECTING,
    3: ConfirmationStatus.EXPIRING,
    4: ConfirmationStatus.APPROVED,
    5: ConfirmationStatus.REJECTED,
    6: ConfirmationStatus.EXPIRED,
}
EVENTS = {0: ConfirmationEvent.APPROVE, 1: ConfirmationEvent.REJECT, 2: ConfirmationEvent.EXPIRE}
ST_NONE = 255
SAVE_OK, SAVE_CONFLICT, SAVE_UNKNOWN = 0, 1, 2
UP_OK, UP_LOST, UP_FAILED = 0, 1, 2
RECONCILER = 0
KIND = {1: "approve", 4: "approve", 2: "deny", 3: "deny", 5: "deny", 6: "deny"}
TTL_MS = 1_000
DEFINITION = ChatDefinition("conformance")

_LINE = re.compile(r"TR (\w+) ((?:\w+=-?\d+ ?)+)")


@dataclass(frozen=True)
class Step:
    """One model step as printed: ``kind`` and its fields (``w`` is the writer/client id)."""

    kind: str
    fields: dict[str, int]

    def __getitem__(self, name: str) -> int:
        return self.fields[name]


def parse(output: str) -> list[Step]:
    steps = []
    for line in output.splitlines():
        match = _LINE.search(line)
        if match:
            pairs = (item.split("=") for item in match.group(2).split())
            steps.append(Step(match.group(1), {k: int(v) for k, v in pairs}))
    return steps


def simulate(workdir: Path, seed: int, steps: int, config: str = "races") -> list[Step]:
    """One random simulation of the model (in ``workdir``: spin writes its temporary files
    beside the model), parsed."""
    for name in ("resolution.pml", "confirmation_table.pml", "lifecycle_tables.pml"):
        shutil.copy(MODELS / name, workdir / name)
    spin = shutil.which("spin")
    assert spin, "spin is not installed"
    done = subprocess.run(
        [spin, *DEFINES, *CONFIGS[config], f"-u{steps}", f"-n{seed}", "resolution.pml"],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "error" not in done.stdout.lower() or "errors: 0" in done.stdout, done.stdout[-2000:]
    return parse(done.stdout)


# --------------------------------------------------------------------------- the code side


class Mismatch(AssertionError):
    """The code did not do what the model did at this step."""


@dataclass
class _Run:
    plan: Any
    next: Any = None
    done: bool = False
    result: Any = None
    error: BaseException | None = None

    def __post_init__(self) -> None:
        self._move(lambda: self.plan.send(None))

    def _move(self, move: Callable[[], Any]) -> None:
        try:
            self.next = move()
        except StopIteration as stop:
            self.done, self.next, self.result = True, None, stop.value
        except AkchatError as exc:  # a refusal (AlreadyResolved, ...) ends the attempt
            self.done, self.next, self.error = True, None, exc

    def feed(self, value: Any) -> None:
        self._move(lambda: self.plan.send(value))

    def throw(self, error: BaseException) -> None:
        self._move(lambda: self.plan.throw(error))


class UpstreamDown(RuntimeError):
    """What the model's failing upstream call raises in the code."""


ResolvePlan = Callable[[SessionHolder, str, ConfirmationEvent], Any]


def correct_resolve(holder: SessionHolder, token: str, intent: ConfirmationEvent) -> Any:
    return _confirm.plan_resolve(holder, token, intent, reason="no")


@dataclass
class Code:
    """The real session over ``storage``: one proposed confirmation, one plan per client."""

    storage: Any
    resolve: ResolvePlan = correct_resolve
    session_id: str = "conformance"
    now: int = 1_000
    upstream: RecordingUpstream = field(default_factory=RecordingUpstream)
    runs: dict[int, _Run] = field(default_factory=dict)
    calls: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.memory = RecordingChatMemory(self.upstream)
        holder = SessionHolder.fresh(DEFINITION, self.session_id, lambda: self.now)
        for plan in (
            _ops.plan_persist(holder),
            _confirm.plan_propose(holder, "email.send", {"n": 1}, ttl_ms=TTL_MS),
        ):
            self._run_through(plan)
        stored = self.stored()
        self.cursor0 = stored.cursor
        self.token = stored.confirmations[0].token
        self.tool_call_id = stored.confirmations[0].tool_call_id
        self.expires_at = stored.confirmations[0].expires_at

    def _ports(self) -> Ports:
        return Ports(self.storage, self.upstream, self.memory)

    def _run_through(self, plan: Any) -> Any:
        run = _Run(plan)
        while not run.done:
            run.feed(execute_sync(run.next, self._ports()))
        if run.error is not None:
            raise run.error
        return run

    def stored(self) -> Any:
        result = decode_session_snapshot(self.storage.load(self.session_id))
        assert result.snapshot is not None, result.diagnostic
        return result.snapshot

    def _skip_reads(self, run: _Run) -> None:
        """Perform the effects that change nothing (reads, observer events)."""
        while not run.done and isinstance(run.next, Load | Emit):
            run.feed(execute_sync(run.next, self._ports()))

    # ------------------------------------------------------------------ model steps
    def decide(self, client: int, event: ConfirmationEvent, past: bool, claims: bool) -> None:
        if past:
            self.now = max(self.now, self.expires_at + 1)
        resume = _ops.plan_resume(DEFINITION, self.session_id, lambda: self.now)
        holder = self._run_through(resume).result
        run = _Run(self.resolve(holder, self.token, event))
        self._skip_reads(run)
        if claims:
            if not isinstance(run.next, SaveSnapshot):
                raise Mismatch(f"client {client} claims in the model; the code's next is {run}")
            self.runs[client] = run
        else:  # inert in the model: the code must end without writing or calling anything
            before = self.stored().to_wire()
            while not run.done:
                if isinstance(run.next, SaveSnapshot | CallApprove | CallDeny):
                    raise Mismatch(f"client {client} is inert in the model; code does {run.next}")
                run.feed(execute_sync(run.next, self._ports()))
            assert self.stored().to_wire() == before

    def reconcile(self, applies: bool) -> None:
        """The model's release-only reconciler wrote (a release, or a completion once upstream
        acted): the code's ``reconcile(release_untouched=True)``, run whole at that step (its
        read and decision are the model's, on the same state, since the CAS applied)."""
        if not applies:
            return  # a refused reconciler write: nothing on either side
        resume = _ops.plan_resume(DEFINITION, self.session_id, lambda: self.now)
        holder = self._run_through(resume).result
        self._run_through(_confirm.plan_reconcile(holder, release_untouched=True))

    def save(self, client: int, res: int, applies: bool) -> None:
        if client == RECONCILER:
            return self.reconcile(applies)
        run = self.runs.get(client)
        if run is None:
            raise Mismatch(f"client {client} saves in the model but runs nothing in the code")
        self._skip_reads(run)
        effect = run.next
        if not isinstance(effect, SaveSnapshot):
            raise Mismatch(f"client {client} saves in the model; the code's next is {effect}")
        would_apply = self.stored().cursor == effect.expected_cursor
        if not applies and would_apply and effect.snapshot.confirmations[0].status.is_terminal:
            return None  # the model's stale first terminal save (see the module docstring)
        applied = execute_sync(effect, self._ports())
        if bool(applied) is not applies:
            raise Mismatch(f"client {client}'s save applied={applied}; the model says {applies}")
        if res == SAVE_UNKNOWN:
            run.throw(OutcomeUnknown("the model lost this save's reply"))
        else:
            run.feed(applied)
        return None

    def call_upstream(self, client: int, res: int = UP_OK) -> None:
        run = self.runs.get(client)
        if run is None:
            raise Mismatch(f"client {client} calls upstream in the model; the code runs nothing")
        self._skip_reads(run)
        if not isinstance(run.next, CallApprove | CallDeny):
            raise Mismatch(f"client {client} calls upstream in the model; code does {run.next}")
        self.calls[client] = self.calls.get(client, 0) + 1
        if res == UP_FAILED:
            run.throw(UpstreamDown("upstream failed before acting"))
            return
        value = execute_sync(run.next, self._ports())
        if res == UP_LOST:
            run.throw(UpstreamDown("upstream acted, the reply was lost"))
        else:
            run.feed(value)

    def end_attempt(self, client: int, crashed: bool) -> None:
        """The model's client ended this attempt (or crashed); whatever the code would still
        do is abandoned (the same as the process stopping there). Except after a crash, the
        code may re-read and re-decide (a fresh claim), but not call upstream on what it has."""
        run = self.runs.pop(client, None)
        if run is None or run.done:
            return
        if not crashed:
            self._skip_reads(run)
            if isinstance(run.next, CallApprove | CallDeny):
                raise Mismatch(f"client {client} stopped in the model; the code does {run.next}")
        run.plan.close()

    # ------------------------------------------------------------------ abstraction
    def abstract(self) -> tuple[ConfirmationStatus, int, str | None]:
        stored = self.stored()
        return (
            stored.confirmations[0].status,
            stored.cursor - self.cursor0 + 1,
            self.upstream.acted.get(self.tool_call_id),
        )


# --------------------------------------------------------------------------- replay


@dataclass
class ModelState:
    status: int = 0
    cursor: int = 1
    acted: str | None = None
    calls: dict[int, int] = field(default_factory=dict)

    def abstract(self) -> tuple[ConfirmationStatus, int, str | None]:
        return STATUS[self.status], self.cursor, self.acted


def replay(steps: list[Step], code: Code) -> Iterator[int]:
    """Replay ``steps`` on ``code``; yields after each step (the count so far). Raises
    :class:`Mismatch` when the code's abstraction differs from the model's."""
    model = ModelState()
    for n, step in enumerate(steps, 1):
        w = step["w"]
        if step.kind == "decide":
            code.decide(w, EVENTS[step["ev"]], bool(step["past"]), step["claim"] != ST_NONE)
        elif step.kind == "save":
            applied = step["cursor"] != model.cursor  # a write moves the cursor by one
            if applied:
                model.status = step["st"]
            model.cursor = step["cursor"]
            code.save(w, step["res"], applied)
        elif step.kind == "up":
            if w != RECONCILER:
                model.calls[w] = model.calls.get(w, 0) + 1
            if step["acted"] and model.acted is None:
                model.acted = KIND[step["st"]]
            code.call_upstream(w, step["res"])
        elif step.kind in ("done", "crash"):
            code.end_attempt(w, crashed=step.kind == "crash")
        elif step.kind in ("inert", "reload", "settle"):
            pass  # reads: nothing changes on either side
        else:
            raise Mismatch(f"step {n}: the first version does not replay {step}")
        if code.abstract() != model.abstract() or code.calls != model.calls:
            raise Mismatch(
                f"after step {n} ({step}): code {code.abstract()} calls {code.calls}, "
                f"model {model.abstract()} calls {model.calls}"
            )
        yield n
