"""A linearizability checker: record a concurrent history, then search for a legal order.

The search is Wing & Gong's algorithm with Lowe's memoisation (as in Knossos and porcupine):
walk the history's call/return events, try to linearize each pending call against a
sequential *model*, cache every ``(set of linearized ops, model state)`` already explored, and
backtrack when a return is reached before its call was linearized. The history is first split
per key (P-compositionality: a history is linearizable iff each per-key part is), which keeps
each search small.

Unknown outcomes follow etcd's convention: an operation that raised "outcome unknown" (or never
returned) gets ``return_ns = +inf`` and ``output = UNKNOWN``; it may take effect at any time
after its call, or never. Models are nondeterministic (``step`` returns every possible next
state), and the checker tracks sets of states, so "applied" and "not applied" are both explored.

Budget: each part gets at most ``max_steps`` search steps and ``timeout_s`` seconds; when either
runs out the verdict is ``"unknown"``, never ``"ok"``.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from ..errors import ConfigError

__all__ = [
    "UNKNOWN",
    "CasRegisterModel",
    "CheckResult",
    "EtcdRegisterModel",
    "History",
    "Model",
    "Operation",
    "check_history",
    "contention",
    "parse_jepsen_log",
]

S = TypeVar("S", bound=Hashable)

Verdict = Literal["ok", "illegal", "unknown", "invalid"]


class _Unknown:
    """The output of an operation whose outcome is unknown (matches any effect)."""

    _instance: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNKNOWN"

    def __reduce__(self) -> str:  # stays a singleton across pickling (process workers)
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()


@dataclass(frozen=True)
class Operation:
    """One completed (or abandoned) call.

    ``kind`` and ``input`` are interpreted by the model; ``output`` is what the call returned
    (``UNKNOWN`` if its outcome is unknown). ``call_ns``/``return_ns`` come from
    :func:`time.monotonic_ns` (comparable across processes on one Linux host); an unknown
    outcome has ``return_ns = math.inf``.
    """

    process: int | str
    kind: str
    input: Any
    output: Any
    call_ns: float
    return_ns: float
    key: Hashable = None

    @property
    def unknown(self) -> bool:
        return self.output is UNKNOWN


class Model(Protocol[S]):
    """A sequential specification."""

    def init(self) -> S:
        """The state before any operation."""
        ...

    def step(self, state: S, op: Operation) -> Iterable[S]:
        """Every state ``op`` may lead to from ``state``; empty when ``op`` is illegal there."""
        ...

    def is_refusal(self, op: Operation) -> bool:
        """Whether ``op`` is a definite conflict (a CAS that lost): a sign of contention."""
        ...


# --------------------------------------------------------------------------- recording


class History:
    """A thread-safe recorder of :class:`Operation` s.

    ``with history.record(process, kind, input, key=...) as call: call.output = ...``
    times the call; if the block raises an exception listed in ``unknown`` the operation is
    recorded with ``UNKNOWN`` output and ``return_ns = inf``; any other exception drops it.
    Exceptions always propagate.
    """

    def __init__(self) -> None:
        self._ops: list[Operation] = []
        self._lock = threading.Lock()

    def add(self, op: Operation) -> None:
        with self._lock:
            self._ops.append(op)

    def extend(self, ops: Iterable[Operation]) -> None:
        with self._lock:
            self._ops.extend(ops)

    @property
    def operations(self) -> list[Operation]:
        with self._lock:
            return list(self._ops)

    @contextmanager
    def record(
        self,
        process: int | str,
        kind: str,
        input: Any,
        *,
        key: Hashable = None,
        unknown: tuple[type[BaseException], ...] = (),
    ) -> Iterator[_Call]:
        """Time one call; any exception not in ``unknown`` propagates and records nothing
        (use it for failures that certainly applied nothing, such as ``StorageUnavailable``)."""
        call = _Call()
        call_ns = time.monotonic_ns()
        try:
            yield call
        except unknown:
            self.add(Operation(process, kind, input, UNKNOWN, call_ns, math.inf, key))
            raise
        self.add(Operation(process, kind, input, call.output, call_ns, time.monotonic_ns(), key))


@dataclass
class _Call:
    output: Any = None


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
        raise ConfigError(f"unknown operation kind {op.kind!r}")

    def is_refusal(self, op: Operation) -> bool:
        return op.kind == "save" and op.output is False


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
        raise ConfigError(f"unknown operation kind {op.kind!r}")

    def is_refusal(self, op: Operation) -> bool:
        return op.kind == "cas" and op.output is False


# --------------------------------------------------------------------------- the search


@dataclass
class CheckResult:
    """The verdict on a history.

    ``verdict`` is ``"ok"`` (every part linearizable), ``"illegal"`` (some part is not;
    ``failed_key`` names it and ``detail`` shows the longest legal prefix found),
    ``"unknown"`` (the budget ran out before a verdict) or ``"invalid"`` (contention was
    required and the history has none: it proves nothing).
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

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    def __str__(self) -> str:
        text = (
            f"linearizability {self.verdict.upper()}: {self.operations} ops in {self.parts} "
            f"part(s), {self.steps} steps, {self.seconds:.2f}s, "
            f"{self.overlapping_pairs} overlapping pairs, {self.refusals} refusals"
        )
        return f"{text}\n{self.detail}" if self.detail else text


