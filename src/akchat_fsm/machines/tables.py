"""Frozen transition tables derived from the machine classes, for hot paths.

Instantiating a python-statemachine machine costs ~0.3 ms, so the core never does it. Instead
each class is *introspected* once, at import: for every (state, event, guard value) the
transitions of the state are tried in declaration order, exactly as the engine tries them, and
the first whose guard holds gives the target. The classes stay the one source of truth; the
bridge test (``tests/machines``) executes every cell on a real machine and compares.

Each machine names its boolean guards, read from its model: one for the confirmation, cursor
and lease machines (``expired``, ``stored``, ``busy``; their cells are keyed by the guard's
value), several for the ledger entry and the run record (``ours`` and ``idempotent`` /
``recover``; their cells are keyed by the tuple of values in the declared order, ADR-0120). A
transition may be conditioned on a named guard (``cond=``) or on its negation (``unless=``) and
on nothing else. Any other guard makes the import fail loudly (see ADR-0010).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from statemachine import StateMachine
from statemachine.exceptions import TransitionNotAllowed

from ..errors import IllegalTransition
from ..wire.enums import ConfirmationStatus
from .confirmation import ConfirmationEvent, ConfirmationLifecycle, ConfirmationModel
from .cursor import CursorEvent, CursorModel, CursorPhase, SessionCursorLifecycle
from .execution import ExecutionEvent, ExecutionLifecycle, ExecutionModel, ExecutionState
from .lease import LeaseModel, TurnLeaseEvent, TurnLeaseLifecycle, TurnLeaseState
from .run import RunEvent, RunLifecycle, RunModel, RunState

__all__ = [
    "CONFIRMATION_FACTS",
    "CONFIRMATION_TABLE",
    "CURSOR_TABLE",
    "EXECUTION_GUARDS",
    "EXECUTION_TABLE",
    "LEASE_TABLE",
    "MACHINES",
    "RUN_GUARDS",
    "RUN_TABLE",
    "ConfirmationFacts",
    "ConfirmationTable",
    "MachineSpec",
    "confirmation_facts",
    "derive_guarded_table",
    "derive_table",
    "executed_table",
    "guard_assignment",
    "guard_values",
    "step",
]

S = TypeVar("S", bound=StrEnum)
E = TypeVar("E", bound=StrEnum)


class DefinitionError(RuntimeError):
    """A machine uses a guard the table derivation cannot express (a programming error)."""


def _guard_holds(spec: str, guard: str, value: bool) -> bool:
    if spec == guard:
        return value
    if spec == f"!{guard}":
        return not value
    raise DefinitionError(f"unsupported guard {spec!r}: only {guard!r} or its negation")


def _guards_hold(spec: str, values: Mapping[str, bool]) -> bool:
    name = spec.removeprefix("!")
    if name not in values:
        raise DefinitionError(
            f"unsupported guard {spec!r}: only {', '.join(map(repr, values))} or their negations"
        )
    return values[name] if spec == name else not values[name]


def guard_values(guards: str | tuple[str, ...]) -> tuple[Any, ...]:
    """Every guard key of a machine with ``guards``: ``False, True`` for one named guard, else
    every tuple of values in the declared order (``(False, False), (False, True), ...``)."""
    if isinstance(guards, str):
        return (False, True)
    return tuple(itertools.product((False, True), repeat=len(guards)))


def guard_assignment(guards: str | tuple[str, ...], value: Any) -> dict[str, bool]:
    """The guard key ``value`` as ``{guard name: value}``."""
    if isinstance(guards, str):
        return {guards: bool(value)}
    return dict(zip(guards, value, strict=True))


def _derive(
    machine: type[StateMachine], states: type[S], events: type[E], guards: str | tuple[str, ...]
) -> dict[tuple[S, E, Any], S]:
    table: dict[tuple[S, E, Any], S] = {}
    for state in machine.states_map.values():
        source = states(state.value)
        for event in events:
            for value in guard_values(guards):
                holds = guard_assignment(guards, value)
                for transition in state.transitions:  # declaration order, as the engine tries
                    if event.value not in {e.id for e in transition.events}:
                        continue
                    if list(transition.validators):
                        raise DefinitionError("validators are not expressible in a table")
                    if isinstance(guards, str):
                        ok = all(_guard_holds(str(c), guards, value) for c in transition.cond)
                    else:
                        ok = all(_guards_hold(str(c), holds) for c in transition.cond)
                    if ok:
                        table[(source, event, value)] = states(transition.target.value)
                        break
    return table


def derive_table(
    machine: type[StateMachine], states: type[S], events: type[E], guard: str
) -> Mapping[tuple[S, E, bool], S]:
    """The (state, event, guard value) -> target table of ``machine``, by introspection.

    Cells that are absent are illegal moves. The result is read-only.
    """
    return MappingProxyType(_derive(machine, states, events, guard))


def derive_guarded_table(
    machine: type[StateMachine], states: type[S], events: type[E], guards: tuple[str, ...]
) -> Mapping[tuple[S, E, tuple[bool, ...]], S]:
    """:func:`derive_table` for a machine with several named guards: each cell is keyed by the
    tuple of the guards' values, in the order ``guards`` names them. Read-only."""
    if len(set(guards)) != len(guards) or len(guards) < 2:
        raise DefinitionError(f"name two or more distinct guards, not {guards!r}")
    return MappingProxyType(_derive(machine, states, events, guards))


