"""The search behind :func:`akchat_fsm.testing.linearizability.check_history`, for one part.

Wing & Gong's algorithm with Lowe's memoisation: walk the call/return events, linearize a
pending call against the model, remember every ``(linearized set, state set)`` already
explored, and backtrack when a return is reached before its call was linearized.

Operations whose outcome is unknown *and* that never returned (``return_ns = inf``) are kept
out of the event list. They constrain nothing (no return, no output), so the search applies
one only when its effect is needed, and only the *applied* effect: "not applied" is the
same as never applying it. Two such operations with the same ``kind`` and ``input`` are
interchangeable once both were called, so they form a class applied earliest call first:
the search remembers how many of a class it applied, not which subset. Without this a
history with a thousand unknown outcomes has 2**1000 subsets to tell apart (the reason the
plain search ran out of memory on one).

That lazy order is one of two. The eager order (0.1.0's) keeps those operations in the event
list with their return at ``inf`` and linearizes each like any call, both outcomes at once,
as soon as the scan meets it. Where the unknown outcomes took effect early (clients in
lockstep) it needs a fraction of the lazy order's steps and memory; where they land late it
backtracks through their subsets and never ends, which the lazy order does not. So
:func:`search` runs both in turns over one budget and takes the first verdict (issue 27).

Memory is bounded like steps and time: the memo's size is estimated as it grows and the
search gives up with :class:`Budget` when it would pass ``max_bytes``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Generator, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Budget", "Failure", "search"]

# Bytes one memo entry costs besides its bitsets: the tuple, the dict slot, the list, a share
# of the state set; and one more applied-set in an entry's list. Checked against tracemalloc:
# 27.3 MB estimated / 22.4 MB traced peak on the 5,000-op benchmark history, 3.5 / 3.8-4.8 MB
# on illegal ones (the trace also holds the history and its event list).
_ENTRY_OVERHEAD = 200
_LIST_ITEM = 40
# A cached step: the key tuple, the dict slot, a share of the resulting state set.
_CACHE_ENTRY = 150


def _size(bitset: int) -> int:
    return 28 + 4 * (bitset.bit_length() // 30)


class Budget(Exception):
    """The search ran out of ``what`` (``"steps"``, ``"time"`` or ``"memory"``)."""

    def __init__(self, what: Literal["steps", "time", "memory"]) -> None:
        super().__init__(what)
        self.what = what


@dataclass(frozen=True)
class Failure:
    """Where the deepest attempt stopped: the order it found, and what it could not place."""

    #: Indices (into the part) of the operations of the longest legal order, in that order.
    order: tuple[int, ...]
    #: The model states possible after ``order``.
    states: frozenset[Any]
    #: The operation whose return came before any legal order could place it.
    blocked: int
    #: Operations called before ``blocked`` returned and not in ``order``.
    pending: tuple[int, ...]


class _Node:
    __slots__ = ("is_call", "match", "next", "op_index", "prev", "time")

    def __init__(self, op_index: int, time: float, is_call: bool) -> None:
        self.op_index = op_index
        self.time = time
        self.is_call = is_call
        self.match: _Node | None = None
        self.prev: _Node | None = None
        self.next: _Node | None = None


def _event_list(ops: Sequence[Any], indices: Sequence[int]) -> _Node:
    """A doubly linked list of call/return events in time order, behind a sentinel head."""
    events: list[tuple[float, int, int]] = []
    for i in indices:
        events.append((ops[i].call_ns, 0, i))  # at equal times calls sort first: concurrent
        events.append((ops[i].return_ns, 1, i))
    events.sort()
    head = _Node(-1, -math.inf, False)
    calls: dict[int, _Node] = {}
    prev = head
    for at, is_return, i in events:
        node = _Node(i, at, not is_return)
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


def _classes(ops: Sequence[Any], pool: Sequence[int]) -> list[list[int]]:
    """Unknown, never-returned operations grouped by ``(kind, input)``, earliest call first."""
    groups: dict[Hashable, list[int]] = {}
    for i in pool:
        groups.setdefault((ops[i].kind, ops[i].input), []).append(i)
    return [sorted(members, key=lambda i: ops[i].call_ns) for members in groups.values()]


#: Steps one search runs before the other takes its turn (times its weight).
SLICE = 4096
#: The search orders and their share of the steps while both run: the eager order decides
#: a contended history whose unknown outcomes took effect early (the kit's lockstep
#: workers) in a fraction of the lazy order's steps and memory, the lazy one a history whose
#: unknown outcomes land late, where the eager one backtracks through 2**n subsets. Running
#: both costs at most (1 + 1/2) times the better one's steps on the first kind, 3 times on
#: the second, and never decides what neither would (each is complete on its own).
ORDERS: dict[str, int] = {"eager": 2, "lazy": 1}


class _Pool:
    """The budget the searches of one check share: steps, a deadline, live memo bytes."""

    def __init__(self, max_steps: int, deadline: float, max_bytes: int, used: list[int]) -> None:
        self.max_steps = max_steps
        self.deadline = deadline
        self.max_bytes = max_bytes
        self.used = used  # [steps, peak memo bytes] over every part of one check
        self.live = 0  # memo bytes of the searches still running


class _Meter:
    """One search's steps and memo bytes, counted against the shared :class:`_Pool`."""

    def __init__(self, pool: _Pool) -> None:
        self.pool = pool
        self.steps = 0  # steps of the current slice, not yet added to ``pool.used``
        self.slice = 1
        self.bytes = 0

    def begin(self, length: int) -> None:
        """Let the search run ``length`` more steps (fewer if the budget ends first)."""
        self.slice = min(length, self.pool.max_steps - self.pool.used[0] + 1)

    def tick(self) -> bool:
        """Count a step; ``True`` when the slice is over (the search yields)."""
        self.steps += 1
        if self.steps < self.slice:
            return False
        self.flush()
        if self.pool.used[0] > self.pool.max_steps:
            raise Budget("steps")
        if time.monotonic() > self.pool.deadline:
            raise Budget("time")
        return True

    def add(self, size: int) -> None:
        """The memo grew by ``size`` bytes (this search's memo; freed when it ends)."""
        self.bytes += size
        pool = self.pool
        pool.live += size
        if pool.live > pool.used[1]:
            pool.used[1] = pool.live
        if pool.live > pool.max_bytes:
            self.flush()
            raise Budget("memory")

    def flush(self) -> None:
        self.pool.used[0] += self.steps
        self.steps = 0

    def release(self) -> None:
        """The search ended: its memo is freed."""
        self.flush()
        self.pool.live -= self.bytes
        self.bytes = 0