class _Budget(Exception):
    pass


class _Node:
    __slots__ = ("is_call", "match", "next", "op", "op_index", "prev")

    def __init__(self, op_index: int, op: Operation | None, is_call: bool) -> None:
        self.op_index = op_index
        self.op = op
        self.is_call = is_call
        self.match: _Node | None = None
        self.prev: _Node | None = None
        self.next: _Node | None = None


def _event_list(ops: Sequence[Operation]) -> _Node:
    """A doubly linked list of call/return events in time order, behind a sentinel head."""
    events: list[tuple[float, int, int]] = []
    for i, op in enumerate(ops):
        events.append((op.call_ns, 0, i))  # at equal times calls sort first: concurrent
        events.append((op.return_ns, 1, i))
    events.sort()
    head = _Node(-1, None, False)
    calls: dict[int, _Node] = {}
    prev = head
    for _, is_return, i in events:
        node = _Node(i, ops[i], not is_return)
        if is_return:
            node.match = calls[i]
            calls[i].match = node
        else:
            calls[i] = node
        prev.next = node
        node.prev = prev
        prev = node
    return head


def _lift(call: _Node) -> None:
    """Remove a call and its return from the list."""
    for node in (call, call.match):
        assert node is not None and node.prev is not None
        node.prev.next = node.next
        if node.next is not None:
            node.next.prev = node.prev


def _unlift(call: _Node) -> None:
    for node in (call.match, call):
        assert node is not None and node.prev is not None
        node.prev.next = node
        if node.next is not None:
            node.next.prev = node


def _check_part(
    ops: Sequence[Operation],
    model: Model[Any],
    max_steps: int,
    deadline: float,
    steps_used: list[int],
) -> tuple[bool, int]:
    """WGL over one part. Returns (linearizable, longest linearized prefix)."""
    head = _event_list(ops)
    state: frozenset[Any] = frozenset((model.init(),))
    linearized = 0
    cache: set[tuple[int, frozenset[Any]]] = set()
    # The search revisits the same (state, op) pairs many times: step each pair once
    # (3x faster on the Jepsen corpus).
    transitions: dict[tuple[frozenset[Any], int], frozenset[Any]] = {}
    stack: list[tuple[_Node, frozenset[Any]]] = []
    best = 0
    entry = head.next
    steps = 0
    while head.next is not None:
        steps += 1
        if steps & 4095 == 0 and (steps_used[0] + steps > max_steps or time.monotonic() > deadline):
            steps_used[0] += steps
            raise _Budget
        assert entry is not None
        if entry.is_call:
            index = entry.op_index
            new_state = transitions.get((state, index))
            if new_state is None:
                op = entry.op
                assert op is not None
                new_state = frozenset(s for old in state for s in model.step(old, op))
                transitions[(state, index)] = new_state
            if new_state:
                key = (linearized | (1 << index), new_state)
                if key not in cache:
                    cache.add(key)
                    stack.append((entry, state))
                    state, linearized = new_state, key[0]
                    best = max(best, len(stack))
                    _lift(entry)
                    entry = head.next
                    continue
            entry = entry.next
        else:
            if not stack:
                steps_used[0] += steps
                return False, best
            entry, state = stack.pop()
            linearized &= ~(1 << entry.op_index)
            _unlift(entry)
            entry = entry.next
    steps_used[0] += steps
    return True, best


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


