"""A linearizability checker: record a concurrent history, then search for a legal order.

The search is Wing & Gong's algorithm with Lowe's memoisation (as in Knossos and porcupine):
walk the history's call/return events, try to linearize each pending call against a
sequential *model*, cache every ``(set of linearized ops, model state)`` already explored, and
backtrack when a return is reached before its call was linearized. The history is first split
per key (P-compositionality: a history is linearizable iff each per-key part is), which keeps
each search small. The search itself is in :mod:`akchat_fsm.testing._wgl`.

Unknown outcomes follow etcd's convention: an operation that raised "outcome unknown" (or never
returned) gets ``return_ns = +inf`` and ``output = UNKNOWN``; it may take effect at any time
after its call, or never. Models are nondeterministic (``step`` returns every possible next
state), and the checker tracks sets of states.

Budget: at most ``max_steps`` search steps, ``timeout_s`` seconds and about ``max_memory_mb``
of memo over the whole history; when one runs out the verdict is ``"unknown"`` (``budget``
says which), never ``"ok"``. A malformed history raises :class:`MalformedHistory`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from ._history import UNKNOWN, History, MalformedHistory, Operation
from ._jepsen import JepsenLog, parse_jepsen_log, read_jepsen_log
from ._simulate import simulated_cas_history, simulated_lockstep_history
from ._wgl import Budget, Failure, search

__all__ = [
    "UNKNOWN",
    "CasRegisterModel",
    "CheckResult",
    "EtcdRegisterModel",
    "History",
    "JepsenLog",
    "MalformedHistory",
    "Model",
    "Operation",
    "check_history",
    "contention",
    "parse_jepsen_log",
    "read_jepsen_log",
    "simulated_cas_history",
    "simulated_lockstep_history",
]

S = TypeVar("S", bound=Hashable)

Verdict = Literal["ok", "illegal", "unknown", "invalid"]


class Model(Protocol[S]):
    """A sequential specification.

    ``step`` may look at an operation's ``kind``, ``input`` and ``output`` only: the search
    treats two unknown outcomes with the same kind and input as interchangeable. A model
    may also define ``prepare(ops) -> list[Operation]`` (same length, same order), called on
    each part before the search: to reject operations it cannot interpret
    (:class:`MalformedHistory`) and to replace them with equivalent, simpler ones.
    """

    def init(self) -> S:
        """The state before any operation."""
        ...

    def step(self, state: S, op: Operation) -> Iterable[S]:
        """Every state ``op`` may lead to from ``state``; empty when ``op`` is illegal there."""
        ...

    def is_refusal(self, op: Operation) -> bool:
        """Whether ``op`` is a definite conflict (a CAS that lost): a sign of contention."""
        ...


# --------------------------------------------------------------------------- models


@dataclass(frozen=True)
class CasRegisterModel:
    """Our per-session storage: ``load`` / ``save(expected)`` / ``delete``.

    State: ``None`` (nothing stored) or the observed value ``(cursor, marker)``. Inputs:
    ``load``: ``None``, output the observed value; ``save``: ``(expected_cursor, value)``,
    output ``True``/``False``; ``delete``: ``None``, any output.
    """

    def init(self) -> Any:
        return None

    def step(self, state: Any, op: Operation) -> Iterable[Any]:
        if op.kind == "load":
            return (state,) if op.unknown or op.output == state else ()
        if op.kind == "save":
            expected, value = op.input
            matches = (state is None and expected is None) or (
                state is not None and expected is not None and state[0] == expected
            )
            if op.unknown:
                return (state, value) if matches else (state,)
            if op.output is True:
                return (value,) if matches else ()
            return (state,) if not matches else ()
        if op.kind == "delete":
            return (state, None) if op.unknown else (None,)
        raise MalformedHistory(f"unknown operation kind {op.kind!r}")

    def is_refusal(self, op: Operation) -> bool:
        return op.kind == "save" and op.output is False

    def prepare(self, ops: Sequence[Operation]) -> list[Operation]:
        """Check each operation's shape, and forget markers no load ever returned.

        Two stored values with the same cursor behave alike for every later ``save`` and
        ``delete``; only a ``load`` tells their markers apart. So a marker no load returned
        becomes one shared placeholder: states that differ only by it merge in the search's
        memo, and unknown saves with the same expected cursor become interchangeable.
        """
        seen = {op.output for op in ops if op.kind == "load" and not op.unknown}
        out = []
        for n, op in enumerate(ops):
            if op.kind == "save":
                value = _cas_save_value(n, op)
                if value not in seen:
                    hidden = (op.input[0], (value[0], _UNREAD))
                    op = Operation(
                        op.process, op.kind, hidden, op.output, op.call_ns, op.return_ns, op.key
                    )
            elif op.kind == "load":
                if not (op.unknown or op.output is None or _is_value(op.output)):
                    raise MalformedHistory(
                        f"operation {n}: a load returned {op.output!r}, "
                        "not None or (cursor, marker)"
                    )
            elif op.kind != "delete":
                raise MalformedHistory(
                    f"operation {n}: unknown kind {op.kind!r} (load, save or delete)"
                )
            out.append(op)
        return out


class _Unread:
    def __repr__(self) -> str:
        return "<a marker no load returned>"

    def __reduce__(self) -> str:
        return "_UNREAD"


_UNREAD = _Unread()


def _is_value(value: Any) -> bool:
    return isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], int)


def _cas_save_value(n: int, op: Operation) -> Any:
    shape = op.input
    if not (isinstance(shape, tuple) and len(shape) == 2 and _is_value(shape[1])):
        raise MalformedHistory(
            f"operation {n}: a save's input is {shape!r}, not (expected, (cursor, marker))"
        )
    if not (op.unknown or isinstance(op.output, bool)):
        raise MalformedHistory(f"operation {n}: a save returned {op.output!r}, not a bool")
    return shape[1]


@dataclass(frozen=True)
class EtcdRegisterModel:
    """Jepsen's etcd register: ``read`` / ``write v`` / ``cas (a, b)``, starting at ``None``."""

    def init(self) -> Any:
        return None

    def step(self, state: Any, op: Operation) -> Iterable[Any]:
        if op.kind == "read":
            return (state,) if op.unknown or op.output == state else ()
        if op.kind == "write":
            return (state, op.input) if op.unknown else (op.input,)
        if op.kind == "cas":
            expected, new = op.input
            if op.unknown:
                return (state, new) if state == expected else (state,)
            if op.output is True:
                return (new,) if state == expected else ()
            return (state,) if state != expected else ()
        raise MalformedHistory(f"unknown operation kind {op.kind!r}")

    def is_refusal(self, op: Operation) -> bool:
        return op.kind == "cas" and op.output is False


