"""Frozen transition tables derived from the machine classes, for hot paths.

Instantiating a python-statemachine machine costs ~0.3 ms, so the core never does it. Instead
each class is *introspected* once, at import: for every (state, event, guard value) the
transitions of the state are tried in declaration order, exactly as the engine tries them, and
the first whose guard holds gives the target. The classes stay the one source of truth; the
bridge test (``tests/machines``) executes every cell on a real machine and compares.

Each machine has exactly one boolean guard read from its model (``expired``, ``stored``,
``busy``); a transition may be conditioned on it (``cond=``) or on its negation (``unless=``)
and on nothing else. Any other guard makes the import fail loudly (see ADR-0010).
"""

from __future__ import annotations

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
from .lease import LeaseModel, TurnLeaseEvent, TurnLeaseLifecycle, TurnLeaseState

__all__ = [
    "CONFIRMATION_FACTS",
    "CONFIRMATION_TABLE",
    "CURSOR_TABLE",
    "LEASE_TABLE",
    "MACHINES",
    "ConfirmationFacts",
    "ConfirmationTable",
    "MachineSpec",
    "confirmation_facts",
    "derive_table",
    "executed_table",
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


def derive_table(
    machine: type[StateMachine], states: type[S], events: type[E], guard: str
) -> Mapping[tuple[S, E, bool], S]:
    """The (state, event, guard value) -> target table of ``machine``, by introspection.

    Cells that are absent are illegal moves. The result is read-only.
    """
    table: dict[tuple[S, E, bool], S] = {}
    for state in machine.states_map.values():
        source = states(state.value)
        for event in events:
            for value in (False, True):
                for transition in state.transitions:  # declaration order, as the engine tries
                    if event.value not in {e.id for e in transition.events}:
                        continue
                    if list(transition.validators):
                        raise DefinitionError("validators are not expressible in a table")
                    if all(_guard_holds(str(c), guard, value) for c in transition.cond):
                        table[(source, event, value)] = states(transition.target.value)
                        break
    return MappingProxyType(table)


def executed_table(
    machine: type[StateMachine],
    states: type[S],
    events: type[E],
    make_model: Callable[[S, bool], Any],
) -> dict[tuple[S, E, bool], S]:
    """The same table obtained by *running* the machine from every restored state.

    Slow (one machine per cell); for the bridge test and tools, never for hot paths.
    """
    out: dict[tuple[S, E, bool], S] = {}
    for state in states:
        for event in events:
            for value in (False, True):
                model = make_model(state, value)
                try:
                    machine(model=model).send(event.value)
                except TransitionNotAllowed:
                    continue
                out[(state, event, value)] = states(model.state)
    return out


@dataclass(frozen=True)
class MachineSpec(Generic[S, E]):
    """Everything tools need about one machine: class, vocabularies, guard and table."""

    name: str
    machine: type[StateMachine]
    states: type[S]
    events: type[E]
    guard: str
    table: Mapping[tuple[S, E, bool], S]
    make_model: Callable[[S, bool], Any]

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


def step(machine: str, table: Mapping[tuple[S, E, bool], S], state: S, event: E, guard: bool) -> S:
    """The target of (state, event, guard) in ``table``; raises :class:`IllegalTransition`."""
    target = table.get((state, event, guard))
    if target is None:
        raise IllegalTransition(machine, str(state), str(event))
    return target