def search(
    ops: Sequence[Any],
    model: Any,
    *,
    max_steps: int,
    deadline: float,
    max_bytes: int,
    used: list[int],
    orders: Sequence[str] | None = None,
) -> Failure | None:
    """``None`` if ``ops`` linearize against ``model``, else the deepest failed attempt.

    The orders in ``orders`` (default: every one in ``ORDERS``) run in turns of
    ``SLICE * weight`` steps over one budget; the first to decide gives the verdict (each
    decides alone, so they never disagree). A search that runs out of memory drops out and
    frees its memo; the others go on. Raises :class:`Budget` when every order ran out (the
    last one's reason). ``used`` accumulates ``[steps, memo bytes]`` across calls (the
    budget is per check).
    """
    # Indices in call order: an operation's bit then says how early it was called, so the
    # linearized set is a run of ones below a narrow window, which the memo stores shifted.
    by_call = sorted(range(len(ops)), key=lambda i: (ops[i].call_ns, i))
    called = [ops[i] for i in by_call]
    pool = _Pool(max_steps, deadline, max_bytes, used)
    runs = []
    for name in tuple(ORDERS) if orders is None else orders:
        meter = _Meter(pool)
        runs.append((ORDERS[name], meter, _searching(called, model, meter, lazy=name == "lazy")))
    ran_out: Budget | None = None
    try:
        while runs:
            for run in list(runs):
                weight, meter, steps = run
                meter.begin(SLICE * weight)
                try:
                    next(steps)
                except StopIteration as done:
                    meter.release()
                    failure: Failure | None = done.value
                    return None if failure is None else _renumbered(failure, by_call)
                except Budget as exc:
                    meter.release()
                    runs.remove(run)
                    ran_out = exc
                    if exc.what != "memory":
                        raise  # steps and time are spent for every order alike
        assert ran_out is not None
        raise ran_out
    finally:
        for _, meter, steps in runs:
            steps.close()
            meter.release()


def _renumbered(failure: Failure, by_call: Sequence[int]) -> Failure:
    """A failure found on the call-ordered operations, in the caller's numbering."""
    return Failure(
        tuple(by_call[i] for i in failure.order),
        failure.states,
        by_call[failure.blocked],
        tuple(sorted(by_call[i] for i in failure.pending)),
    )