def executed_table(
    machine: type[StateMachine],
    states: type[S],
    events: type[E],
    make_model: Callable[[S, Any], Any],
    guards: str | tuple[str, ...] = "guard",
) -> dict[tuple[S, E, Any], S]:
    """The same table obtained by *running* the machine from every restored state.

    ``make_model(state, guard key)`` restores the box; ``guards`` says which keys exist (one
    name: ``False, True``; a tuple of names: every tuple of values). Slow (one machine per
    cell); for the bridge test and tools, never for hot paths.
    """
    out: dict[tuple[S, E, Any], S] = {}
    for state in states:
        for event in events:
            for value in guard_values(guards):
                model = make_model(state, value)
                try:
                    machine(model=model).send(event.value)
                except TransitionNotAllowed:
                    continue
                out[(state, event, value)] = states(model.state)
    return out


@dataclass(frozen=True)
class MachineSpec(Generic[S, E]):
    """Everything tools need about one machine: class, vocabularies, guard(s) and table.

    ``guard`` is the one guard's name (cells keyed by its value) or a tuple of names (cells
    keyed by the tuple of their values, in that order).
    """

    name: str
    machine: type[StateMachine]
    states: type[S]
    events: type[E]
    guard: str | tuple[str, ...]
    table: Mapping[tuple[S, E, Any], S]
    make_model: Callable[[S, Any], Any]

    @property
    def guards(self) -> tuple[str, ...]:
        """The guard names, in key order."""
        return (self.guard,) if isinstance(self.guard, str) else self.guard

    @property
    def guard_values(self) -> tuple[Any, ...]:
        """Every guard key a cell may have."""
        return guard_values(self.guard)

    def assignment(self, value: Any) -> dict[str, bool]:
        """The guard key ``value`` as ``{guard name: value}``."""
        return guard_assignment(self.guard, value)

    @property
    def initial(self) -> S:
        return self.states(self.machine.initial_state.value)

    @property
    def finals(self) -> frozenset[S]:
        return frozenset(self.states(s.value) for s in self.machine.final_states)


CONFIRMATION_TABLE: Mapping[tuple[ConfirmationStatus, ConfirmationEvent, bool], ConfirmationStatus]
CONFIRMATION_TABLE = derive_table(
    ConfirmationLifecycle, ConfirmationStatus, ConfirmationEvent, "expired"
)
CURSOR_TABLE: Mapping[tuple[CursorPhase, CursorEvent, bool], CursorPhase]
CURSOR_TABLE = derive_table(SessionCursorLifecycle, CursorPhase, CursorEvent, "stored")
LEASE_TABLE: Mapping[tuple[TurnLeaseState, TurnLeaseEvent, bool], TurnLeaseState]
LEASE_TABLE = derive_table(TurnLeaseLifecycle, TurnLeaseState, TurnLeaseEvent, "busy")
#: The ledger entry's guards, in key order: (the stored claim is the caller's, the tool is
#: declared idempotent).
EXECUTION_GUARDS = ("ours", "idempotent")
EXECUTION_TABLE: Mapping[tuple[ExecutionState, ExecutionEvent, tuple[bool, ...]], ExecutionState]
EXECUTION_TABLE = derive_guarded_table(
    ExecutionLifecycle, ExecutionState, ExecutionEvent, EXECUTION_GUARDS
)
#: The run record's guards, in key order: (the stored claim is the caller's, a recovery).
RUN_GUARDS = ("ours", "recover")
RUN_TABLE: Mapping[tuple[RunState, RunEvent, tuple[bool, ...]], RunState]
RUN_TABLE = derive_guarded_table(RunLifecycle, RunState, RunEvent, RUN_GUARDS)

ConfirmationTable = Mapping[tuple[ConfirmationStatus, ConfirmationEvent, bool], ConfirmationStatus]


@dataclass(frozen=True)
class ConfirmationFacts:
    """The lifecycle facts the other layers use, each read off one confirmation table.

    Nothing here is written by hand: :func:`confirmation_facts` derives every field from the
    table (and the initial state), so a changed machine changes them with it (ADR-0114).
    """

    #: The events a ``pending`` record accepts: the claims (approve, reject, expire).
    claim_events: frozenset[ConfirmationEvent]
    #: The states a claim moves to: the processing states.
    processing: frozenset[ConfirmationStatus]
    #: The states no event leaves: the final states.
    terminal: frozenset[ConfirmationStatus]
    #: Each processing state -> the one final state it may enter (its own).
    matching_terminal: Mapping[ConfirmationStatus, ConfirmationStatus]
    #: The claim an approve takes before expiry: the only one whose winner calls upstream
    #: ``approve`` (every other claim denies).
    approving: ConfirmationStatus
    #: The claim ``expire`` takes: its winner denies upstream with the expiry reason.
    expiring: ConfirmationStatus