def check_history(
    ops: Iterable[Operation],
    model: Model[Any],
    *,
    max_steps: int = 2_000_000,
    timeout_s: float = 30.0,
    require_contention: bool = False,
    partition: Callable[[Operation], Hashable] | None = None,
) -> CheckResult:
    """Decide whether ``ops`` is linearizable with respect to ``model``.

    The history is split per ``op.key`` (or ``partition(op)``). With ``require_contention``,
    a history where no two same-key operations overlap, or no operation was refused, is
    ``"invalid"``: it would pass against a last-write-wins store too. The budget
    (``max_steps`` search steps, ``timeout_s`` seconds, over all parts) turns into an
    ``"unknown"`` verdict when exhausted.
    """
    ops = list(ops)
    started = time.monotonic()
    overlapping, refusals = contention(ops, model)
    keyed = partition or (lambda op: op.key)
    parts: dict[Hashable, list[Operation]] = {}
    for op in ops:
        parts.setdefault(keyed(op), []).append(op)
    steps = [0]

    def result(verdict: Verdict, **extra: Any) -> CheckResult:
        return CheckResult(
            verdict,
            len(ops),
            len(parts),
            steps[0],
            time.monotonic() - started,
            overlapping,
            refusals,
            **extra,
        )

    if require_contention and (overlapping == 0 or refusals == 0):
        return result(
            "invalid",
            detail="no contention (no overlapping operations or no refused CAS): "
            "the history cannot tell a CAS store from a last-write-wins one",
        )
    verdicts: dict[Hashable, Verdict] = {}
    deadline = started + timeout_s
    unknown = False
    for key, part in parts.items():
        try:
            legal, best = _check_part(part, model, max_steps, deadline, steps)
        except _Budget:
            verdicts[key] = "unknown"
            unknown = True
            continue
        if not legal:
            verdicts[key] = "illegal"
            return result(
                "illegal",
                failed_key=key,
                part_verdicts=verdicts,
                detail=f"key {key!r}: no legal order; the longest legal prefix linearizes "
                f"{best} of {len(part)} operations\n" + _timeline(part),
            )
        verdicts[key] = "ok"
    if unknown:
        return result(
            "unknown",
            part_verdicts=verdicts,
            detail="search budget exhausted: raise max_steps/timeout_s or shorten the history",
        )
    return result("ok", part_verdicts=verdicts)


def _timeline(ops: Sequence[Operation], limit: int = 40) -> str:
    """A text timeline of the first operations of a failing part."""
    ordered = sorted(ops, key=lambda o: o.call_ns)[:limit]
    if not ordered:
        return ""
    origin = ordered[0].call_ns
    lines = []
    for op in ordered:
        end = "inf" if math.isinf(op.return_ns) else f"{(op.return_ns - origin) / 1e6:.3f}"
        lines.append(
            f"  [{(op.call_ns - origin) / 1e6:.3f} .. {end}] ms  p{op.process} "
            f"{op.kind}({op.input!r}) -> {op.output!r}"
        )
    more = "" if len(ops) <= limit else f"\n  ... {len(ops) - limit} more"
    return "\n".join(lines) + more


# --------------------------------------------------------------------------- Jepsen logs

_JEPSEN_LINE = re.compile(r"^INFO\s+jepsen\.util\s+-\s+(\d+)\s+:(\w+)\s+:(\w+)\s+(.*?)\s*$")


def _jepsen_value(text: str) -> Any:
    if text == "nil":
        return None
    if text.startswith("["):
        a, b = text.strip("[]").split()
        return (_jepsen_value(a), _jepsen_value(b))
    if text.lstrip("-").isdigit():
        return int(text)
    return text  # e.g. ":timed-out"


def parse_jepsen_log(text: str) -> list[Operation]:
    """Operations of a Jepsen etcd register log (porcupine's corpus), for EtcdRegisterModel.

    Times are line numbers. ``:ok`` and ``:fail`` end an operation (a failed ``cas`` did not
    swap); ``:info``, a ``:fail :read :timed-out`` and an invocation that never returns have
    an unknown outcome.
    """
    pending: dict[int, tuple[str, Any, int]] = {}
    ops: list[Operation] = []
    for line_no, line in enumerate(text.splitlines()):
        match = _JEPSEN_LINE.match(line)
        if match is None:
            continue
        process, kind, f, value = int(match[1]), match[2], match[3], _jepsen_value(match[4])
        if kind == "invoke":
            pending[process] = (f, None if f == "read" else value, line_no)
            continue
        f_invoked, op_input, call = pending.pop(process)
        if kind == "ok":
            output = value if f == "read" else True
            ops.append(Operation(process, f, op_input, output, call, line_no))
        elif kind == "fail" and f == "cas":
            ops.append(Operation(process, f, op_input, False, call, line_no))
        else:  # :info, or a read that timed out
            ops.append(Operation(process, f_invoked, op_input, UNKNOWN, call, math.inf))
    for process, (f, op_input, call) in pending.items():
        ops.append(Operation(process, f, op_input, UNKNOWN, call, math.inf))
    return ops