def _searching(
    ops: Sequence[Any], model: Any, meter: _Meter, *, lazy: bool
) -> Generator[None, None, Failure | None]:
    """One search order, run in slices: yields when its slice is over, returns the verdict.

    ``lazy``: unknown outcomes that never returned stay out of the event list and are
    applied by class only when needed (see the module). Otherwise (the eager order, 0.1.0's)
    they are calls whose return is at ``inf``, linearized like any other call with both
    outcomes at once, as soon as the scan meets them.
    """
    known = [
        i for i, op in enumerate(ops) if not (lazy and op.unknown and math.isinf(op.return_ns))
    ]
    known_set = set(known)
    classes = _classes(ops, [i for i in range(len(ops)) if i not in known_set])
    applied = [0] * len(classes)
    head = _event_list(ops, known)
    state: frozenset[Any] = frozenset((model.init(),))
    # The configuration: which known operations are linearized (a bitset), which unknown
    # ones were applied (another), and the set of possible model states.
    done = unknowns = 0
    memo = _Memo(meter)
    # The search revisits the same (state, op) pairs many times: step each pair once.
    steps_of: dict[tuple[frozenset[Any], int], frozenset[Any]] = {}
    effects_of: dict[tuple[frozenset[Any], int], frozenset[Any]] = {}
    # A frame: (operation index, its call node or None for a class member, class index,
    # the state before).
    stack: list[tuple[int, _Node | None, int, frozenset[Any]]] = []
    order: list[int] = []
    deepest: tuple[tuple[int, ...], frozenset[Any]] = ((), state)
    entry = head.next
    scan_classes_from = -1  # -1: scanning the event list; else the next class to try

    while head.next is not None:
        if meter.tick():
            yield
        if scan_classes_from < 0:
            assert entry is not None
            if entry.is_call:
                index = entry.op_index
                new_state = steps_of.get((state, index))
                if new_state is None:
                    new_state = frozenset(s for old in state for s in model.step(old, ops[index]))
                    steps_of[(state, index)] = new_state
                    meter.add(_CACHE_ENTRY)
                if new_state and memo.visit(done | (1 << index), new_state, unknowns):
                    stack.append((index, entry, -1, state))
                    order.append(index)
                    state, done = new_state, done | (1 << index)
                    if len(order) > len(deepest[0]):
                        deepest = (tuple(order), state)
                    _lift(entry)
                    entry = head.next
                    continue
                entry = entry.next
                continue
            scan_classes_from = 0  # reached a return: try the unknown outcomes next
        # Class members may take effect before the first pending return.
        horizon = _first_return(head)
        moved = False
        for c in range(scan_classes_from, len(classes)):
            members = classes[c]
            if applied[c] >= len(members) or ops[members[applied[c]]].call_ns > horizon:
                continue
            index = members[applied[c]]
            effect = effects_of.get((state, c))
            if effect is None:
                op = ops[index]
                effect = frozenset(s for old in state for s in model.step(old, op) if s != old)
                effects_of[(state, c)] = effect
                meter.add(_CACHE_ENTRY)
            if not effect or not memo.visit(done, effect, unknowns | (1 << index)):
                continue
            stack.append((index, None, c, state))
            order.append(index)
            applied[c] += 1
            state, unknowns = effect, unknowns | (1 << index)
            entry, scan_classes_from, moved = head.next, -1, True
            break
        if moved:
            continue
        # Nothing fits before this return: undo the last choice and try the next one.
        if not stack:
            order_found, states = deepest
            return _failure(ops, order_found, states)
        index, node, c, state = stack.pop()
        order.pop()
        if node is not None:
            done &= ~(1 << index)
            _unlift(node)
            entry, scan_classes_from = node.next, -1
        else:
            unknowns &= ~(1 << index)
            applied[c] -= 1
            scan_classes_from = c + 1
    return None


class _Memo:
    """Configurations already explored, with dominance on unknown outcomes.

    A configuration that applied a *subset* of the unknown outcomes another one applied
    (same linearized known operations, same states) has every option the other has, and
    more. So once ``(done, states, U)`` was explored, any ``(done, states, U' ⊇ U)`` is too.
    """

    __slots__ = ("_meter", "_seen")

    def __init__(self, meter: _Meter) -> None:
        self._seen: dict[tuple[int, int, frozenset[Any]], list[int]] = {}
        self._meter = meter

    def visit(self, done: int, states: frozenset[Any], unknowns: int) -> bool:
        """Record the configuration; ``False`` if it (or one dominating it) was explored.

        ``done`` is stored as its lowest unset bit and the bits above it: operations are
        numbered in call order and placed roughly in that order, so that is a few words
        where the whole bitset of a 20,000-operation history is 2.5 KB per entry.
        """
        low = (~done & (done + 1)).bit_length() - 1
        window = done >> low
        key = (low, window, states)
        applied = self._seen.get(key)
        if applied is None:
            self._seen[key] = [unknowns]
            self._meter.add(_ENTRY_OVERHEAD + _size(window) + _size(unknowns))
            return True
        for other in applied:
            if other & ~unknowns == 0:
                return False
        kept = [other for other in applied if unknowns & ~other != 0]
        freed = sum(_LIST_ITEM + _size(other) for other in applied if unknowns & ~other == 0)
        applied[:] = [*kept, unknowns]
        self._meter.add(_LIST_ITEM + _size(unknowns) - freed)
        return True


def _first_return(head: _Node) -> float:
    node = head.next
    while node is not None and node.is_call:
        node = node.next
    return math.inf if node is None else node.time


def _failure(ops: Sequence[Any], order: tuple[int, ...], states: frozenset[Any]) -> Failure:
    """Describe the deepest attempt: which operation no legal order could place in time."""
    done = set(order)
    known = [i for i, op in enumerate(ops) if i not in done and not math.isinf(op.return_ns)]
    blocked = min(known, key=lambda i: ops[i].return_ns) if known else order[-1]
    limit = ops[blocked].return_ns
    pending = tuple(
        i for i, op in enumerate(ops) if i not in done and i != blocked and op.call_ns <= limit
    )
    return Failure(order, states, blocked, pending)
