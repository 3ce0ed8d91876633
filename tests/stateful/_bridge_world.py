"""The world the bridge's stateful suite runs in: a storage that can fail or kill around a
write, a real pydantic-ai agent whose tool bodies record their side effects (the truth), and
a stepper that performs a bridge plan's effects one at a time.

A *crash* is a :class:`Crash` (a ``BaseException``, as a kill is to the code it interrupts):
nothing in the library or in pydantic-ai handles it, so whatever was durably written before it
is all that survives; the client's plan is then abandoned.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from akchat_fsm.errors import OutcomeUnknown, StorageUnavailable
from akchat_fsm.session.drivers import Ports, execute_sync
from akchat_fsm.session.effects import Effect

CALLS_PER_RUN = 2


class Crash(BaseException):
    """The client's process dies here."""


@dataclass
class Truth:
    """What really happened outside the library: each tool body's side effects, by call id."""

    executions: Counter[str] = field(default_factory=Counter)
    #: How the next tool body behaves: "" (normally), "crash-before" or "crash-after" its effect.
    body_mode: str = ""
    continuations: int = 0
    #: Told each body's call id just before its side effect (the history checker).
    on_body: Callable[[str], None] | None = None
    #: The arguments (``n``) each body's side effect ran with, by call id.
    ran_with: dict[str, list[int]] = field(default_factory=dict)
    #: The next resume hands the bodies the model's arguments, not a reviewer's edit (a
    #: runtime that ignored ``override_args``, a middleware that rewrote them): the
    #: execution guard must refuse an edited call rather than run it (ADR-0135).
    ignore_edits: bool = False


class ChaosStorage:
    """A real storage whose next write (envelope ``save`` or ``save_record``) can be armed to
    crash before or after applying, to apply and report an unknown outcome, or to fail before
    applying; ``armed_for``, if set, keeps the fault for the next write of a record whose key
    starts with it. Reads pass through."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.armed = ""
        self.armed_for = ""
        self.fired: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _write(self, call: Any, key: str = "") -> Any:
        if self.armed_for and not key.startswith(self.armed_for):
            return call()
        fault, self.armed = self.armed, ""
        if fault:
            self.fired[fault] += 1
        if fault == "crash-before":
            raise Crash()
        if fault == "unavailable":
            raise StorageUnavailable("injected: nothing applied")
        result = call()
        if fault == "crash-after":
            raise Crash()
        if fault == "unknown":
            raise OutcomeUnknown("injected: applied, outcome unknown")
        return result

    def save(self, snapshot: Any, expected: int | None) -> bool:
        return bool(self._write(lambda: self.inner.save(snapshot, expected)))

    def save_record(self, *args: Any, **kwargs: Any) -> bool:
        return bool(self._write(lambda: self.inner.save_record(*args, **kwargs), args[1]))


def answer(messages: list[ModelMessage]) -> str:
    seen = {
        part.tool_call_id: str(part.content)
        for message in messages
        for part in getattr(message, "parts", ())
        if isinstance(part, ToolReturnPart)
    }
    return "; ".join(f"{k}={v}" for k, v in sorted(seen.items()))


def build_agent(truth: Truth) -> Agent[None, Any]:
    """Run ``"run-N"`` asks for calls ``run-N-0..2``; the continuation reports the results."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            prompt = str(messages[0].parts[-1].content)  # type: ignore[union-attr]
            return ModelResponse(
                parts=[
                    ToolCallPart("act", {"n": i}, tool_call_id=f"{prompt}-{i}")
                    for i in range(CALLS_PER_RUN)
                ]
            )
        truth.continuations += 1
        return ModelResponse(parts=[TextPart(answer(messages))])

    agent: Agent[None, Any] = Agent(FunctionModel(model), output_type=[str, DeferredToolRequests])

    @agent.tool(requires_approval=True)
    def act(ctx: RunContext[None], n: int) -> str:
        mode, truth.body_mode = truth.body_mode, ""
        if mode == "crash-before":
            raise Crash()
        if truth.on_body is not None:
            truth.on_body(str(ctx.tool_call_id))
        truth.executions[str(ctx.tool_call_id)] += 1
        truth.ran_with.setdefault(str(ctx.tool_call_id), []).append(n)
        if mode == "crash-after":
            raise Crash()
        return f"did {n}"

    return agent


class EditIgnoringRuntime:
    """A bridge's runtime port that, while ``truth.ignore_edits`` is set, resumes the real
    runtime with every reviewer's edit dropped from the decisions (the bodies get the model's
    arguments); the guard it is handed still knows the edits."""

    def __init__(self, inner: Any, truth: Truth) -> None:
        self.inner, self.truth = inner, truth
        self.runtime = getattr(inner, "runtime", None)

    def start(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.start(*args, **kwargs)

    def resume(self, run: Any, decisions: tuple[Any, ...], guard: Any) -> Any:
        if self.truth.ignore_edits:
            decisions = tuple(replace(d, args=None) for d in decisions)
        return self.inner.resume(run, decisions, guard)


def perform(effect: Effect, ports: Ports) -> Any:
    """Perform one effect as the sync driver does (the plan gets the result)."""
    return execute_sync(effect, ports)


class PlanStepper:
    """Runs a plan one effect at a time; ``done`` with ``result`` or ``error`` at the end."""

    def __init__(self, plan: Any) -> None:
        self.plan = plan
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.next: Any = None
        self._advance(lambda: next(plan))

    def _advance(self, step: Any) -> None:
        try:
            self.next = step()
        except StopIteration as stop:
            self.done, self.result = True, stop.value
        except Exception as exc:
            self.done, self.error = True, exc

    def feed(self, value: Any) -> None:
        self._advance(lambda: self.plan.send(value))

    def throw(self, error: Exception) -> None:
        self._advance(lambda: self.plan.throw(error))

    def crash(self) -> None:
        self.plan.close()
        self.done = True
