"""What ``reconcile`` (one session or ``--all``) decides and shows, without an upstream.

The decision per record is the core's (:func:`akchat_fsm.core.records.reconcile_decision` and
the confirmation table), never re-derived here. The command has no upstream chat controller,
so it never calls upstream (ADR-0071): a record whose decision is *resume* is taken out of the
memory the session is reconciled with, so it is left as it is (``unknown``).

A propose intent (a proposal that died between upstream and its binding, ADR-0093) is not in
the envelope. What ``--apply`` would do with it, a dry run learns by running the session's own
reconcile on a private in-memory copy of the session (:func:`intent_plans`): the decision is
the session's, and nothing is written to the store. An intent the session cannot admit is
shown ``refused`` with why, that the intent is kept, and what lets it be bound.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

import click
from rich import box
from rich.table import Table

from ..core import ConfirmationEvent, Reconciliation, UpstreamToolStatus
from ..core.records import confirmation_step, reconcile_decision
from ..errors import ConfigError, InvalidInput
from ..session import ChatDefinition, ReconcileOutcome, resume_chat_session
from ..session import reconcile as reconcile_session
from ..session.sweep import SweepPorts
from ..storage.capabilities import keeps_records
from ..storage.memory import MemoryStorage
from ..wire.jsontext import parse_json_text
from ..wire.memory import MemoryRecord, validate_memory_record
from ..wire.session import ConfirmationBinding, SessionSnapshot
from ._common import inert, pinned_rows, read_source

__all__ = [
    "CONVERSATION_REFUSED",
    "INTENT",
    "LEFT",
    "REFUSED_AFTER",
    "Plan",
    "applied_table",
    "intent_plans",
    "is_refused",
    "load_memory",
    "memory_from_bytes",
    "outcome_row",
    "plan_for",
    "plan_row",
    "plan_table",
    "refused_steps",
    "session_ports",
    "tool_statuses",
]

LEFT = "left as is"
#: The status column of a propose intent: a call waiting upstream with no record yet.
INTENT = "intent"
#: The "after" of an intent the session cannot admit: nothing was bound, the intent stays.
REFUSED_AFTER = "not bound (intent kept)"
CONVERSATION_REFUSED = (
    "this session has a conversation flow; reconcile it from the host with its "
    "ChatDefinition (akchat_fsm.session.reconcile)"
)


@dataclass(frozen=True)
class Plan:
    """What reconciliation would do for one processing record."""

    binding: ConfirmationBinding
    upstream: str  # the tool call's status in memory, or "missing"
    action: str  # complete / release / left as is; an intent's: bind / refused: ...
    after: str  # the record's status afterwards
    intent: bool = False  # a propose intent's call, not a stored record


def load_memory(source: str) -> MemoryRecord:
    """A chat-memory record file (``-``: stdin), bounded like every input, validated as
    upstream validates it. Raises typed errors (``InvalidInput`` and subclasses), so one
    session's unreadable file is that session's failure in a sweep; a verb reading one file
    calls :func:`read_source` itself, which exits as docs/cli.md says (2: unreadable)."""
    try:
        data = read_source(source)
    except click.ClickException as exc:  # too large or unreadable: typed for the sweep
        raise InvalidInput(exc.message) from exc
    return memory_from_bytes(data)


def memory_from_bytes(data: bytes) -> MemoryRecord:
    """The chat-memory record in ``data``, validated as upstream validates it."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput("not UTF-8 text") from exc
    return validate_memory_record(parse_json_text(text))


def tool_statuses(memory: MemoryRecord) -> dict[str, UpstreamToolStatus]:
    return {
        call.id: UpstreamToolStatus(call.status.value)
        for message in memory.messages
        for call in message.tool_calls or ()
    }


def plan_for(
    snapshot: SessionSnapshot, statuses: dict[str, UpstreamToolStatus], release_untouched: bool
) -> list[Plan]:
    """One :class:`Plan` per processing record, from the core's decision."""
    plans: list[Plan] = []
    for binding in snapshot.confirmations:
        if not binding.status.is_processing:
            continue
        upstream = statuses.get(binding.tool_call_id)
        if upstream is None:
            plans.append(Plan(binding, "missing", LEFT, binding.status.value))
            continue
        decision = reconcile_decision(binding.status, upstream, release_untouched)
        if decision is Reconciliation.COMPLETE:
            after = confirmation_step(binding.status, ConfirmationEvent.COMPLETE, False)
            plans.append(Plan(binding, upstream.value, "complete", after.value))
        elif decision is Reconciliation.RELEASE:
            after = confirmation_step(binding.status, ConfirmationEvent.RELEASE, False)
            plans.append(Plan(binding, upstream.value, "release", after.value))
        else:  # RESUME: needs the host's upstream, which this command does not have
            plans.append(Plan(binding, upstream.value, f"{LEFT}: needs upstream", "unchanged"))
    return plans


def _without_untouched(memory: MemoryRecord, plans: list[Plan]) -> dict[str, Any]:
    """The memory record minus the tool calls this command must not resume (no upstream)."""
    skip = {p.binding.tool_call_id for p in plans if p.action.startswith(LEFT)}
    wire = memory.to_wire()
    for message in wire["messages"]:
        if "toolCalls" in message:
            message["toolCalls"] = [c for c in message["toolCalls"] if c["id"] not in skip]
    return wire