# --------------------------------------------------------------------------- the verdict


@dataclass
class CheckResult:
    """The verdict on a history.

    ``verdict`` is ``"ok"`` (every part linearizable), ``"illegal"`` (some part is not;
    ``failed_key`` names it and ``detail`` shows the operations around the point where the
    longest legal order stopped), ``"unknown"`` (the budget ran out before a verdict;
    ``budget`` says which: ``"steps"``, ``"time"`` or ``"memory"``) or ``"invalid"``
    (contention was required and the history has none: it proves nothing).
    """

    verdict: Verdict
    operations: int
    parts: int
    steps: int
    seconds: float
    overlapping_pairs: int = 0
    refusals: int = 0
    failed_key: Hashable = None
    detail: str = ""
    part_verdicts: dict[Hashable, Verdict] = field(default_factory=dict)
    budget: str | None = None
    #: The estimated peak size of the search's memo, in bytes.
    memo_bytes: int = 0

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    def __str__(self) -> str:
        verdict = self.verdict.upper() + (f" (budget: {self.budget})" if self.budget else "")
        text = (
            f"linearizability {verdict}: {self.operations} ops in {self.parts} "
            f"part(s), {self.steps} steps, {self.seconds:.2f}s, "
            f"{self.overlapping_pairs} overlapping pairs, {self.refusals} refusals"
        )
        return f"{text}\n{self.detail}" if self.detail else text


