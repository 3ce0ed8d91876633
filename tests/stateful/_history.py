"""Code -> model: every step of a stateful run, abstracted and checked against the model.

The SPIN model (``models/resolution.pml``) proves its properties of its own runs; this module
checks that the code's runs are runs the model allows. Each history step of the confirmation
machine (``_machine.py``): a save reaching the store (applied or refused, on time or landing
late), an upstream approve/deny attempt, a client crashing or ending its plan, is mapped by
:func:`abstraction` to the model's state and checked by :class:`ModelChecker`. A step the
model does not allow raises :class:`Disallowed` (an ``AssertionError``) naming the step, the
abstract state before and after, and the rule broken; Hypothesis then prints the program that
reproduces it.

**The abstraction** (defined once, here): stored envelope + upstream record -> model state.

========================  ===================================================================
model (resolution.pml)    code
========================  ===================================================================
``reg_cursor``            the stored snapshot's ``cursor``
``reg_st[i]``             ``confirmations[i].status``, per token
``up_acted/up_kind[i]``   ``RecordingUpstream.acted[tool_call_id]`` (``approve`` / ``deny``),
                          ``born`` when upstream created the call already handled
``owner[i]`` (ghost)      :attr:`Record.claimant` (who wrote the current claim) and
                          :attr:`Record.alive` (it may still call upstream)
``expired`` guard         ``now >= expiresAt``, ``now`` being the write's own clock reading
                          (the milliseconds of its ``updatedAt``)
(turn lease)              ``activeTurn`` (turn id, ``expiresAt``), ``terminalTurns`` ids
========================  ===================================================================

**The rules**, each a statement of the model, with the lifecycle read from the same generated
table SPIN compiles (``machines.tables.CONFIRMATION_TABLE``, never restated here):

- ``cas``: a save applies iff it expected the stored cursor, and moves it by exactly one
  (``cas_save``, ``cursor_exact``);
- ``table``: every status change is a cell of the table under the write's expiry guard, and
  nothing leaves a final state (``fsm_next``, ``terminal_immutable``, ``expiry_honoured``);
- ``claim-first``: upstream is called only for a processing record, by the client whose claim
  save applied while it is still alive, once per claim, with the call the claim names; or by the
  reconciler right after its fence (``upstream_call``, ``no_replay``);
- ``fence``: the reconciler calls upstream only after re-saving the unchanged claim (ADR-0054);
- ``completion``: a final status is saved only once upstream acted that way
  (``no_false_completion``), by the claimant or the reconciler (only the claim's owner
  completes it);
- ``release``: only the reconciler releases, and only a claim whose claimant is gone
  (``MAY_RELEASE``);
- ``propose`` (not in the model: the model starts from a stored proposal): a record is born
  ``pending``, or final when upstream created its call already handled; ``retention``: only
  final records are pruned;
- ``reason`` (not in the model, which has no reasons): a claim's deny carries a reason;
- ``lease`` (not in the SPIN model; its machine's generated table is ``LEASE_TABLE``): each turn
  id's lease (free / held / released, from ``activeTurn`` and ``terminalTurns``) moves by a
  cell of the table under ``busy``: some lease had not expired at the write's clock reading.

Late landings are the model's ``Network`` (``-DINFLIGHT``): a write travelling after its
timeout lands with the CAS compared then, under the same rules; a claim that lands makes its
writer the claimant, alive only if it has not given the write up.

The ledger (:class:`LedgerChecker`, ``EXECUTION_TABLE``) and the bridges' agent runs
(:class:`BridgeChecker`, ``RUN_TABLE`` and the rules across records: a run claimed only once
every call is decided, resumed only from its own live claim with each call's own decision, a
body only for an approved call inside its own continuation, a recorded decision never proposed
again) are checked the same way, below.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from akchat_fsm.errors import OutcomeUnknown, StorageUnavailable
from akchat_fsm.machines.confirmation import ConfirmationEvent
from akchat_fsm.machines.execution import ExecutionEvent, ExecutionState
from akchat_fsm.machines.lease import TurnLeaseEvent, TurnLeaseState
from akchat_fsm.machines.run import RunEvent, RunState
from akchat_fsm.machines.tables import (
    CONFIRMATION_FACTS,
    CONFIRMATION_TABLE,
    EXECUTION_TABLE,
    LEASE_TABLE,
    MACHINES,
    RUN_TABLE,
)
from akchat_fsm.session.effects import CallApprove, CallDeny
from akchat_fsm.testing.doubles import RecordingUpstream
from akchat_fsm.wire.enums import ConfirmationStatus
from akchat_fsm.wire.session import SessionSnapshot

#: Who takes a step: a client (``c0`` ...), the host setting the session up, the reconciler.
HOST = "host"
RECONCILER = "reconciler"
INITIAL: ConfirmationStatus = MACHINES["confirmation"].initial
#: Each final state -> the upstream call that must have acted for it (the model's ``KIND_OF``):
#: the approving claim's final state needs ``approve``, every other one ``deny``.
ACTED_FOR = {
    final: "approve" if claim is CONFIRMATION_FACTS.approving else "deny"
    for claim, final in CONFIRMATION_FACTS.matching_terminal.items()
}
_EPOCH = datetime.fromisoformat("1970-01-01T00:00:00+00:00")


class Disallowed(AssertionError):
    """A code step the model does not allow."""


@dataclass(frozen=True)
class Record:
    """One confirmation as the model sees it."""

    status: ConfirmationStatus
    tool_call_id: str
    expires_at: int
    #: The ghost ``owner``: who wrote the current claim, and whether it may still call upstream.
    claimant: str | None = None
    alive: bool = False
    called: bool = False

    def describe(self, acted: str | None) -> str:
        owner = "" if self.claimant is None else f" by {self.claimant}"
        owner += "" if self.claimant is None or self.alive else " (gone)"
        return f"{self.status}{owner}, upstream {acted or 'untouched'}"


@dataclass(frozen=True)
class Abstract:
    """The model state: the cursor and each record (token -> :class:`Record`)."""

    cursor: int = 0
    records: Mapping[str, Record] = field(default_factory=dict)
    #: The turn lease (not in the SPIN model; its machine is ``LEASE_TABLE``): the active turn
    #: and its ``expiresAt``, and the finished turn ids.
    turn: tuple[str, int] | None = None
    finished: frozenset[str] = frozenset()

    def render(self, upstream: RecordingUpstream) -> str:
        parts = [f"cursor {self.cursor}"]
        if self.turn is not None:
            parts.append(f"turn {self.turn[0]} leased until {self.turn[1]}")
        for token, record in self.records.items():
            parts.append(f"{token} {record.describe(acted(upstream, record.tool_call_id))}")
        return "; ".join(parts)


def acted(upstream: RecordingUpstream, tool_call_id: str) -> str | None:
    """What upstream did to a call (``up_acted`` / ``up_kind``): ``approve``, ``deny``,
    ``born`` (created already handled, so no approve/deny will ever act), or ``None``."""
    done = upstream.acted.get(tool_call_id)
    if done is None and upstream.created.get(tool_call_id, "requires_confirmation") != (
        "requires_confirmation"
    ):
        return "born"
    return done


def write_clock(snapshot: SessionSnapshot) -> int:
    """The clock reading the write was decided on: ``updatedAt`` to the millisecond (the core
    writes its ``now`` there, then the write nonce's digits, ADR-0062)."""
    stamp = datetime.fromisoformat(snapshot.updated_at[:23] + "+00:00")
    return (stamp - _EPOCH) // _MS


_MS = datetime.fromisoformat("1970-01-01T00:00:00.001+00:00") - _EPOCH


def abstraction(snapshot: SessionSnapshot | None, ghosts: Abstract) -> Abstract:
    """The model state of a stored envelope; the ghosts (claimants) carry over from ``ghosts``.

    Upstream's part is read on demand (:func:`acted`): it is the recording upstream's own state.
    """
    if snapshot is None:
        return Abstract()
    records = {}
    for binding in snapshot.confirmations:
        old = ghosts.records.get(binding.token)
        records[binding.token] = (
            Record(binding.status, binding.tool_call_id, binding.expires_at)
            if old is None
            else replace(old, status=binding.status)
        )
    active = snapshot.active_turn
    return Abstract(
        snapshot.cursor,
        records,
        None if active is None else (active.turn_id, active.expires_at),
        frozenset(t.turn_id for t in snapshot.terminal_turns),
    )


def _lease_state(
    turn_id: str, turn: tuple[str, int] | None, done: frozenset[str]
) -> TurnLeaseState:
    if turn_id in done:
        return TurnLeaseState.RELEASED
    return TurnLeaseState.HELD if turn is not None and turn[0] == turn_id else TurnLeaseState.FREE


def _events(old: ConfirmationStatus, new: ConfirmationStatus, expired: bool) -> list[str]:
    """The machine's events that move ``old`` to ``new`` under the guard: the table's cells."""
    return [e for e in ConfirmationEvent if CONFIRMATION_TABLE.get((old, e, expired)) is new]


@dataclass
class ModelChecker:
    """Follows one run's history and refuses a step the model does not allow."""

    upstream: RecordingUpstream
    state: Abstract = field(default_factory=Abstract)
    #: Who takes the steps now (:meth:`acting`), whether they are late landings, and whether
    #: the writer of a late landing still runs the plan that sent it.
    actor: str = HOST
    late: bool = False
    alive: bool = True
    #: The tokens the reconciler's last applied save fenced (re-saved unchanged).
    fence: frozenset[str] = frozenset()
    steps: int = 0
    #: The refusal raised, if any: the history after it is no longer the model's to judge.
    failure: Disallowed | None = None

    @contextlib.contextmanager
    def acting(self, actor: str, *, late: bool = False, alive: bool = True) -> Iterator[None]:
        """Steps inside the block are ``actor``'s (``late``: saves landing after their writer
        was told "unknown"; ``alive``: that writer still runs the plan that sent them)."""
        before = self.actor, self.late, self.alive
        self.actor, self.late, self.alive = actor, late, alive
        try:
            yield
        except Exception:
            # A refusal inside a storage call reaches the plan as that call's failure (the
            # driver maps it): the refusal is what happened, whatever the plan made of it.
            if self.failure is not None:
                raise self.failure from None
            raise
        finally:
            self.actor, self.late, self.alive = before
        if self.failure is not None:
            raise self.failure

    def _fail(self, step: str, rule: str, after: Abstract | None = None) -> None:
        lines = [
            f"history step {self.steps} is not a step the model allows: {step}",
            f"  rule broken: {rule}",
            f"  model state before: {self.state.render(self.upstream)}",
        ]
        if after is not None:
            lines.append(f"  model state after:  {after.render(self.upstream)}")
        if self.failure is None:  # the first refusal is the one to report
            self.failure = Disallowed("\n".join(lines))
        raise self.failure

    # ------------------------------------------------------------------ saves
    def saved(self, snapshot: SessionSnapshot, expected: int | None, applied: bool) -> None:
        """A save reached the store (``RecordingStorage``'s observer)."""
        if self.failure is not None:
            return
        self.steps += 1
        actor, late, alive = self.actor, self.late, self.alive
        step = f"{actor} {'lands a late save' if late else 'saves'} expecting cursor {expected}"
        current = self.state.cursor if self.state.cursor else None
        if not applied:
            if expected == current:
                self._fail(f"{step}, refused", "cas: a save on the stored cursor applies")
            if not late and actor == RECONCILER:
                self.fence = frozenset()
            return
        after = abstraction(snapshot, self.state)
        step += f", applied: cursor {self.state.cursor} -> {snapshot.cursor}"
        if expected != current or snapshot.cursor != self.state.cursor + 1:
            self._fail(step, "cas: a save applies only on the stored cursor, and adds one", after)
        client = actor not in (HOST, RECONCILER)
        now = write_clock(snapshot)
        records = dict(after.records)
        unchanged = True
        for token, old in self.state.records.items():
            if token not in records and not old.status.is_terminal:
                self._fail(f"{step}; {token} pruned", "retention: only final records go", after)
        for token, new in after.records.items():
            old_record = self.state.records.get(token)
            if old_record is None:
                done = acted(self.upstream, new.tool_call_id)
                if new.status is not INITIAL and not (done == "born" and new.status.is_terminal):
                    self._fail(
                        f"{step}; {token} proposed as {new.status}",
                        f"propose: a record is born {INITIAL} (final only if upstream handled it)",
                        after,
                    )
                if new.status is INITIAL and done is not None:
                    # The model's initial state: a pending record whose call upstream awaits.
                    self._fail(
                        f"{step}; {token} proposed as {new.status}",
                        f"propose: a {INITIAL} record's call is untouched upstream (it did {done})",
                        after,
                    )
                unchanged = False
                continue
            old = old_record.status
            if new.status is old:
                continue
            unchanged = False
            expired = now >= new.expires_at  # the model's guard: the clock past expiresAt
            move = f"{step}; {token} {old} -> {new.status}"
            if not _events(old, new.status, expired):
                self._fail(
                    move,
                    f"table: no event of the confirmation machine moves {old} to {new.status} "
                    f"(expired={expired})",
                    after,
                )
            if old is INITIAL:  # a claim: its writer owns it (alive if it acts on it)
                records[token] = replace(new, claimant=actor, alive=client and alive, called=False)
            elif new.status is INITIAL:  # a release
                if actor != RECONCILER or old_record.alive:
                    self._fail(
                        move,
                        "release: only the reconciler releases, and only a claim whose "
                        f"claimant is gone (claimant {old_record.claimant}, "
                        f"{'alive' if old_record.alive else 'gone'})",
                        after,
                    )
                records[token] = replace(new, claimant=None, alive=False, called=False)
            else:  # a completion
                if actor not in (RECONCILER, old_record.claimant):
                    self._fail(
                        move,
                        f"completion: only the claimant ({old_record.claimant}) or the "
                        "reconciler completes a claim",
                        after,
                    )
                done = acted(self.upstream, new.tool_call_id)
                if done != ACTED_FOR[new.status]:
                    self._fail(
                        move,
                        f"completion: {new.status} only after upstream did "
                        f"{ACTED_FOR[new.status]} (it did {done or 'nothing'})",
                        after,
                    )
                records[token] = replace(new, alive=False)
        if (after.turn, after.finished) != (self.state.turn, self.state.finished):
            self._check_lease(step, now, after)
        self.state = replace(after, records=records)
        if actor == RECONCILER and not late:
            # An applied save that changes no record is the resume's fence of every claim.
            self.fence = (
                frozenset(t for t, r in records.items() if r.status.is_processing)
                if unchanged
                else frozenset()
            )

    def _check_lease(self, step: str, now: int, after: Abstract) -> None:
        """Each turn id's lease moves by a cell of ``LEASE_TABLE`` under the model's ``busy``
        (some lease had not expired at the write's clock reading)."""
        old_turn, old_done = self.state.turn, self.state.finished
        busy = old_turn is not None and old_turn[1] > now
        ids = {t[0] for t in (old_turn, after.turn) if t is not None} | old_done | after.finished
        for turn_id in sorted(ids):
            was = _lease_state(turn_id, old_turn, old_done)
            now_is = _lease_state(turn_id, after.turn, after.finished)
            if was is TurnLeaseState.RELEASED and turn_id not in after.finished:
                continue  # the capped list of finished turns forgot it: not a lease move
            renewed = was is now_is is TurnLeaseState.HELD and old_turn != after.turn
            if was is now_is and not renewed:
                continue
            if not [e for e in TurnLeaseEvent if LEASE_TABLE.get((was, e, busy)) is now_is]:
                self._fail(
                    f"{step}; turn {turn_id} {was} -> {now_is}",
                    f"lease: no event of the turn-lease machine moves {was} to {now_is} "
                    f"(busy={busy})",
                    after,
                )

    # ------------------------------------------------------------------ upstream
    def upstream_call(self, effect: CallApprove | CallDeny) -> None:
        """``actor`` is about to call upstream (whether or not the call will reach it)."""
        self.steps += 1
        actor = self.actor
        kind = "approve" if isinstance(effect, CallApprove) else "deny"
        step = f"{actor} calls upstream {kind} {effect.tool_call_id}"
        found = [
            (t, r) for t, r in self.state.records.items() if r.tool_call_id == effect.tool_call_id
        ]
        if not found:
            if kind == "deny" and actor not in (HOST, RECONCILER):
                return  # a propose that could not bind the call it created denies it
            self._fail(step, "claim-first: upstream is called only for a stored claim")
            return
        token, record = found[0]
        if not record.status.is_processing:
            self._fail(step, f"claim-first: {token} is {record.status}, not a saved claim")
        wanted = "approve" if record.status is CONFIRMATION_FACTS.approving else "deny"
        if kind != wanted:
            self._fail(step, f"claim-first: the claim {record.status} calls {wanted}")
        if isinstance(effect, CallDeny) and not effect.reason:
            self._fail(step, f"reason: the deny of a {record.status} claim carries its reason")
        if actor == RECONCILER:
            if token not in self.fence:
                self._fail(step, "fence: a resume re-saves the claim before calling upstream")
            self.fence = frozenset()
            return
        if record.claimant != actor or not record.alive:
            self._fail(
                step,
                f"claim-first: only the live claimant ({record.claimant}) calls upstream",
            )
        if record.called:
            self._fail(step, "claim-first: the claimant calls upstream once per claim")
        records = dict(self.state.records)
        records[token] = replace(record, called=True)
        self.state = replace(self.state, records=records)

    # ------------------------------------------------------------------ processes
    def gone(self, actor: str) -> None:
        """``actor`` crashed or ended its plan: it will not act on its claims any more (the
        reconciler: its run ended, so no fence carries over to the next one)."""
        if actor == RECONCILER:
            self.fence = frozenset()
        if not any(r.claimant == actor and r.alive for r in self.state.records.values()):
            return
        records = {
            t: replace(r, alive=False) if r.claimant == actor else r
            for t, r in self.state.records.items()
        }
        self.state = replace(self.state, records=records)


# --------------------------------------------------------------------------- the ledger
# The same check for the tool-execution ledger (the model's -DLEDGER part): each call's record
# ``call:<id>`` against the generated ``EXECUTION_TABLE`` (``EX_NEXT`` in lifecycle_tables.pml)
# and ``body_once``. The abstraction of a stored record is its state and its claim nonce; the
# guards are the model's: ``ours`` (the stored claim is the writer's own), ``idempotent`` (the
# host declared the tool safe to run twice). An operator holds no claim: both guards off.
# An operator's verdict (ADR-0136, the model's -DSETTLE part): its audit entry
# ``audit-settle:<call>:<version>:<nonce>`` is created before its write, which stores the nonce
# as the record's ``verdict``; every other write keeps it; and ``settle_decided``'s rule (an
# entry applied iff its nonce is a record's verdict or some entry follows it) names exactly
# the verdicts that applied (``settle_audit_exact``).
OPERATOR = "operator"
SETTLE_PREFIX = "audit-settle:"
#: The events each kind of writer fires (a worker claims and finishes; an operator settles).
WORKER_EVENTS = (ExecutionEvent.CLAIM, ExecutionEvent.FINISH)
OPERATOR_EVENTS = (ExecutionEvent.SETTLE_RAN, ExecutionEvent.RELEASE)


@dataclass(frozen=True)
class Entry:
    """One ledger record as the model sees it (``ex_st[i]``, ``ex_by[i]``) and its version."""

    state: ExecutionState = ExecutionState.ABSENT
    claim: str | None = None
    version: int | None = None
    #: ``LedgerEntry.verdict``: the nonce of the last operator's verdict that applied
    verdict: str | None = None

    def __str__(self) -> str:
        claim = "" if self.claim is None else f" claim {self.claim[:8]}"
        return f"{self.state}{claim} v{self.version}"


def ledger_abstraction(text: str, version: int) -> Entry:
    """The model state of one stored ledger record (its JSON text and storage version)."""
    raw = json.loads(text)
    return Entry(ExecutionState(raw["state"]), raw["claim"], version, raw.get("verdict"))


@dataclass
class LedgerChecker:
    """Follows one run's ledger writes and body runs; refuses a step the model does not allow."""

    entries: dict[str, Entry] = field(default_factory=dict)
    ran: dict[str, int] = field(default_factory=dict)
    #: The claims under which a body ran (ghost: what an operator's verdict must agree with).
    ran_claims: set[str] = field(default_factory=set)
    #: The acting process, whether its tool is idempotent, and its claim nonce once it wrote one.
    actor: str = OPERATOR
    idempotent: bool = False
    #: The acting worker's claim nonce of each call it claimed (one per ``execute``).
    nonces: dict[str, str] = field(default_factory=dict)
    steps: int = 0
    failure: Disallowed | None = None
    #: Settle entries created (nonce -> the ledger key it settles, and its ``follows``) and
    #: the verdict nonces whose write applied (ghost: ``se_applied``).
    settles: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    verdicts: set[str] = field(default_factory=set)

    @contextlib.contextmanager
    def acting(self, actor: str, *, idempotent: bool = False) -> Iterator[None]:
        """One process's call (a worker's ``execute``, an operator's verdict) inside the block;
        it may be nested (a body's side effect), so the outer process is restored after."""
        before = self.actor, self.idempotent, self.nonces
        self.actor, self.idempotent, self.nonces = actor, idempotent, {}
        try:
            yield
        except Exception:
            if self.failure is not None:
                raise self.failure from None
            raise
        finally:
            self.actor, self.idempotent, self.nonces = before
        if self.failure is not None:
            raise self.failure

    def _fail(self, step: str, rule: str, key: str, after: Entry | None = None) -> None:
        lines = [
            f"ledger step {self.steps} is not a step the model allows: {step}",
            f"  rule broken: {rule}",
            f"  model state before: {key} {self.entries.get(key, Entry())}, "
            f"body ran {self.ran.get(key, 0)}x",
        ]
        if after is not None:
            lines.append(f"  model state after:  {key} {after}")
        if self.failure is None:
            self.failure = Disallowed("\n".join(lines))
        raise self.failure

    def saved(self, key: str, text: str, expected: int | None, applied: bool) -> None:
        """A ledger save reached the store."""
        if self.failure is not None:
            return
        if key.startswith(SETTLE_PREFIX):
            return self._settle_entry(key, text, expected, applied)
        self.steps += 1
        old = self.entries.get(key, Entry())
        step = f"{self.actor} saves {key} expecting version {expected}"
        if not applied:
            if expected == old.version:
                self._fail(f"{step}, refused", "cas: a save on the stored version applies", key)
            return
        new = ledger_abstraction(text, (expected or 0) + 1)
        step += f", applied: {old.state} -> {new.state}"
        if expected != old.version:
            self._fail(step, "cas: a save applies only on the stored version", key, new)
        if self.actor == OPERATOR:
            events, guards = OPERATOR_EVENTS, (False, False)
        else:
            if key not in self.nonces and new.state is ExecutionState.EXECUTING and new.claim:
                self.nonces[key] = new.claim  # a worker's claim write carries its nonce
            events, guards = WORKER_EVENTS, (old.claim == self.nonces.get(key), self.idempotent)
        fired = [e for e in events if EXECUTION_TABLE.get((old.state, e, guards)) is new.state]
        if not fired:
            self._fail(
                step,
                f"table: no {'/'.join(events)} of the execution machine moves {old.state} to "
                f"{new.state} (ours={guards[0]}, idempotent={guards[1]})",
                key,
                new,
            )
        if self.actor == OPERATOR and new.verdict != old.verdict:
            settle = self.settles.get(new.verdict or "")
            if settle is None or settle[0] != key:
                self._fail(step, "settle-entry-first: a verdict applies only after its entry", key)
            elif settle[1] != old.verdict:
                self._fail(
                    step, "settle-entry-first: a verdict's entry read the entry it replaces", key
                )
            self.verdicts.add(new.verdict or "")
        elif new.verdict != old.verdict:
            self._fail(step, "verdict-kept: only a verdict changes the verdict nonce", key, new)
        self.entries[key] = new
        self._settle_exact(step, key)

    def _settle_entry(self, key: str, text: str, expected: int | None, applied: bool) -> None:
        """An operator's settle entry was created (create-only: ``expected`` is None)."""
        if not applied or expected is not None:
            return
        self.steps += 1
        raw = json.loads(text)
        ledger = next(
            (k for k in self.entries if k.split(":", 1)[1] == str(raw["toolCallId"])), None
        )
        if ledger is None:  # a settle entry of a call never claimed here: not ours to follow
            return
        self.settles[str(raw["nonce"])] = (ledger, raw.get("follows"))
        self._settle_exact(f"{self.actor} creates {key}", ledger)

    def _settle_exact(self, step: str, key: str) -> None:
        """settle_audit_exact: the entries ``settle_decided`` marks applied are those whose
        verdict's write applied."""
        named = {e.verdict for e in self.entries.values() if e.verdict is not None}
        named |= {follows for _, follows in self.settles.values() if follows is not None}
        for nonce, (ledger, _) in self.settles.items():
            if ledger == key and (nonce in named) != (nonce in self.verdicts):
                self._fail(
                    step,
                    f"settle_audit_exact: the settle entry {nonce[:8]} reads as "
                    f"{'applied' if nonce in named else 'not applied'}, and it "
                    f"{'did' if nonce in self.verdicts else 'did not'} apply",
                    key,
                )

    def body(self, key: str) -> None:
        """The acting worker's tool body is about to run."""
        if self.failure is not None:
            return
        self.steps += 1
        entry = self.entries.get(key, Entry())
        step = f"{self.actor} runs the body of {key}"
        if entry.state is not ExecutionState.EXECUTING or entry.claim != self.nonces.get(key):
            self._fail(step, "claim-first: a body runs only under its own stored claim", key)
        if self.ran.get(key, 0) and not self.idempotent:
            self._fail(step, "body_once: a tool body runs at most once per tool call", key)
        self.ran[key] = self.ran.get(key, 0) + 1
        if entry.claim is not None:
            self.ran_claims.add(entry.claim)

    def ran_under(self, key: str) -> bool:
        """Whether a body ran under the stored claim of ``key`` (so "it did not run" is false)."""
        return self.entries.get(key, Entry()).claim in self.ran_claims


# --------------------------------------------------------------------------- bridge runs
# The same check for the bridges' agent runs (the model's ``Runner`` processes, -DLEDGER): each
# run record ``run:<id>`` against the generated ``RUN_TABLE`` (``RUN_NEXT``), each of its calls'
# ledger records through ``LedgerChecker``, and the rules across records the model has. The
# abstraction of a stored run is (``run_st``, claim nonce, ``run_ver``, ``run_idx``, lease); the
# ghost ``run_owner`` is the process whose claim is stored and whether it is alive (it still runs
# the plan that wrote it). The model's guards: ``ours`` (the stored claim is the writer's own:
# the writer is the process that wrote it) and ``recover`` (``LEASE_PASSED``: the stored
# ``leaseUntilMs`` has passed at the write's clock reading, which the model reads as "its owner
# is gone"; so both are checked, and only the sweep recovers).
SWEEP = "sweep"


@dataclass(frozen=True)
class Run:
    """One run record as the model sees it, and its ghost owner."""

    state: RunState = RunState.ABSENT
    claim: str | None = None
    version: int | None = None
    indexed: bool = False
    lease_until: int | None = None
    #: The approval calls of the current batch, and whether every external call is answered.
    calls: tuple[str, ...] = ()
    answered: bool = True
    clock: int = 0
    claimant: str | None = None
    alive: bool = False

    def __str__(self) -> str:
        parts = [f"{self.state} v{self.version}"]
        if self.claim is not None:
            owner = self.claimant or "?"
            parts.append(f"claim {self.claim[:8]} of {owner} ({'alive' if self.alive else 'gone'})")
        if self.lease_until is not None:
            parts.append(f"lease until {self.lease_until}")
        parts.append("indexed" if self.indexed else "not indexed")
        return ", ".join(parts)


def run_abstraction(text: str, version: int, processing: bool) -> Run:
    """The model state of one stored run record (its JSON text, version and index flag)."""
    raw = json.loads(text)
    approvals = tuple(str(c["id"]) for c in raw["calls"] if c["kind"] == "approval")
    externals = {str(c["id"]) for c in raw["calls"] if c["kind"] != "approval"}
    return Run(
        RunState(raw["state"]),
        raw.get("claim"),
        version,
        processing,
        raw.get("leaseUntilMs"),
        approvals,
        externals <= set(raw.get("external") or {}),
        int(raw.get("updatedMs", 0)),
    )


@dataclass
class BridgeChecker:
    """Follows one bridged session's writes, resumes and tool bodies; refuses a step the model
    does not allow. ``clock`` is the world's clock (a body's lease is judged at it)."""

    clock: Callable[[], int]
    runs: dict[str, Run] = field(default_factory=dict)
    ledger: LedgerChecker = field(default_factory=LedgerChecker)
    #: Ghost: each call's final status once any write showed it (the model's ``reg_st`` never
    #: leaves a final state; retention pruning the record does not undo the decision).
    decided: dict[str, ConfirmationStatus] = field(default_factory=dict)
    #: The calls the stored envelope binds now, and the reviewers' reasons (``denial:``).
    bound: frozenset[str] = frozenset()
    reasons: dict[str, str] = field(default_factory=dict)
    #: Per call, its highest audit entry's (cursor, reason): the deciding claim's own once the
    #: call is decided (ADR-0132), whose reason the model is told over the ``denial:`` record's.
    entries: dict[str, tuple[int, str | None]] = field(default_factory=dict)
    #: The calls whose ``decided:`` record applied; and the decided calls proposed again with
    #: no such record (ADR-0103 leaves that window open: decided, its decider killed before
    #: recording it, pruned before any bridge call saw it), which then count as new calls.
    recorded: set[str] = field(default_factory=set)
    reopened: set[str] = field(default_factory=set)
    actor: str = HOST
    #: The processes that still run the plan they started (their claims are alive).
    live: set[str] = field(default_factory=set)
    steps: int = 0
    failure: Disallowed | None = None

    @contextlib.contextmanager
    def acting(self, actor: str) -> Iterator[None]:
        """Steps inside the block are ``actor``'s (a client's plan, the sweep, an operator);
        it is alive until :meth:`gone`."""
        before = self.actor
        self.actor = actor
        if actor != OPERATOR:
            self.live.add(actor)
        try:
            with self.ledger.acting(actor):
                yield
        except Exception:
            if self.failure is not None:
                raise self.failure from None
            raise
        finally:
            self.actor = before
        if self.failure is not None:
            raise self.failure

    def gone(self, actor: str) -> None:
        """``actor`` crashed or ended its plan: it will not act on its claims any more."""
        self.live.discard(actor)
        for key, run in self.runs.items():
            if run.claimant == actor and run.alive:
                self.runs[key] = replace(run, alive=False)

    def _fail(self, step: str, rule: str, before: object = None, after: object = None) -> None:
        lines = [
            f"bridge step {self.steps} is not a step the model allows: {step}",
            f"  rule broken: {rule}",
        ]
        if before is not None:
            lines.append(f"  model state before: {before}")
        if after is not None:
            lines.append(f"  model state after:  {after}")
        if self.failure is None:
            self.failure = Disallowed("\n".join(lines))
        raise self.failure

    # ------------------------------------------------------------------ the envelope
    def saved_envelope(self, snapshot: SessionSnapshot, applied: bool) -> None:
        """An envelope save reached the store: a decided call is never proposed again, and a
        decision never changes."""
        if self.failure is not None or not applied:
            return
        self.steps += 1
        bound = frozenset(b.tool_call_id for b in snapshot.confirmations)
        for binding in snapshot.confirmations:
            call = binding.tool_call_id
            was = self.decided.get(call)
            if call not in self.bound and was is not None and call not in self.recorded:
                self.reopened.add(call)
                del self.decided[call]
                was = None
            if call not in self.bound and was is not None:
                self._fail(
                    f"{self.actor} saves the envelope binding {call} as {binding.status}",
                    f"propose: a decided call is never proposed again (it was decided {was})",
                    f"{call} decided {was}, not in the envelope",
                )
            if binding.status.is_terminal:
                if was is not None and was is not binding.status:
                    self._fail(
                        f"{self.actor} saves {call} as {binding.status}",
                        "table: nothing leaves a final state",
                        f"{call} decided {was}",
                    )
                self.decided[call] = binding.status
        self.bound = bound

    # ------------------------------------------------------------------ records
    def saved_record(
        self, key: str, text: str, expected: int | None, applied: bool, processing: bool
    ) -> None:
        """A record save reached the store (``CheckedStorage``'s observer)."""
        if self.failure is not None:
            return
        if key.startswith(("call:", SETTLE_PREFIX)):
            self.ledger.saved(key, text, expected, applied)
        elif key.startswith("run:"):
            self._saved_run(key, text, expected, applied, processing)
        elif applied and key.startswith("decided:"):
            self._saved_decision(key, text)
        elif applied and key.startswith("denial:") and expected is None:
            self.reasons.setdefault(key.split(":", 1)[1], str(json.loads(text)["reason"]))
        elif applied and key.startswith("audit:") and expected is None:
            entry = json.loads(text)
            call, cursor = str(entry["toolCallId"]), int(entry["cursor"])
            if cursor >= self.entries.get(call, (-1, None))[0]:
                self.entries[call] = (cursor, entry.get("reason"))

    def _call_of(self, key: str) -> str | None:
        """The call a ``decided:`` / ``denial:`` record is about (its key ends like the call's
        ledger key)."""
        calls = {c for run in self.runs.values() for c in run.calls} | set(self.decided)
        return next((c for c in calls if _record_suffix(c) == key.split(":", 1)[1]), None)

    def _saved_decision(self, key: str, text: str) -> None:
        self.steps += 1
        status = ConfirmationStatus(json.loads(text)["status"])
        call = self._call_of(key)
        if call is None or self.decided.get(call) is not status:
            was = None if call is None else self.decided.get(call)
            self._fail(
                f"{self.actor} records {key} as {status}",
                "decided: a decision record keeps the call's own final status",
                f"{call or key} decided {was or 'never'}",
            )
        self.recorded.add(call)

    def _saved_run(
        self, key: str, text: str, expected: int | None, applied: bool, processing: bool
    ) -> None:
        self.steps += 1
        old = self.runs.get(key, Run())
        actor = self.actor
        step = f"{actor} saves {key} expecting version {expected}"
        if not applied:
            if expected == old.version:
                self._fail(f"{step}, refused", "cas: a save on the stored version applies", old)
            return
        new = run_abstraction(text, (expected or 0) + 1, processing)
        step += f", applied: {old.state} -> {new.state}"
        if expected != old.version:
            self._fail(step, "cas: a save applies only on the stored version", old, new)
        if new.indexed is (new.state in MACHINES["run"].finals):
            self._fail(
                step,
                "index: the write that leaves a run completed takes it out of the processing "
                "index, every other run write puts it in (run_idx)",
                old,
                new,
            )
        ours = old.claim is not None and old.claimant == actor
        recover = False
        claims = new.state is RunState.CONTINUING and new.claim != old.claim
        if claims:  # the writer's own fresh claim: it owns the run now
            new = replace(new, claimant=actor, alive=actor in self.live)
        elif new.state is RunState.CONTINUING:
            new = replace(new, claimant=old.claimant, alive=old.alive)
        takeover = claims and old.state is RunState.CONTINUING
        if takeover:
            passed = old.lease_until is None or old.lease_until <= new.clock
            if not actor.startswith(SWEEP):
                self._fail(step, "recover: only the sweep takes over a continuation", old, new)
            if not passed:
                self._fail(
                    step,
                    f"recover: a continuation is taken over only once its lease passed "
                    f"(LEASE_PASSED: lease until {old.lease_until}, write clock {new.clock})",
                    old,
                    new,
                )
            if old.alive:
                self._fail(
                    step,
                    f"recover: a continuation is taken over only once its claimant is gone "
                    f"({old.claimant} is alive)",
                    old,
                    new,
                )
            recover = True
        fired = [e for e in RunEvent if RUN_TABLE.get((old.state, e, (ours, recover))) is new.state]
        if not fired:
            self._fail(
                step,
                f"table: no event of the run machine moves {old.state} to {new.state} "
                f"(ours={ours}, recover={recover})",
                old,
                new,
            )
        if new.state is RunState.CONTINUING and not claims and not ours:
            self._fail(step, "ours: only the claimant renews its claim", old, new)
        if claims:
            undecided = [c for c in new.calls if c not in self.decided]
            if undecided or not new.answered:
                self._fail(
                    step,
                    "continue: a run is claimed only once every call is decided "
                    f"(undecided: {', '.join(undecided) or 'an external call unanswered'})",
                    old,
                    new,
                )
        self.runs[key] = new

    # ------------------------------------------------------------------ the runtime
    def resumed(self, run_id: str, claim: str | None, decisions: tuple[Any, ...]) -> None:
        """The acting process resumes the runtime of ``run_id`` from its claim ``claim`` with
        ``decisions``: only from its own stored continuation claim, each call told its own
        decision: a rejection with its deciding rejecter's reason when there is one (its audit
        entry's; the ``denial:`` record's for a call decided with no entry), every other
        denial with some message for the model."""
        if self.failure is not None:
            return
        self.steps += 1
        key = f"run:{run_id}"
        run = self.runs.get(key, Run())
        step = f"{self.actor} resumes {key}"
        if (
            run.state is not RunState.CONTINUING
            or run.claim != claim
            or not (run.claimant == self.actor and run.alive)
        ):
            self._fail(step, "continue: a run resumes only under its own live claim", run)
        told = {d.tool_call_id: d for d in decisions}
        for call in run.calls:
            status, decision = self.decided.get(call), told.get(call)
            if status is None or decision is None:
                self._fail(f"{step}: {call} undecided", "continue: every call is decided", run)
                return
            approved = status is ConfirmationStatus.APPROVED
            reason = None
            if status is ConfirmationStatus.REJECTED and call in self.entries:
                reason = self.entries[call][1]  # the decider's own (none: the generic text)
            elif status is ConfirmationStatus.REJECTED:
                reason = self.reasons.get(_record_suffix(call))
            said = f"{step}: {call} told approved={decision.approved} {decision.message!r}"
            if decision.approved is not approved:
                self._fail(said, f"continue: a {status} call is told its own decision", run)
            if not approved and (not decision.message or reason not in (None, decision.message)):
                self._fail(
                    said,
                    f"reason: a {status} call is told {reason or 'why it did not run'} (the "
                    "reviewer's stored reason, if any, reaches the model)",
                    run,
                )

    def body(self, call: str) -> None:
        """The acting process's tool body of ``call`` is about to run: under its own
        ``executing`` ledger claim (``LedgerChecker``), for an ``approved`` call
        (``body_approved``), inside its own live continuation claim whose lease holds."""
        from akchat_fsm.integrations.ledger import ledger_key

        if self.failure is not None:
            return
        self.ledger.body(ledger_key(call))
        self.steps += 1
        owner = [(k, r) for k, r in self.runs.items() if call in r.calls]
        if not owner:
            return  # a call that needed no approval (the runtime ran it at the start)
        key, run = owner[0]
        step = f"{self.actor} runs the body of {call} ({key})"
        if self.decided.get(call) is not ConfirmationStatus.APPROVED:
            self._fail(step, "body_approved: a body runs only for an approved call", run)
        if run.state is not RunState.CONTINUING or run.claimant != self.actor or not run.alive:
            self._fail(step, "claim-first: a body runs only inside its own continuation", run)
        if run.lease_until is not None and run.lease_until <= self.clock():
            self._fail(step, "lease: a body starts only while its continuation's lease holds", run)


def _record_suffix(call: str) -> str:
    """What follows the prefix in the keys of a call's records (``call:``, ``decided:``,
    ``denial:``): its ledger key's."""
    from akchat_fsm.integrations.ledger import ledger_key

    return ledger_key(call).split(":", 1)[1]


class CheckedStorage:
    """The real adapter, with every save that reaches it reported to a :class:`BridgeChecker`
    (applied or refused, whatever the caller then hears). Spells out each method it forwards
    (a runtime-checkable protocol does not see ``__getattr__``)."""

    def __init__(self, inner: Any, checker: BridgeChecker) -> None:
        self.inner, self.checker = inner, checker

    def load(self, session_id: str) -> Any:
        return self.inner.load(session_id)

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        applied = bool(self.inner.save(snapshot, expected_cursor))
        self.checker.saved_envelope(snapshot, applied)
        return applied

    def delete(self, session_id: str) -> None:
        self.inner.delete(session_id)

    def load_record(self, session_id: str, key: str) -> Any:
        return self.inner.load_record(session_id, key)

    def save_record(
        self,
        session_id: str,
        key: str,
        text: str,
        expected_version: int | None,
        *,
        processing: bool = False,
    ) -> bool:
        try:
            applied = bool(
                self.inner.save_record(
                    session_id, key, text, expected_version, processing=processing
                )
            )
        except OutcomeUnknown:
            # The real store's own unknown outcome (a reply lost to a socket timeout on a
            # loaded machine), not an injected one: the write may have applied, so the
            # checker is told what a re-read shows, or it would miss an applied write.
            self._unknown_record(session_id, key, text, expected_version, processing)
            raise
        self.checker.saved_record(key, text, expected_version, applied, processing)
        return applied

    def _unknown_record(
        self, session_id: str, key: str, text: str, expected: int | None, processing: bool
    ) -> None:
        try:
            stored = self.inner.load_record(session_id, key)
        except (OutcomeUnknown, StorageUnavailable):
            return  # nothing to tell: the next read the bridge makes is checked anyway
        version = 1 if expected is None else expected + 1
        applied = stored is not None and stored[0] == version and stored[1] == text
        self.checker.saved_record(key, text, expected, applied, processing)

    def list_records(self, session_id: str, prefix: str = "") -> list[str]:
        return list(self.inner.list_records(session_id, prefix))

    def delete_record(self, session_id: str, key: str) -> None:
        # Only the session's own bookkeeping (a propose intent) is ever deleted; none of the
        # records the checker follows is.
        if key.split(":", 1)[0] in ("run", "call", "decided", "denial"):
            raise AssertionError(f"a bridge never deletes {key}")
        self.inner.delete_record(session_id, key)

    def list_processing(self, **options: Any) -> Any:
        return self.inner.list_processing(**options)

    def list_pending(self, *args: Any, **options: Any) -> Any:
        return self.inner.list_pending(*args, **options)

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()


class CheckedRuntime:
    """A bridge's (sync) runtime port whose every resume is first reported to the checker."""

    def __init__(self, inner: Any, checker: BridgeChecker) -> None:
        self.inner, self.checker = inner, checker
        self.runtime = getattr(inner, "runtime", None)

    def start(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.start(*args, **kwargs)

    def resume(self, run: Any, decisions: tuple[Any, ...], guard: Any) -> Any:
        self.checker.resumed(run.run_id, run.claim, decisions)
        return self.inner.resume(run, decisions, guard)