class _FileMemory:
    """``ChatMemory`` over an already validated record."""

    def __init__(self, record: dict[str, Any]) -> None:
        self._record = record

    def load(self) -> dict[str, Any]:
        return self._record


def session_ports(
    snapshot: SessionSnapshot, memory: MemoryRecord, release_untouched: bool
) -> SweepPorts:
    """What the command reconciles ``snapshot``'s session with: its own definition id and
    revision, the memory minus the calls it must not resume, and no upstream."""
    if snapshot.conversation is not None:
        raise ConfigError(CONVERSATION_REFUSED)
    plans = plan_for(snapshot, tool_statuses(memory), release_untouched)
    definition = ChatDefinition(snapshot.definition_id, snapshot.definition_revision)
    return SweepPorts(definition, _FileMemory(_without_untouched(memory, plans)))


def intent_plans(
    storage: Any, snapshot: SessionSnapshot, memory: MemoryRecord, release_untouched: bool
) -> list[Plan]:
    """What ``--apply`` would do with the session's propose intents: the session's own
    reconcile run on an in-memory copy of its envelope and records (never the store), the
    outcomes of intents kept (``bound``, ``refused``). Empty for a store without records (it
    holds no intents) and for a session with a conversation flow (``--apply`` refuses it)."""
    if snapshot.conversation is not None or not keeps_records(storage):
        return []
    sid = snapshot.session_id
    copy = MemoryStorage()
    copy.save(snapshot, None)
    for key in storage.list_records(sid):
        stored = storage.load_record(sid, key)
        if stored is not None:
            copy.save_record(sid, key, stored[1], None)
    ports = session_ports(snapshot, memory, release_untouched)
    assert ports.memory is not None  # session_ports always reconciles with the file's memory
    session = resume_chat_session(ports.definition, session_id=sid, storage=copy)
    outcomes = reconcile_session(session, ports.memory, release_untouched=release_untouched)
    upstream = UpstreamToolStatus.REQUIRES_CONFIRMATION.value
    return [
        Plan(o.record, upstream, "bind", o.record.status.value, intent=True)
        if o.action == "bound"
        else Plan(o.record, upstream, _refused_action(o), REFUSED_AFTER, intent=True)
        for o in outcomes
        if o.action in ("bound", "refused")
    ]


def _refused_action(outcome: ReconcileOutcome) -> str:
    reason = str(outcome.refused or "refused").rstrip(".")
    return f"refused: {reason}; intent kept, decide a record so it can be bound"


def is_refused(row: dict[str, str]) -> bool:
    """Whether a plan or outcome row is an intent the session could not admit."""
    return row.get("action", "").startswith("refused")


def refused_steps(url: str, session_id: str, rows: list[dict[str, str]], rerun: str) -> list[str]:
    """The next steps of a session whose intents were refused: decide one of its records
    (the pending index lists them), then ``rerun`` (a reconcile that binds the waiting calls)."""
    calls = ", ".join(r["toolCallId"] for r in rows if is_refused(r))
    listing = shlex.join(["akchat-fsm", "pending", url, "--session", session_id])
    return [
        f"# {calls}: waiting upstream, refused: the session is at its limit of live "
        "confirmations, and the intent is kept; approve or reject one of its pending records "
        f"(from the host or the inbox; {listing} lists them), then bind the waiting call:",
        rerun,
    ]


# --------------------------------------------------------------------------- output


def plan_row(plan: Plan) -> dict[str, str]:
    """One dry-run record for ``--json``."""
    return {
        "token": plan.binding.token,
        "toolCallId": plan.binding.tool_call_id,
        "status": INTENT if plan.intent else plan.binding.status.value,
        "inMemory": plan.upstream,
        "action": plan.action,
        "after": plan.after,
    }


def outcome_row(outcome: ReconcileOutcome) -> dict[str, str]:
    """One applied record for ``--json`` (``unknown`` is shown as left as is; a ``refused``
    intent with why, as an intent that is still no record)."""
    if outcome.action == "refused":
        return {
            "token": outcome.token,
            "toolCallId": outcome.tool_call_id,
            "status": INTENT,
            "action": _refused_action(outcome),
            "after": REFUSED_AFTER,
        }
    return {
        "token": outcome.token,
        "toolCallId": outcome.tool_call_id,
        "status": outcome.before.value,
        "action": LEFT if outcome.action == "unknown" else outcome.action,
        "after": outcome.record.status.value,
    }


def _table(title: str, columns: tuple[str, ...]) -> Table:
    # Tokens and ids never wrap (a copied token must work); print_renderable widens instead.
    table = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left")
    for column in columns:
        table.add_column(column, no_wrap=True)
    return table


def plan_table(plans: list[Plan], title: str) -> Table:
    table = _table(title, ("token", "tool call", "status", "in memory", "reconcile", "after"))
    return pinned_rows(table, ([inert(v) for v in plan_row(p).values()] for p in plans))


def applied_table(outcomes: tuple[ReconcileOutcome, ...], title: str = "Applied") -> Table:
    table = _table(title, ("token", "tool call", "before", "action", "now"))
    return pinned_rows(table, ([inert(v) for v in outcome_row(o).values()] for o in outcomes))