def contention(ops: Sequence[Operation], model: Model[Any]) -> tuple[int, int]:
    """(pairs of same-key operations that overlap in time, refused operations)."""
    overlapping = 0
    by_key: dict[Hashable, list[Operation]] = {}
    for op in ops:
        by_key.setdefault(op.key, []).append(op)
    for part in by_key.values():
        part = sorted(part, key=lambda o: o.call_ns)
        open_returns: list[float] = []
        for op in part:
            open_returns = [r for r in open_returns if r >= op.call_ns]
            overlapping += len(open_returns)
            open_returns.append(op.return_ns)
    return overlapping, sum(1 for op in ops if model.is_refusal(op))


def _validate(ops: Sequence[Any]) -> None:
    """Raise :class:`MalformedHistory` naming the first operation the search cannot use."""
    for n, op in enumerate(ops):
        if not isinstance(op, Operation):
            raise MalformedHistory(f"item {n} is a {type(op).__name__}, not an Operation")
        for name in ("call_ns", "return_ns"):
            value = getattr(op, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise MalformedHistory(f"operation {n}: {name} is {value!r}, not a number")
            if math.isnan(value):
                raise MalformedHistory(f"operation {n}: {name} is NaN")
        if math.isinf(op.call_ns):
            raise MalformedHistory(f"operation {n}: call_ns is {op.call_ns} (not a time)")
        if op.return_ns < op.call_ns:
            raise MalformedHistory(
                f"operation {n} returns before its call ({op.return_ns} < {op.call_ns})"
            )
        if math.isinf(op.return_ns) and not op.unknown:
            raise MalformedHistory(
                f"operation {n} never returned (return_ns=inf) yet has output {op.output!r}: "
                "an operation without a return has output=UNKNOWN"
            )
        try:
            hash((op.key, op.kind, op.input, op.output))
        except TypeError as exc:
            raise MalformedHistory(
                f"operation {n}: key, kind, input and output must be hashable "
                f"(tuples, not lists or dicts): {exc}"
            ) from exc


def check_history(
    ops: Iterable[Operation],
    model: Model[Any],
    *,
    max_steps: int = 2_000_000,
    timeout_s: float = 30.0,
    max_memory_mb: float = 400.0,
    require_contention: bool = False,
    partition: Callable[[Operation], Hashable] | None = None,
) -> CheckResult:
    """Decide whether ``ops`` is linearizable with respect to ``model``.

    The history is split per ``op.key`` (or ``partition(op)``). With ``require_contention``,
    a history where no two same-key operations overlap, or no operation was refused, is
    ``"invalid"``: it would pass against a last-write-wins store too. The budget
    (``max_steps`` search steps, ``timeout_s`` seconds, about ``max_memory_mb`` of memo, over
    all parts) turns into an ``"unknown"`` verdict when exhausted. Raises
    :class:`MalformedHistory` for a history that cannot be checked.
    """
    ops = list(ops)
    _validate(ops)
    started = time.monotonic()
    overlapping, refusals = contention(ops, model)
    keyed = partition or (lambda op: op.key)
    parts: dict[Hashable, list[Operation]] = {}
    for op in ops:
        parts.setdefault(keyed(op), []).append(op)
    used = [0, 0]  # steps, memo bytes

    def result(verdict: Verdict, **extra: Any) -> CheckResult:
        return CheckResult(
            verdict,
            len(ops),
            len(parts),
            used[0],
            time.monotonic() - started,
            overlapping,
            refusals,
            memo_bytes=used[1],
            **extra,
        )

    if require_contention and (overlapping == 0 or refusals == 0):
        return result(
            "invalid",
            detail="no contention (no overlapping operations or no refused CAS): "
            "the history cannot tell a CAS store from a last-write-wins one",
        )
    prepare = getattr(model, "prepare", None)
    verdicts: dict[Hashable, Verdict] = {}
    deadline = started + timeout_s
    ran_out: str | None = None
    for key, part in parts.items():
        searched = prepare(part) if callable(prepare) else part
        try:
            failure = search(
                searched,
                model,
                max_steps=max_steps,
                deadline=deadline,
                max_bytes=int(max_memory_mb * 1024 * 1024),
                used=used,
            )
        except Budget as exc:
            verdicts[key] = "unknown"
            ran_out = ran_out or exc.what
            if exc.what != "steps" or used[0] > max_steps:
                break  # time and memory are spent for every part alike
            continue
        if failure is not None:
            verdicts[key] = "illegal"
            return result(
                "illegal",
                failed_key=key,
                part_verdicts=verdicts,
                detail=_failure_report(key, part, failure),
            )
        verdicts[key] = "ok"
    if ran_out is not None:
        return result(
            "unknown",
            part_verdicts=verdicts,
            budget=ran_out,
            detail=f"unknown: budget ({ran_out}) exhausted before a verdict; raise "
            "max_steps / timeout_s / max_memory_mb or shorten the history",
        )
    return result("ok", part_verdicts=verdicts)


def _failure_report(key: Hashable, part: Sequence[Operation], failure: Failure) -> str:
    """The operations around the point where the longest legal order stopped."""
    blocked = part[failure.blocked]
    placed = list(failure.order[-8:])
    waiting = [i for i in failure.pending if not part[i].unknown]
    waiting = sorted([*waiting, failure.blocked], key=lambda i: part[i].call_ns)[-12:]
    if failure.blocked not in waiting:
        waiting = [*waiting[1:], failure.blocked]
    unknown = sum(1 for i in failure.pending if part[i].unknown)
    clock = _Clock([part[i] for i in (*placed, *waiting)], blocked.call_ns)
    lines = [
        f"key {key!r}: no legal order; the longest one places {len(failure.order)} of "
        f"{len(part)} operations, then cannot place operation #{failure.blocked} before it "
        f"returned (times {clock.unit} from its call).",
        "  last operations of that order (oldest first):",
        *(clock.line(i, part[i]) for i in placed),
        f"  state after them: {', '.join(sorted(repr(s) for s in failure.states))}",
        f"  not placed, called before #{failure.blocked} returned:",
    ]
    for i in waiting:
        mark = "   <- cannot take effect in its window" if i == failure.blocked else ""
        lines.append(clock.line(i, part[i]) + mark)
    if unknown:
        lines.append(f"  (and {unknown} earlier unknown outcomes, free to apply or not)")
    return "\n".join(lines)


class _Clock:
    """Times relative to one instant: in ms for ``monotonic_ns`` histories, else raw."""

    def __init__(self, ops: Sequence[Operation], origin: float) -> None:
        finite = [t - origin for op in ops for t in (op.call_ns, op.return_ns) if math.isfinite(t)]
        wide = any(abs(t) >= 100_000 for t in finite)
        self.scale, self.unit = (1e6, "in ms") if wide else (1.0, "in the history's units")
        self.origin = origin

    def at(self, t: float) -> str:
        if math.isinf(t):
            return "inf"
        value = (t - self.origin) / self.scale
        return f"{value:+.3f}" if self.scale != 1.0 else f"{value:+g}"

    def line(self, i: int, op: Operation) -> str:
        return (
            f"    #{i} [{self.at(op.call_ns)} .. {self.at(op.return_ns)}] p{op.process} "
            f"{op.kind}({op.input!r}) -> {op.output!r}"
        )