def confirmation_facts(
    table: ConfirmationTable, initial: ConfirmationStatus = ConfirmationStatus.PENDING
) -> ConfirmationFacts:
    """Derive :class:`ConfirmationFacts` from ``table``; refuse a table the protocol cannot run.

    A claim is an event the initial state accepts, and the states claims move to are the
    processing states. The resolution protocol needs each processing state to enter exactly one
    final state, no two to share one, nothing else to enter a final state, and approve (before
    expiry) and expire to claim two distinct states; a table without these raises
    :class:`DefinitionError` (at import, for the real table).
    """
    claims = {cell: t for cell, t in table.items() if cell[0] is initial}
    processing = frozenset(claims.values())
    exits = {state for state, _, _ in table}
    terminal = frozenset(s for s in ConfirmationStatus if s not in exits)
    matching: dict[ConfirmationStatus, set[ConfirmationStatus]] = {s: set() for s in processing}
    for (state, event, _), target in table.items():
        if target not in terminal:
            continue
        if state not in processing:
            raise DefinitionError(f"{state} enters final {target} on {event} without a claim")
        matching[state].add(target)
    finals = [next(iter(targets)) for targets in matching.values() if len(targets) == 1]
    if len(finals) != len(matching) or len(set(finals)) != len(finals):
        raise DefinitionError(f"processing states must each own one final state: {matching}")
    approving = table.get((initial, ConfirmationEvent.APPROVE, False))
    expiring = table.get((initial, ConfirmationEvent.EXPIRE, True))
    if approving is None or expiring is None or approving is expiring:
        raise DefinitionError("approve before expiry and expire must claim two distinct states")
    return ConfirmationFacts(
        claim_events=frozenset(event for (_, event, _) in claims),
        processing=processing,
        terminal=terminal,
        matching_terminal=MappingProxyType(
            {s: next(iter(matching[s])) for s in ConfirmationStatus if s in matching}
        ),
        approving=approving,
        expiring=expiring,
    )


CONFIRMATION_FACTS = confirmation_facts(
    CONFIRMATION_TABLE, ConfirmationStatus(ConfirmationLifecycle.initial_state.value)
)


def _check_wire_agrees(facts: ConfirmationFacts) -> None:
    """The wire's ``is_terminal`` / ``is_processing`` (storage reads them) name the table's sets."""
    wire = (
        frozenset(s for s in ConfirmationStatus if s.is_terminal),
        frozenset(s for s in ConfirmationStatus if s.is_processing),
    )
    if wire != (facts.terminal, facts.processing):
        raise DefinitionError(
            f"wire says final {set(wire[0])}, processing {set(wire[1])}; the table says final "
            f"{set(facts.terminal)}, processing {set(facts.processing)}"
        )


_check_wire_agrees(CONFIRMATION_FACTS)

MACHINES: Mapping[str, MachineSpec[Any, Any]] = MappingProxyType(
    {
        "confirmation": MachineSpec(
            "confirmation",
            ConfirmationLifecycle,
            ConfirmationStatus,
            ConfirmationEvent,
            "expired",
            CONFIRMATION_TABLE,
            lambda s, g: ConfirmationModel(s, expired=g),
        ),
        "session_cursor": MachineSpec(
            "session_cursor",
            SessionCursorLifecycle,
            CursorPhase,
            CursorEvent,
            "stored",
            CURSOR_TABLE,
            lambda s, g: CursorModel(s, stored=g),
        ),
        "execution": MachineSpec(
            "execution",
            ExecutionLifecycle,
            ExecutionState,
            ExecutionEvent,
            EXECUTION_GUARDS,
            EXECUTION_TABLE,
            lambda s, g: ExecutionModel(s, ours=g[0], idempotent=g[1]),
        ),
        "run": MachineSpec(
            "run",
            RunLifecycle,
            RunState,
            RunEvent,
            RUN_GUARDS,
            RUN_TABLE,
            lambda s, g: RunModel(s, ours=g[0], recover=g[1]),
        ),
        "turn_lease": MachineSpec(
            "turn_lease",
            TurnLeaseLifecycle,
            TurnLeaseState,
            TurnLeaseEvent,
            "busy",
            LEASE_TABLE,
            lambda s, g: LeaseModel(s, busy=g),
        ),
    }
)


G = TypeVar("G")


def step(machine: str, table: Mapping[tuple[S, E, G], S], state: S, event: E, guard: G) -> S:
    """The target of (state, event, guard) in ``table``; raises :class:`IllegalTransition`."""
    target = table.get((state, event, guard))
    if target is None:
        raise IllegalTransition(machine, str(state), str(event))
    return target
